from __future__ import annotations

from collections.abc import Sequence

from sits.scheduling.types import EndpointView, SchedulingRequest


class HealthyFilter:
    """Keeps healthy endpoints; if none is healthy, keeps all (a guess beats a certain failure)."""

    name = "healthy-filter"

    def filter(self, request: SchedulingRequest, endpoints: Sequence[EndpointView]) -> Sequence[EndpointView]:
        healthy = [e for e in endpoints if e.healthy]
        return healthy or endpoints
