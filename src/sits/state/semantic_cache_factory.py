"""The configured semantic cache: in memory, or shared through Redis."""

from __future__ import annotations

from collections.abc import Callable

from sits.state.semantic_cache import InMemorySemanticCache, SemanticCache, SemanticCacheConfig, TextEmbedder
from sits.state.semantic_cache_redis import RedisSemanticCache


def build_semantic_cache(config: SemanticCacheConfig, embedder: TextEmbedder | None,
                         clock: Callable[[], float]) -> SemanticCache:
    """The configured backend. `clock` is monotonic seconds; Redis keeps time itself."""
    if config.backend == "redis":
        assert config.redis_url is not None  # the config validator guarantees it
        return RedisSemanticCache.from_url(config.redis_url, max_entries=config.max_entries, ttl_s=config.ttl_s,
                                           embedder=embedder, prefix=config.redis_prefix)
    return InMemorySemanticCache(config.max_entries, config.ttl_s, embedder, clock)
