"""Semantic response cache: exact match first, then cosine similarity of prompt embeddings.

Entries live in partitions: one per (scope, model, api, parameter fingerprint, conversation
context), so another tenant, model or parameter set can never hit. Within a partition an exact
digest of the whole prompt answers first; failing that, the embedding of the last user turn is
compared with the stored ones and the best above the threshold answers. Entries expire `ttl_s`
after they were stored (a hit does not refresh them: TTL bounds an answer's age) and the whole
cache holds at most `max_entries`, least recently used out first.

Only `CachedCompletion` values are stored, and those are built from successful, complete
responses only (see `sits.pipeline.cached_response`), so errors and cut streams cannot get in.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


class SemanticCacheConfig(BaseModel):
    """The `semantic_cache:` block of the gateway config (YAML edge, hence pydantic)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    threshold: float = Field(0.92, ge=0.0, le=1.0, description="cosine similarity for a semantic hit; 1.0 = exact only")
    fallback_threshold: float | None = Field(
        None, ge=0.0, le=1.0, description="threshold when the cache answers as the last fallback step; default: threshold")
    ttl_s: float = Field(3600.0, gt=0)
    max_entries: int = Field(10_000, ge=1)
    cache_sampled: bool = Field(
        False, description="also serve requests with temperature > 0 (or unset) from the cache on opted-in routes")
    backend: Literal["memory", "redis"] = "memory"
    redis_url: str | None = None
    redis_prefix: str = "sits:sc:"

    @model_validator(mode="after")
    def _redis_needs_url(self) -> SemanticCacheConfig:
        if self.backend == "redis" and not self.redis_url:
            raise ValueError("semantic_cache.redis_url is required when backend is 'redis'")
        return self

    def allows(self, key: CacheKey, *, fallback: bool) -> bool:
        """Whether this request may be answered from the cache.

        A sampled request (temperature > 0 or unset) asked for variety, so an opted-in route
        serves it only with `cache_sampled`; as the last fallback step any answer beats an error.
        """
        return self.enabled and (fallback or key.deterministic or self.cache_sampled)

    def threshold_for(self, *, fallback: bool) -> float:
        if fallback and self.fallback_threshold is not None:
            return self.fallback_threshold
        return self.threshold


@dataclass(frozen=True, slots=True)
class CacheKey:
    """Where an answer is filed. Built by `sits.pipeline.cache_keys.build_cache_key`.

    `exact` digests the whole prompt; `text` is the last user turn the embedding is taken of,
    or None when only exact matching is sound (non-text content, too long for the embedder).
    """

    scope: str
    model: str
    api: str
    params: str
    context: str
    exact: str
    text: str | None
    deterministic: bool

    @property
    def partition(self) -> str:
        raw = "\x1f".join((self.scope, self.model, self.api, self.params, self.context))
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class CachedCompletion:
    """One successful answer: a single choice, complete (finish_reason known), text only."""

    kind: Literal["chat", "text"]
    model: str
    content: str
    finish_reason: str
    created: int
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    system_fingerprint: str | None = None


@dataclass(frozen=True, slots=True)
class CacheHit:
    completion: CachedCompletion
    match: Literal["exact", "semantic", "static"]  # static: the configured last-resort answer, not a cache entry
    similarity: float


