from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import ClassVar

from sits.scheduling.plugins.filter_params import HealthyFilterParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class HealthyFilter:
    """Keeps healthy endpoints whose recent error rate is within bounds."""

    name: ClassVar[str] = "healthy-filter"  # a class attribute in the compiled class too (docs/hot-path.md)
    Params: ClassVar[type[HealthyFilterParams]] = HealthyFilterParams

    def __init__(self, params: HealthyFilterParams | None = None) -> None:
        p = params or HealthyFilterParams()
        self._max_error_rate = p.max_error_rate
        self._fail_open = p.fail_open

    def keeps(self, request: SchedulingRequest) -> Callable[[EndpointView], bool]:
        limit = self._max_error_rate
        if limit >= 1.0:
            return _is_healthy
        return lambda e: e.healthy and e.error_rate <= limit

    def always_keeps_one(self, endpoint: EndpointView) -> bool:
        return self._fail_open  # fail open: a lone endpoint stays, healthy or not

    def filter(
        self, request: SchedulingRequest, endpoints: Sequence[EndpointView], rng: random.Random
    ) -> Sequence[EndpointView]:
        limit = self._max_error_rate
        if limit >= 1.0:
            healthy = [e for e in endpoints if e.healthy]
        else:
            healthy = [e for e in endpoints if e.healthy and e.error_rate <= limit]
        return healthy or (endpoints if self._fail_open else healthy)


_is_healthy = attrgetter("healthy")
