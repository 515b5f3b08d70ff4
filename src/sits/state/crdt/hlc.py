"""Hybrid logical clocks (Kulkarni et al., 2014): timestamps that follow physical time when
clocks agree and causality when they do not.

A `Stamp` orders by (wall_ms, logical, replica): an event that knew of another is always later,
whatever the clocks say, and the replica id breaks the remaining ties, so the order is total.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class Stamp:
    wall_ms: int
    logical: int
    replica: str

    def to_wire(self) -> list[int | str]:
        return [self.wall_ms, self.logical, self.replica]

    @classmethod
    def from_wire(cls, raw: list[int | str]) -> Stamp:
        wall_ms, logical, replica = raw
        return cls(int(wall_ms), int(logical), str(replica))


ZERO = Stamp(0, 0, "")


class HybridClock:
    """One replica's clock. `tick()` stamps a local event; `observe()` folds in a remote stamp,
    so the next tick is later than everything this replica has seen.

    `max_ahead_ms` refuses remote stamps from a clock that runs too far ahead: one bad clock
    must not drag every replica's timestamps into the future.
    """

    def __init__(self, replica: str, wall_ms: Callable[[], int], max_ahead_ms: int = 60_000) -> None:
        self.replica = replica
        self._wall_ms = wall_ms
        self._max_ahead_ms = max_ahead_ms
        self._wall = 0
        self._logical = 0

    def tick(self) -> Stamp:
        now = self._wall_ms()
        if now > self._wall:
            self._wall, self._logical = now, 0
        else:
            self._logical += 1
        return Stamp(self._wall, self._logical, self.replica)

    def observe(self, remote: Stamp) -> bool:
        """Move past `remote`; False (and no change) if it is implausibly far ahead of our wall clock."""
        now = self._wall_ms()
        if remote.wall_ms - now > self._max_ahead_ms:
            return False
        wall = max(now, self._wall, remote.wall_ms)
        if wall == self._wall == remote.wall_ms:
            logical = max(self._logical, remote.logical) + 1
        elif wall == self._wall:
            logical = self._logical + 1
        elif wall == remote.wall_ms:
            logical = remote.logical + 1
        else:
            logical = 0
        self._wall, self._logical = wall, logical
        return True

    def peek(self) -> Stamp:
        """The latest stamp issued or observed, without advancing."""
        return Stamp(self._wall, self._logical, self.replica)
