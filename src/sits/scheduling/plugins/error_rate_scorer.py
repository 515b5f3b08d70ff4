from __future__ import annotations

from collections.abc import Sequence

from sits.scheduling.params import NoParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class ErrorRateScorer:
    """Fewer recent failures score higher: 1 - the endpoint's failure EWMA.

    The circuit breaker and outlier ejection act only after several consecutive failures; until then
    this moves traffic off a failing endpoint (or, for `auto`, a failing model of the tier) at once."""

    name = "error-rate-scorer"
    Params = NoParams

    def __init__(self, params: NoParams | None = None) -> None:
        pass

    def score(self, request: SchedulingRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        # clamped: the EWMA stays in [0, 1], but a view may carry any float
        return [1.0 - e.error_rate if 0.0 <= e.error_rate <= 1.0 else float(e.error_rate < 0.0) for e in endpoints]
