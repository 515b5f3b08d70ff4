"""The response store: bounded in age and count in memory, an unreachable Redis is a 503, not a wrong answer."""

from __future__ import annotations

import socket

import pytest

from sits.errors import Overloaded
from sits.state.response_store import MemoryResponseStore, RedisResponseStore, ResponsesConfig


async def test_memory_store_expires_and_keeps_the_newest():
    now = [0.0]
    store = MemoryResponseStore(ttl_s=10, max_entries=2, clock=lambda: now[0])
    await store.put("a", b"1")
    await store.put("b", b"2")
    await store.put("c", b"3")
    assert await store.get("a") is None and await store.get("b") == b"2"  # over the count: the oldest goes
    now[0] = 10.0
    assert await store.get("c") is None  # past its TTL
    await store.put("d", b"4")
    assert await store.delete("d") is True and await store.delete("d") is False


async def test_an_unreachable_redis_is_overloaded_with_retry_after():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    store = RedisResponseStore(f"redis://127.0.0.1:{port}/0", "p:", ttl_s=60, timeout_s=0.5)
    try:
        for call in (store.get("x"), store.put("x", b"1"), store.delete("x")):
            with pytest.raises(Overloaded) as info:
                await call
            assert ("retry-after", "1") in info.value.headers
    finally:
        await store.close()


def test_redis_backend_needs_a_url():
    with pytest.raises(ValueError, match="redis_url"):
        ResponsesConfig(backend="redis")
