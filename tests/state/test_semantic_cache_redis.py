"""Redis semantic cache against a real redis-server started on a free loopback port."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator

import pytest

redis_async = pytest.importorskip("redis.asyncio")

from sits.pipeline.cache_embedder import ThreadedEmbedder  # noqa: E402
from sits.state.semantic_cache import SemanticCacheConfig  # noqa: E402
from sits.state.semantic_cache_factory import build_semantic_cache  # noqa: E402
from sits.state.semantic_cache_redis import RedisSemanticCache  # noqa: E402
from tests.state.test_semantic_cache import AngleEmbedder, FakeClock, answer, make_key, minilm  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed")
    port = free_port()  # never the shared 6379
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
async def make_cache(redis_url) -> AsyncIterator:
    """Factory of cache clients (replicas) on one fresh database; all closed at the end."""
    admin = redis_async.Redis.from_url(redis_url)
    await admin.flushdb()
    made: list[RedisSemanticCache] = []

    def make(embedder=None, max_entries: int = 100, ttl_s: float = 60.0) -> RedisSemanticCache:
        c = RedisSemanticCache.from_url(redis_url, max_entries=max_entries, ttl_s=ttl_s, embedder=embedder)
        made.append(c)
        return c

    make.admin = admin
    yield make
    for c in made:
        await c.close()
    await admin.aclose()


async def test_two_replicas_share_an_exact_hit(make_cache):
    a, b = make_cache(), make_cache()
    await a.store(make_key("capital of France?"), answer("Paris"))
    hit = await b.lookup(make_key("capital of France?"), threshold=0.9)
    assert hit is not None and hit.match == "exact" and hit.completion == answer("Paris")


async def test_two_replicas_share_a_semantic_hit_above_threshold_only(make_cache):
    angles = {"stored": 0.0, "near": 10.0, "far": 30.0}
    a, b = make_cache(AngleEmbedder(angles)), make_cache(AngleEmbedder(angles))
    await a.store(make_key("stored"), answer())
    hit = await b.lookup(make_key("near"), threshold=0.95)
    assert hit is not None and hit.match == "semantic" and hit.similarity == pytest.approx(0.9848, abs=1e-4)
    assert await b.lookup(make_key("far"), threshold=0.95) is None


@pytest.mark.parametrize("other", [{"scope": "tenant:b"}, {"model": "m2"}, {"params": "p1"}, {"context": "c1"}])
async def test_other_scope_model_or_params_never_hit(make_cache, other):
    c = make_cache(AngleEmbedder({"q": 0.0}))
    await c.store(make_key("q"), answer())
    assert await c.lookup(make_key("q", **other), threshold=0.0) is None
    assert await c.lookup(make_key("q"), threshold=0.0) is not None


async def test_ttl_expiry(make_cache):
    c = make_cache(AngleEmbedder({"q": 0.0, "near": 1.0}), ttl_s=0.2)
    await c.store(make_key("q"), answer())
    assert await c.lookup(make_key("near"), threshold=0.9) is not None
    await asyncio.sleep(0.3)  # Redis expires the entry itself
    assert await c.lookup(make_key("q"), threshold=0.9) is None
    assert await c.lookup(make_key("near"), threshold=0.9) is None


async def test_size_bound_evicts_least_recently_used_across_replicas(make_cache):
    angles = {"a": 0.0, "b": 40.0, "c": 80.0, "near-b": 41.0}
    a, b = make_cache(AngleEmbedder(angles), max_entries=2), make_cache(AngleEmbedder(angles), max_entries=2)
    await a.store(make_key("a"), answer("A"))
    await b.store(make_key("b"), answer("B"))
    assert await b.lookup(make_key("a"), threshold=1.0) is not None  # a is now the most recent
    await a.store(make_key("c"), answer("C"))
    assert await a.lookup(make_key("b"), threshold=1.0) is None
    assert await a.lookup(make_key("near-b"), threshold=0.99) is None
    assert (await b.lookup(make_key("a"), threshold=1.0)).completion.content == "A"
    assert (await b.lookup(make_key("c"), threshold=1.0)).completion.content == "C"
    admin = make_cache.admin
    assert await admin.zcard("sits:sc:lru") == 2
    assert await admin.hlen(f"sits:sc:v:{make_key('a').partition}") == 2  # b's vector went with it


async def test_redis_down_reads_as_a_miss_and_store_does_not_raise():
    c = RedisSemanticCache.from_url(f"redis://127.0.0.1:{free_port()}/0", max_entries=10, ttl_s=60,
                                    embedder=AngleEmbedder({"q": 0.0}))
    try:
        await c.store(make_key("q"), answer())
        assert await c.lookup(make_key("q"), threshold=0.5) is None
    finally:
        await c.close()


async def test_unreadable_entry_is_a_miss(make_cache):
    c = make_cache()
    key = make_key("q")
    await make_cache.admin.set(f"sits:sc:e:{key.partition}:{key.exact}", b"not json")
    assert await c.lookup(key, threshold=0.9) is None


async def test_build_redis_backend(redis_url):
    config = SemanticCacheConfig(enabled=True, backend="redis", redis_url=redis_url)
    built = build_semantic_cache(config, None, FakeClock())
    assert isinstance(built, RedisSemanticCache)
    await built.close()


async def test_real_minilm_semantic_hit_shared_through_redis(make_cache):
    model = minilm()
    a, b = make_cache(ThreadedEmbedder(model)), make_cache(ThreadedEmbedder(model))
    await a.store(make_key("What is the capital of France?"), answer("Paris"))
    hit = await b.lookup(make_key("Tell me the capital of France."), threshold=0.92)
    assert hit is not None and hit.match == "semantic" and hit.completion.content == "Paris"
    assert await b.lookup(make_key("How do I bake sourdough bread?"), threshold=0.92) is None
