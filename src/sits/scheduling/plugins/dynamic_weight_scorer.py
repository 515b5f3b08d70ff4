from __future__ import annotations

from collections.abc import Sequence

from sits.scheduling.params import NoParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class DynamicWeightScorer:
    """The live dynamic weight (state/dynamic_weight.py, recomputed every 200 ms), scaled to the best.

    Pair it with weighted-random-picker to spread load in proportion to the weights.
    """

    name = "dynamic-weight-scorer"
    Params = NoParams

    def __init__(self, params: NoParams | None = None) -> None:
        pass

    def score(self, request: SchedulingRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        weights = [max(e.dynamic_weight, 0.0) for e in endpoints]
        top = max(weights)
        if top <= 0.0:
            return [1.0] * len(weights)
        return [w / top for w in weights]
