"""The semantic cache in Redis, so every gateway replica shares the same hits.

Layout under `prefix` (default "sits:sc:"):

- `e:{partition}:{exact}`  the entry (orjson), with the TTL as Redis' own PX expiry
- `v:{partition}`          hash exact -> float32 bytes of the normalised embedding
- `lru`                    sorted set of "{partition}:{exact}" by use sequence (size bound)
- `seq`                    the use-sequence counter; one counter for all replicas, so LRU order
                           does not depend on replicas' wall clocks

A stored vector whose entry has expired is removed when a lookup meets it. Redis must be a
single server or a primary (not Redis Cluster: eviction touches keys of several partitions).

The cache is best effort: a Redis error or timeout is logged and reads as a miss (or a skipped
store), never as a failed request.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
import redis.asyncio as redis_async
from redis.exceptions import RedisError

from sits.state.semantic_cache import (
    CachedCompletion,
    CacheHit,
    CacheKey,
    TextEmbedder,
    VectorIndex,
    numbers_agree,
)

log = logging.getLogger("sits.cache")

# Atomic so two replicas storing at once keep the LRU set and the entries consistent.
_STORE = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
else
  redis.call('HDEL', KEYS[2], ARGV[3])
end
local seq = redis.call('INCR', KEYS[4])
redis.call('ZADD', KEYS[3], seq, ARGV[5])
local excess = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[6])
if excess > 0 then
  return redis.call('ZPOPMIN', KEYS[3], excess)
end
return {}
"""

_TOUCH = """
local seq = redis.call('INCR', KEYS[2])
return redis.call('ZADD', KEYS[1], 'XX', seq, ARGV[1])
"""


class RedisSemanticCache:
    def __init__(self, client: redis_async.Redis, *, max_entries: int, ttl_s: float,
                 embedder: TextEmbedder | None, prefix: str = "sits:sc:") -> None:
        self._client = client
        self._max_entries = max_entries
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._embedder = embedder
        self._prefix = prefix
        self._store_script = client.register_script(_STORE)
        self._touch_script = client.register_script(_TOUCH)

    @classmethod
    def from_url(cls, url: str, *, max_entries: int, ttl_s: float, embedder: TextEmbedder | None,
                 prefix: str = "sits:sc:", timeout_s: float = 0.25) -> RedisSemanticCache:
        # A short timeout: a slow cache must cost a request little more than a miss.
        client = redis_async.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        return cls(client, max_entries=max_entries, ttl_s=ttl_s, embedder=embedder, prefix=prefix)

    async def lookup(self, key: CacheKey, *, threshold: float) -> CacheHit | None:
        try:
            return await self._lookup(key, threshold)
        except RedisError as exc:
            log.warning("semantic cache lookup failed, treated as a miss: %s", exc)
            return None

    async def store(self, key: CacheKey, completion: CachedCompletion) -> None:
        vector = b""
        if key.text is not None and self._embedder is not None:
            vector = np.ascontiguousarray((await self._embedder.embed([key.text]))[0], dtype=np.float32).tobytes()
        member = f"{key.partition}:{key.exact}"
        try:
            evicted = await self._store_script(
                keys=[self._entry_key(member), self._vectors_key(key.partition), self._lru_key, self._seq_key],
                args=[_encode(key, completion), self._ttl_ms, key.exact, vector, member, self._max_entries],
            )
            if evicted:
                await self._forget(evicted[0::2])  # ZPOPMIN answers member, score, member, score...
        except RedisError as exc:
            log.warning("semantic cache store failed, answer not cached: %s", exc)

    async def close(self) -> None:
        await self._client.aclose()

    async def _lookup(self, key: CacheKey, threshold: float) -> CacheHit | None:
        exact_member = f"{key.partition}:{key.exact}"
        raw = await self._client.get(self._entry_key(exact_member))
        decoded = _decode(raw)
        if decoded is not None:
            await self._touch(exact_member)
            return CacheHit(decoded[0], "exact", 1.0)
        if key.text is None or self._embedder is None or threshold >= 1.0:
            return None
        stored = await self._client.hgetall(self._vectors_key(key.partition))
        if not stored:
            return None  # nothing to compare with: skip the embedding
        vector = (await self._embedder.embed([key.text]))[0]
        index = _index_of(stored, vector.shape[0])
        for exact, similarity in index.ranked(vector, threshold):
            member = f"{key.partition}:{exact}"
            decoded = _decode(await self._client.get(self._entry_key(member)))
            if decoded is None:
                await self._client.hdel(self._vectors_key(key.partition), exact)  # expired: tidy up
                continue
            completion, text = decoded
            if text is not None and numbers_agree(key.text, text):
                await self._touch(member)
                return CacheHit(completion, "semantic", similarity)
        return None

    async def _touch(self, member: str) -> None:
        await self._touch_script(keys=[self._lru_key, self._seq_key], args=[member])

    async def _forget(self, members: Sequence[bytes]) -> None:
        pipe = self._client.pipeline(transaction=False)
        for raw in members:
            member = raw.decode()
            partition, _, exact = member.partition(":")
            pipe.delete(self._entry_key(member))
            pipe.hdel(self._vectors_key(partition), exact)
        await pipe.execute()

    def _entry_key(self, member: str) -> str:
        return f"{self._prefix}e:{member}"

    def _vectors_key(self, partition: str) -> str:
        return f"{self._prefix}v:{partition}"

    @property
    def _lru_key(self) -> str:
        return f"{self._prefix}lru"

    @property
    def _seq_key(self) -> str:
        return f"{self._prefix}seq"


def _index_of(stored: dict[bytes, bytes], dim: int) -> VectorIndex:
    index = VectorIndex(dim)
    for exact, raw in stored.items():
        if len(raw) == dim * 4:  # vectors of another embedder (a config change) are skipped
            index.add(exact.decode(), np.frombuffer(raw, dtype=np.float32))
    return index


def _encode(key: CacheKey, c: CachedCompletion) -> bytes:
    return orjson.dumps({
        "kind": c.kind, "model": c.model, "content": c.content, "finish_reason": c.finish_reason,
        "created": c.created, "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
        "system_fingerprint": c.system_fingerprint, "text": key.text,
    })


def _decode(raw: bytes | None) -> tuple[CachedCompletion, str | None] | None:
    """An entry, or None when absent or unreadable (written by another version: a miss)."""
    if raw is None:
        return None
    try:
        data: dict[str, Any] = orjson.loads(raw)
        completion = CachedCompletion(
            kind=data["kind"], model=data["model"], content=data["content"], finish_reason=data["finish_reason"],
            created=data["created"], prompt_tokens=data["prompt_tokens"], completion_tokens=data["completion_tokens"],
            system_fingerprint=data["system_fingerprint"],
        )
        return completion, data["text"]
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None
