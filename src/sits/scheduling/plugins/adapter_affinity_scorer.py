from __future__ import annotations

from collections.abc import Sequence

from sits.scheduling.params import NoParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class AdapterAffinityScorer:
    """Endpoints that already have the requested LoRA adapter loaded score 1, the others 0.

    Loading an adapter costs an engine seconds (and one without it may not serve the request at
    all), so a request for `base:adapter` goes where the adapter already is. Requests without an
    adapter score every endpoint alike: the scorer changes no other decision.
    """

    name = "adapter-affinity-scorer"
    Params = NoParams

    def __init__(self, params: NoParams | None = None) -> None:
        pass

    def abstains(self, request: SchedulingRequest) -> bool:
        return not request.adapter_endpoints  # no adapter asked for: every score is 0

    def score(self, request: SchedulingRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        loaded = request.adapter_endpoints
        if not loaded:
            return [0.0] * len(endpoints)
        return [1.0 if e.id in loaded else 0.0 for e in endpoints]
