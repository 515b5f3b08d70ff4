from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from sits.scheduling.params import PluginParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class PeakEwmaScorerParams(PluginParams):
    # latency assumed for an endpoint with no observation yet: optimistic, so new endpoints get tried
    unknown_latency_s: float = Field(default=0.0, ge=0)


class PeakEwmaScorer:
    """Finagle's peak-EWMA load: expected latency x (in-flight + 1); lower cost scores higher.

    The peak EWMA jumps up at once on a slow response and decays slowly, so a degrading
    endpoint is avoided quickly. With random-sample-filter(size=2) this is P2C + peak-EWMA.
    """

    name = "peak-ewma-scorer"
    Params = PeakEwmaScorerParams

    def __init__(self, params: PeakEwmaScorerParams | None = None) -> None:
        self._unknown = (params or PeakEwmaScorerParams()).unknown_latency_s

    def score(self, request: SchedulingRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        unknown = self._unknown
        costs = [((e.latency_peak_ewma_s or e.latency_ewma_s or unknown) + 1e-4) * (e.in_flight + 1)
                 for e in endpoints]
        cheapest = min(costs)
        return [cheapest / c for c in costs]