class TextEmbedder(Protocol):
    dim: int

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 (len(texts), dim), rows L2-normalised. Must not block the event loop."""
        ...


class SemanticCache(Protocol):
    async def lookup(self, key: CacheKey, *, threshold: float) -> CacheHit | None:
        """The exact entry, else the most similar live one with similarity >= threshold."""
        ...

    async def store(self, key: CacheKey, completion: CachedCompletion) -> None:
        """File `completion` under `key`, replacing an entry with the same exact digest."""
        ...

    async def close(self) -> None: ...


def numbers_agree(a: str, b: str) -> bool:
    """Embeddings barely see digits ("2+2" vs "2+3" score ~0.89), so a semantic hit also needs
    the same numbers in the same order."""
    return _NUMBER.findall(a) == _NUMBER.findall(b)


class VectorIndex:
    """Normalised rows of one partition in a growable matrix; removal swaps the last row in."""

    __slots__ = ("_matrix", "_ids", "_row")

    def __init__(self, dim: int) -> None:
        self._matrix = np.zeros((8, dim), dtype=np.float32)
        self._ids: list[str] = []
        self._row: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, entry_id: str, vector: np.ndarray) -> None:
        self.remove(entry_id)
        n = len(self._ids)
        if n == self._matrix.shape[0]:
            self._matrix = np.concatenate([self._matrix, np.zeros_like(self._matrix)])
        self._matrix[n] = vector
        self._ids.append(entry_id)
        self._row[entry_id] = n

    def remove(self, entry_id: str) -> None:
        row = self._row.pop(entry_id, None)
        if row is None:
            return
        last = len(self._ids) - 1
        if row != last:
            moved = self._ids[last]
            self._matrix[row] = self._matrix[last]
            self._ids[row] = moved
            self._row[moved] = row
        self._ids.pop()

    def ranked(self, vector: np.ndarray, threshold: float) -> list[tuple[str, float]]:
        """Ids with similarity >= threshold, best first (ties by id, for determinism)."""
        n = len(self._ids)
        if n == 0:
            return []
        scores = self._matrix[:n] @ vector
        picked = np.nonzero(scores >= threshold)[0]
        return sorted(((self._ids[i], float(scores[i])) for i in picked), key=lambda p: (-p[1], p[0]))


@dataclass(slots=True)
class _Entry:
    key: CacheKey
    completion: CachedCompletion
    expires_at: float


class InMemorySemanticCache:
    """One process's cache; deterministic given `clock` and the embedder."""

    def __init__(self, max_entries: int, ttl_s: float, embedder: TextEmbedder | None,
                 clock: Callable[[], float]) -> None:
        self._max_entries = max_entries
        self._ttl_s = ttl_s
        self._embedder = embedder
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # LRU order: oldest first
        self._indexes: dict[str, VectorIndex] = {}

    def __len__(self) -> int:
        return len(self._entries)

    async def lookup(self, key: CacheKey, *, threshold: float) -> CacheHit | None:
        exact_id = _entry_id(key)
        entry = self._live(exact_id)
        if entry is not None:
            self._entries.move_to_end(exact_id)
            return CacheHit(entry.completion, "exact", 1.0)
        if key.text is None or self._embedder is None or threshold >= 1.0:
            return None
        index = self._indexes.get(key.partition)
        if index is None or len(index) == 0:
            return None  # nothing to compare with: skip the embedding
        vector = (await self._embedder.embed([key.text]))[0]
        index = self._indexes.get(key.partition)  # the await may have let evictions run
        ranked = index.ranked(vector, threshold) if index is not None else []
        for entry_id, similarity in ranked:
            entry = self._live(entry_id)
            if entry is not None and entry.key.text is not None and numbers_agree(key.text, entry.key.text):
                self._entries.move_to_end(entry_id)
                return CacheHit(entry.completion, "semantic", similarity)
        return None

    async def store(self, key: CacheKey, completion: CachedCompletion) -> None:
        vector = None
        if key.text is not None and self._embedder is not None:
            vector = (await self._embedder.embed([key.text]))[0]
        entry_id = _entry_id(key)
        self._drop(entry_id)
        self._entries[entry_id] = _Entry(key, completion, self._clock() + self._ttl_s)
        if vector is not None:
            self._indexes.setdefault(key.partition, VectorIndex(vector.shape[0])).add(entry_id, vector)
        while len(self._entries) > self._max_entries:
            self._drop(next(iter(self._entries)))

    async def close(self) -> None:
        self._entries.clear()
        self._indexes.clear()

    def _live(self, entry_id: str) -> _Entry | None:
        entry = self._entries.get(entry_id)
        if entry is not None and self._clock() >= entry.expires_at:
            self._drop(entry_id)
            return None
        return entry

    def _drop(self, entry_id: str) -> None:
        entry = self._entries.pop(entry_id, None)
        if entry is None:
            return
        index = self._indexes.get(entry.key.partition)
        if index is not None:
            index.remove(entry_id)
            if len(index) == 0:
                del self._indexes[entry.key.partition]


def _entry_id(key: CacheKey) -> str:
    return f"{key.partition}:{key.exact}"
