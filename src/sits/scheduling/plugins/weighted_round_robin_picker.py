from __future__ import annotations

import random
from collections.abc import Sequence

from sits.scheduling.params import NoParams
from sits.scheduling.types import EndpointView


class WeightedRoundRobinPicker:
    """Smooth weighted round-robin (nginx): endpoint weights set the share, picks interleave evenly.

    Scores are ignored; the running credits are this instance's own state, kept by endpoint id
    and dropped for ids no longer offered.
    """

    name = "weighted-round-robin-picker"
    Params = NoParams

    def __init__(self, params: NoParams | None = None) -> None:
        self._credit: dict[str, float] = {}

    def pick(
        self, scores: Sequence[float], endpoints: Sequence[EndpointView], rng: random.Random, limit: int
    ) -> list[EndpointView]:
        n = len(endpoints)
        if n == 0:
            return []
        credit = self._credit
        if len(credit) > 4 * n:  # forget endpoints that left, bounded
            live = {e.id for e in endpoints}
            self._credit = credit = {k: v for k, v in credit.items() if k in live}
        total = 0.0
        best_i, best_c = 0, float("-inf")
        for i, e in enumerate(endpoints):
            w = max(e.weight, 0.0)
            c = credit.get(e.id, 0.0) + w
            credit[e.id] = c
            total += w
            if c > best_c:
                best_i, best_c = i, c
        chosen = endpoints[best_i]
        credit[chosen.id] = best_c - total
        others = [endpoints[(best_i + k) % n] for k in range(1, min(max(limit, 1), n))]
        return [chosen, *others]
