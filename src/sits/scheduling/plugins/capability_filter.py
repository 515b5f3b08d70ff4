from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import ClassVar

from sits.scheduling.plugins.filter_params import CapabilityFilterParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class CapabilityFilter:
    """Keeps endpoints whose model declares every feature the request needs (tools, vision, JSON output)."""

    name: ClassVar[str] = "capability-filter"  # a class attribute in the compiled class too (docs/hot-path.md)
    Params: ClassVar[type[CapabilityFilterParams]] = CapabilityFilterParams

    def __init__(self, params: CapabilityFilterParams | None = None) -> None:
        self._undeclared_ok = (params or CapabilityFilterParams()).undeclared_is_capable

    def keeps(self, request: SchedulingRequest) -> Callable[[EndpointView], bool] | None:
        needs = request.needs
        if not needs:
            return None  # a request that needs nothing: every endpoint is capable
        ok = self._undeclared_ok
        return lambda e: ok if e.features is None else needs <= e.features

    def always_keeps_one(self, endpoint: EndpointView) -> bool:
        return endpoint.features is None and self._undeclared_ok  # nothing declared: assumed able

    def filter(
        self, request: SchedulingRequest, endpoints: Sequence[EndpointView], rng: random.Random
    ) -> Sequence[EndpointView]:
        needs = request.needs
        if not needs:
            return endpoints
        ok = self._undeclared_ok
        return [e for e in endpoints if (ok if e.features is None else needs <= e.features)]
