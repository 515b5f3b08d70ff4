from __future__ import annotations

from collections.abc import Sequence

from sits.scheduling.params import NoParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class LeastInflightScorer:
    """Weighted least connections: fewer in-flight requests per unit of weight scores higher."""

    name = "least-inflight-scorer"
    Params = NoParams

    def __init__(self, params: NoParams | None = None) -> None:
        pass

    def score(self, request: SchedulingRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        loads = [(e.in_flight + 1) / (e.weight if e.weight > 1e-9 else 1e-9) for e in endpoints]
        lightest = min(loads)
        return [lightest / load for load in loads]
