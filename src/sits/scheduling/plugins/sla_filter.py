from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import ClassVar

from sits.scheduling.plugins.filter_params import SlaFilterParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class SlaFilter:
    """Keeps endpoints whose p95 latency is below the SLA (the request's, else the model's, else default).

    An endpoint with no latency observed yet (p95 == 0) passes: it must get traffic to be measured.
    """

    name: ClassVar[str] = "sla-filter"  # a class attribute in the compiled class too (docs/hot-path.md)
    Params: ClassVar[type[SlaFilterParams]] = SlaFilterParams

    def __init__(self, params: SlaFilterParams | None = None) -> None:
        p = params or SlaFilterParams()
        self._default_ms = p.default_sla_ms
        self._fail_open = p.fail_open

    def keeps(self, request: SchedulingRequest) -> Callable[[EndpointView], bool]:
        request_ms = request.sla_ms
        if request_ms:
            return lambda e: e.latency_p95_s * 1000.0 <= request_ms
        default_ms = self._default_ms
        if default_ms:
            return lambda e: e.latency_p95_s * 1000.0 <= (e.sla_ms or default_ms)
        return lambda e: not e.sla_ms or e.latency_p95_s * 1000.0 <= e.sla_ms

    def always_keeps_one(self, endpoint: EndpointView) -> bool:
        return self._fail_open  # fail open: a lone endpoint stays, late or not

    def filter(
        self, request: SchedulingRequest, endpoints: Sequence[EndpointView], rng: random.Random
    ) -> Sequence[EndpointView]:
        request_ms = request.sla_ms
        default_ms = self._default_ms
        if request_ms:
            kept = [e for e in endpoints if e.latency_p95_s * 1000.0 <= request_ms]
        elif default_ms is None and not any(map(_SLA_MS, endpoints)):
            return endpoints  # no SLA anywhere: nothing to check (a C-level pass)
        else:
            kept = [e for e in endpoints
                    if (bound := e.sla_ms or default_ms) is None or e.latency_p95_s * 1000.0 <= bound]
        return kept or (endpoints if self._fail_open else kept)


_SLA_MS = attrgetter("sla_ms")
