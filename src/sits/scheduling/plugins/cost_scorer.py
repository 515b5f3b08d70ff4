from __future__ import annotations

from collections.abc import Sequence

from typing import Annotated

from pydantic import Field

from sits.scheduling.params import PluginParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class CostScorerParams(PluginParams):
    # prices this close count as equal, so a tiny price gap does not override load
    resolution_per_1k: Annotated[float, Field(gt=0)] = 0.0001


class CostScorer:
    """Cheaper per token scores higher: the cheapest endpoint 1, one costing twice as much 0.5."""

    name = "cost-scorer"
    Params = CostScorerParams

    def __init__(self, params: CostScorerParams | None = None) -> None:
        self._eps = (params or CostScorerParams()).resolution_per_1k

    def score(self, request: SchedulingRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        eps = self._eps
        costs = [max(e.cost_per_1k_tokens, 0.0) + eps for e in endpoints]
        cheapest = min(costs)
        return [cheapest / c for c in costs]
