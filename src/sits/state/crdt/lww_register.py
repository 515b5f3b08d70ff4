"""Last-writer-wins register ordered by (hybrid logical clock, replica id)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from sits.state.crdt.hlc import Stamp

T = TypeVar("T")


@dataclass(frozen=True)  # no slots: Generic[...]() sets __orig_class__
class LWWRegister(Generic[T]):
    value: T
    stamp: Stamp

    def assign(self, value: T, stamp: Stamp) -> LWWRegister[T]:
        return self.merge(LWWRegister(value, stamp))

    def merge(self, other: LWWRegister[T]) -> LWWRegister[T]:
        if other.stamp != self.stamp:
            return other if other.stamp > self.stamp else self
        if other.value == self.value:
            return self
        # One stamp, two values: only a misbehaving replica does that. Any fixed rule keeps
        # merge commutative; the value's repr is deterministic for the frozen values stored here.
        return other if repr(other.value) > repr(self.value) else self
