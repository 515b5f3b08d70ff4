from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import ClassVar

from sits.scheduling.params import PluginParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class TierFilterParams(PluginParams):
    fail_open: bool = False  # if no endpoint is in the asked tier, keep all instead of none


class TierFilter:
    """Keeps endpoints in the request's tier (tiny, base, heavy); a request without a tier keeps all."""

    name: ClassVar[str] = "tier-filter"  # a class attribute in the compiled class too (docs/hot-path.md)
    Params: ClassVar[type[TierFilterParams]] = TierFilterParams

    def __init__(self, params: TierFilterParams | None = None) -> None:
        self._fail_open = (params or TierFilterParams()).fail_open

    def keeps(self, request: SchedulingRequest) -> Callable[[EndpointView], bool] | None:
        tier = request.tier
        if tier is None:
            return None  # a request without a tier keeps all
        return lambda e: e.tier == tier

    def filter(
        self, request: SchedulingRequest, endpoints: Sequence[EndpointView], rng: random.Random
    ) -> Sequence[EndpointView]:
        tier = request.tier
        if tier is None:
            return endpoints
        kept = [e for e in endpoints if e.tier == tier]
        return kept or (endpoints if self._fail_open else kept)
