"""The cache's places in a request: a normal cache before scheduling (routes that opt in), the
semantic cache and then the static template as the last fallback steps, and storing good answers.
"""

from __future__ import annotations

import asyncio
import logging

from sits.pipeline.cache_keys import build_cache_key
from sits.pipeline.canned_answer import static_answer
from sits.pipeline.context import RoutingRequest
from sits.state.semantic_cache import CachedCompletion, CacheHit, CacheKey, SemanticCache, SemanticCacheConfig

log = logging.getLogger("sits.cache")


class CacheStep:
    def __init__(self, config: SemanticCacheConfig, static_text: str | None) -> None:
        self._cache: SemanticCache | None = None
        self._config = config
        self._static_text = static_text
        self._stores: set[asyncio.Task[None]] = set()

    def attach(self, cache: SemanticCache) -> None:
        """At startup, once the cache (and its embedding model) is ready."""
        if self._config.enabled:
            self._cache = cache

    @property
    def enabled(self) -> bool:
        return self._cache is not None

    def key(self, request: RoutingRequest, body: bytes) -> CacheKey | None:
        return build_cache_key(request, body, request.cache_scope) if self._cache is not None else None

    async def before_upstream(self, key: CacheKey | None, opted_in: bool) -> CacheHit | None:
        if self._cache is None or key is None or not opted_in or not self._config.allows(key, fallback=False):
            return None
        return await self._cache.lookup(key, threshold=self._config.threshold_for(fallback=False))

    async def last_resort(self, key: CacheKey | None, request: RoutingRequest, model: str) -> CacheHit | None:
        """After every upstream attempt failed: a cached answer if one is close enough, else the static one."""
        if self._cache is not None and key is not None and self._config.allows(key, fallback=True):
            hit = await self._cache.lookup(key, threshold=self._config.threshold_for(fallback=True))
            if hit is not None:
                return hit
        if self._static_text is not None:
            return static_answer(request.api, self._static_text, model)
        return None

    def remember(self, key: CacheKey | None, completion: CachedCompletion | None) -> None:
        """Store a good answer off the response path (the embedding runs in a thread)."""
        if self._cache is None or key is None or completion is None:
            return
        task = asyncio.get_running_loop().create_task(self._cache.store(key, completion))
        self._stores.add(task)
        task.add_done_callback(self._stores.discard)

    async def close(self) -> None:
        if self._stores:
            await asyncio.gather(*self._stores, return_exceptions=True)
        if self._cache is not None:
            await self._cache.close()
