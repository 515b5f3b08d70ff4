from __future__ import annotations

import heapq
import random
from collections.abc import Sequence

from sits.scheduling.params import NoParams
from sits.scheduling.types import EndpointView


class WeightedRandomPicker:
    """First pick drawn with probability proportional to score; the rest follow by score.

    Spreads load in proportion to the scores, where max-score would send every request
    of one snapshot to the same best endpoint.
    """

    name = "weighted-random-picker"
    Params = NoParams

    def __init__(self, params: NoParams | None = None) -> None:
        pass

    def pick(
        self, scores: Sequence[float], endpoints: Sequence[EndpointView], rng: random.Random, limit: int
    ) -> list[EndpointView]:
        n = len(endpoints)
        if n == 0:
            return []
        if sum(scores) > 0.0:
            first = rng.choices(range(n), weights=scores, k=1)[0]
        else:
            first = rng.randrange(n)
        if limit <= 1:
            return [endpoints[first]]
        rest = heapq.nlargest(limit - 1, (i for i in range(n) if i != first), key=scores.__getitem__)
        return [endpoints[first], *(endpoints[i] for i in rest)]
