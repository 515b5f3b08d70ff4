from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from typing import Annotated, ClassVar

from pydantic import Field

from sits.scheduling.params import PluginParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class MemoryHeadroomFilterParams(PluginParams):
    max_kv_cache_usage: Annotated[float, Field(gt=0, le=1)] = 0.95
    max_memory_usage: Annotated[float, Field(gt=0, le=1)] = 0.95
    fail_open: bool = True  # if every engine is full, keep all: the engine queues rather than fails


class MemoryHeadroomFilter:
    """Drops endpoints whose engine KV cache or GPU memory is nearly full; unknown usage passes."""

    name: ClassVar[str] = "memory-headroom-filter"  # a class attribute in the compiled class too (docs/hot-path.md)
    Params: ClassVar[type[MemoryHeadroomFilterParams]] = MemoryHeadroomFilterParams

    def __init__(self, params: MemoryHeadroomFilterParams | None = None) -> None:
        p = params or MemoryHeadroomFilterParams()
        self._kv = p.max_kv_cache_usage
        self._mem = p.max_memory_usage
        self._fail_open = p.fail_open

    def keeps(self, request: SchedulingRequest) -> Callable[[EndpointView], bool]:
        kv, mem = self._kv, self._mem
        return lambda e: ((e.kv_cache_usage is None or e.kv_cache_usage < kv)
                          and (e.memory_usage is None or e.memory_usage < mem))

    def filter(
        self, request: SchedulingRequest, endpoints: Sequence[EndpointView], rng: random.Random
    ) -> Sequence[EndpointView]:
        kv, mem = self._kv, self._mem
        kept = [
            e for e in endpoints
            if (e.kv_cache_usage is None or e.kv_cache_usage < kv) and (e.memory_usage is None or e.memory_usage < mem)
        ]
        return kept or (endpoints if self._fail_open else kept)
