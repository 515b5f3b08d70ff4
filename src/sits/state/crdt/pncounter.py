"""Counter that goes both ways: two G-Counters, increments and decrements."""

from __future__ import annotations

from dataclasses import dataclass, field

from sits.state.crdt.gcounter import GCounter


@dataclass(frozen=True, slots=True)
class PNCounter:
    up: GCounter = field(default_factory=GCounter)
    down: GCounter = field(default_factory=GCounter)

    @property
    def value(self) -> int:
        return self.up.value - self.down.value

    def add(self, replica: str, n: int) -> PNCounter:
        if n >= 0:
            return PNCounter(self.up.increment(replica, n), self.down)
        return PNCounter(self.up, self.down.increment(replica, -n))

    def merge(self, other: PNCounter) -> PNCounter:
        return PNCounter(self.up.merge(other.up), self.down.merge(other.down))
