from __future__ import annotations

from collections.abc import Sequence

from typing import Annotated

from pydantic import Field

from sits.scheduling.params import PluginParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class KvCacheScorerParams(PluginParams):
    unknown_usage: Annotated[float, Field(ge=0, le=1)] = 0.5  # assumed for engines that report none


class KvCacheScorer:
    """More free KV cache scores higher: a fuller cache means preemption and recomputation soon."""

    name = "kv-cache-scorer"
    Params = KvCacheScorerParams

    def __init__(self, params: KvCacheScorerParams | None = None) -> None:
        self._unknown = (params or KvCacheScorerParams()).unknown_usage

    def score(self, request: SchedulingRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        unknown = self._unknown
        return [1.0 - (unknown if e.kv_cache_usage is None else e.kv_cache_usage) for e in endpoints]
