"""A map of last-writer-wins registers; removal is a tombstone (value None) that wins by stamp too."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sits.state.crdt.hlc import Stamp
from sits.state.crdt.lww_register import LWWRegister

V = TypeVar("V")


@dataclass(frozen=True)  # no slots: Generic[...]() sets __orig_class__
class LWWMap(Generic[V]):
    entries: Mapping[str, LWWRegister[V | None]] = field(default_factory=dict)

    def put(self, key: str, value: V, stamp: Stamp) -> LWWMap[V]:
        return self.merge(LWWMap({key: LWWRegister(value, stamp)}))

    def remove(self, key: str, stamp: Stamp) -> LWWMap[V]:
        return self.merge(LWWMap({key: LWWRegister(None, stamp)}))

    def get(self, key: str) -> V | None:
        register = self.entries.get(key)
        return None if register is None else register.value

    def stamp(self, key: str) -> Stamp | None:
        register = self.entries.get(key)
        return None if register is None else register.stamp

    def items(self) -> Iterator[tuple[str, V]]:
        """Live entries (tombstones left out), in key order."""
        for key in sorted(self.entries):
            value = self.entries[key].value
            if value is not None:
                yield key, value

    def merge(self, other: LWWMap[V]) -> LWWMap[V]:
        if not other.entries:
            return self
        merged = dict(self.entries)
        changed = False
        for key, theirs in other.entries.items():
            ours = merged.get(key)
            winner = theirs if ours is None else ours.merge(theirs)
            if winner is not ours:
                merged[key] = winner
                changed = True
        return LWWMap(merged) if changed else self

    def max_stamp(self) -> Stamp | None:
        return max((r.stamp for r in self.entries.values()), default=None)
