from __future__ import annotations

import heapq
import random
from collections.abc import Sequence

from sits.scheduling.params import NoParams
from sits.scheduling.types import EndpointView


class MaxScorePicker:
    """Best score first; a tie for the best is broken by the seeded RNG so equal endpoints share load."""

    name = "max-score-picker"
    Params = NoParams

    def __init__(self, params: NoParams | None = None) -> None:
        pass

    def pick(
        self, scores: Sequence[float], endpoints: Sequence[EndpointView], rng: random.Random, limit: int
    ) -> list[EndpointView]:
        n = len(endpoints)
        if n == 0:
            return []
        best = max(scores)
        first = scores.index(best)
        if scores.count(best) > 1:
            first = rng.choice([i for i in range(n) if scores[i] == best])
        if limit <= 1:
            return [endpoints[first]]
        others = [i for i in range(n) if i != first]
        if n <= 64:  # a small sort beats heapq's overhead
            rest = sorted(others, key=scores.__getitem__, reverse=True)[: limit - 1]
        else:
            rest = heapq.nlargest(limit - 1, others, key=scores.__getitem__)
        return [endpoints[first], *(endpoints[i] for i in rest)]
