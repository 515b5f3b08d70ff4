"""Observed-remove set: an add wins over a concurrent remove, because a remove only
takes away the add-tags (dots) it has seen."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sits.state.crdt.gcounter import GCounter

E = TypeVar("E")
Dot = tuple[str, int]  # (replica, that replica's n-th add)


@dataclass(frozen=True)  # no slots: Generic[...]() sets __orig_class__
class ORSet(Generic[E]):
    adds: Mapping[E, frozenset[Dot]] = field(default_factory=dict)
    removed: frozenset[Dot] = frozenset()
    clock: GCounter = field(default_factory=GCounter)  # mints fresh dots per replica

    @property
    def elements(self) -> frozenset[E]:
        return frozenset(e for e, dots in self.adds.items() if dots - self.removed)

    def __contains__(self, element: object) -> bool:
        dots = self.adds.get(element)  # type: ignore[call-overload]
        return bool(dots and dots - self.removed)

    def add(self, replica: str, element: E) -> ORSet[E]:
        clock = self.clock.increment(replica)
        dot = (replica, clock.get(replica))
        return ORSet({**self.adds, element: self.adds.get(element, frozenset()) | {dot}}, self.removed, clock)

    def remove(self, element: E) -> ORSet[E]:
        """Remove the adds of `element` seen so far; a concurrent add elsewhere survives."""
        return ORSet(self.adds, self.removed | self.adds.get(element, frozenset()), self.clock)

    def merge(self, other: ORSet[E]) -> ORSet[E]:
        adds = dict(self.adds)
        for element, dots in other.adds.items():
            adds[element] = adds.get(element, frozenset()) | dots
        return ORSet(adds, self.removed | other.removed, self.clock.merge(other.clock))
