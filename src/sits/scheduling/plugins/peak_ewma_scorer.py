from __future__ import annotations

from collections.abc import Sequence

from typing import Annotated

from pydantic import Field

from sits.scheduling.params import PluginParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class PeakEwmaScorerParams(PluginParams):
    # latency assumed for an endpoint with no observation yet: optimistic, so new endpoints get tried
    unknown_latency_s: Annotated[float, Field(ge=0)] = 0.0
    # cost per unit of weight: an operator's weight states relative capacity (parallel slots), which a
    # latency sample alone does not show. Off: Finagle's classic peak-EWMA.
    per_weight: bool = False


class PeakEwmaScorer:
    """Finagle's peak-EWMA load: expected latency x (in-flight + 1); lower cost scores higher.

    The peak EWMA jumps up at once on a slow response and decays slowly, so a degrading
    endpoint is avoided quickly. With random-sample-filter(size=2) this is P2C + peak-EWMA.
    """

    name = "peak-ewma-scorer"
    Params = PeakEwmaScorerParams

    def __init__(self, params: PeakEwmaScorerParams | None = None) -> None:
        p = params or PeakEwmaScorerParams()
        self._unknown = p.unknown_latency_s
        self._per_weight = p.per_weight

    def score(self, request: SchedulingRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        unknown = self._unknown
        if self._per_weight:
            costs = [((e.latency_peak_ewma_s or e.latency_ewma_s or unknown) + 1e-4) * (e.in_flight + 1)
                     / (e.weight if e.weight > 1e-9 else 1e-9) for e in endpoints]
        else:
            costs = [((e.latency_peak_ewma_s or e.latency_ewma_s or unknown) + 1e-4) * (e.in_flight + 1)
                     for e in endpoints]
        cheapest = min(costs)
        return [cheapest / c for c in costs]
