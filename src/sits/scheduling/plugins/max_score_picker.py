from __future__ import annotations

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
        # limit is small (the director tries 3): repeated C-level max() beats a sort or a keyed heap
        remaining = list(scores)
        remaining[first] = float("-inf")
        picked = [endpoints[first]]
        for _ in range(min(limit, n) - 1):
            top = max(remaining)
            i = remaining.index(top)
            picked.append(endpoints[i])
            remaining[i] = float("-inf")
        return picked
