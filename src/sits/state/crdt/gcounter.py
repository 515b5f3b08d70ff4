"""Grow-only counter, one entry per replica; the same shape is a version vector."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Order = Literal["equal", "before", "after", "concurrent"]


@dataclass(frozen=True, slots=True)
class GCounter:
    """Each replica only ever raises its own entry; merge takes the entry-wise maximum."""

    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def value(self) -> int:
        return sum(self.counts.values())

    def get(self, replica: str) -> int:
        return self.counts.get(replica, 0)

    def increment(self, replica: str, n: int = 1) -> GCounter:
        if n < 0:
            raise ValueError("a G-Counter only grows; use a PN-Counter to decrement")
        if n == 0:
            return self
        return GCounter({**self.counts, replica: self.get(replica) + n})

    def merge(self, other: GCounter) -> GCounter:
        if not other.counts:
            return self
        merged = dict(self.counts)
        for replica, n in other.counts.items():
            if n > merged.get(replica, 0):
                merged[replica] = n
        return GCounter(merged)

    def compare(self, other: GCounter) -> Order:
        """Causal order of two version vectors."""
        keys = self.counts.keys() | other.counts.keys()
        less = any(self.get(k) < other.get(k) for k in keys)
        more = any(self.get(k) > other.get(k) for k in keys)
        if less and more:
            return "concurrent"
        return "before" if less else "after" if more else "equal"

    def __eq__(self, other: object) -> bool:
        # Zero entries carry no information: {a: 0} and {} are the same counter.
        if not isinstance(other, GCounter):
            return NotImplemented
        return {k: v for k, v in self.counts.items() if v} == {k: v for k, v in other.counts.items() if v}

    def __hash__(self) -> int:
        return hash(frozenset((k, v) for k, v in self.counts.items() if v))


VersionVector = GCounter  # the same value read as "how much of each replica's history I have seen"
