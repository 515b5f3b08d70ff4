from __future__ import annotations

import random
from collections.abc import Sequence

from sits.scheduling.params import NoParams
from sits.scheduling.types import EndpointView


class RoundRobinPicker:
    """Takes endpoints in turn, ignoring scores.

    The cursor is this instance's own state (one per profile, never global), so the sequence
    of picks is deterministic given the sequence of calls.
    """

    name = "round-robin-picker"
    Params = NoParams

    def __init__(self, params: NoParams | None = None) -> None:
        self._cursor = 0

    def pick(
        self, scores: Sequence[float], endpoints: Sequence[EndpointView], rng: random.Random, limit: int
    ) -> list[EndpointView]:
        n = len(endpoints)
        if n == 0:
            return []
        start = self._cursor % n
        self._cursor = start + 1
        return [endpoints[(start + k) % n] for k in range(min(max(limit, 1), n))]
