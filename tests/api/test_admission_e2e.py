"""Priority admission through a running gateway."""

from __future__ import annotations

import asyncio

import openai
import pytest

from tests.conftest import sdk


def config(url: str, limit: int, queue_p2: int = 1024) -> dict:
    return {"server": {"drain_timeout_s": 2},
            "admission": {"limiter": {"type": "fixed", "limit": limit}, "queue_size": {"P2": queue_p2}},
            "models": [{"name": "m", "endpoints": [{"url": url}]}]}


async def test_invalid_priority_header_is_422_naming_it(upstream, start_gateway):
    gateway = await start_gateway(config(upstream.url, 4))
    with pytest.raises(openai.UnprocessableEntityError) as info:
        await sdk(gateway).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                   extra_headers={"x-sits-priority": "urgent!!"})
    assert info.value.body["param"] == "x-sits-priority"
    assert upstream.log.requests == []


async def test_p0_goes_ahead_of_queued_p2(upstream, start_gateway):
    upstream.stream_chunks, upstream.chunk_delay = 4, 0.05
    gateway = await start_gateway(config(upstream.url, 1))
    client = sdk(gateway)
    finished: list[str] = []

    async def ask(tag: str, priority: str) -> None:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": tag}], stream=True,
            extra_headers={"x-sits-priority": priority})
        async for _ in stream:
            pass
        finished.append(tag)

    gate = gateway.admission.gates.get("m")

    async def until(condition) -> None:  # bounded wait on the gate's own state, not on timing
        for _ in range(500):
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("gate never reached the expected state")

    holder = asyncio.create_task(ask("holder", "P1"))
    await until(lambda: gate.in_flight == 1)  # the only slot is taken
    batch = [asyncio.create_task(ask(f"p2-{i}", "batch")) for i in range(4)]
    await until(lambda: gate.queued() == 4)  # the batch is queued
    urgent = asyncio.create_task(ask("p0", "realtime"))
    await asyncio.gather(holder, urgent, *batch)
    assert finished.index("p0") == 1  # right after the request that held the slot


async def test_full_p2_queue_sheds_with_429_and_retry_after(upstream, start_gateway):
    upstream.stream_chunks, upstream.chunk_delay = 4, 0.05
    gateway = await start_gateway(config(upstream.url, 1, queue_p2=1))
    client = sdk(gateway)

    async def ask() -> int:
        try:
            stream = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], stream=True,
                extra_headers={"x-sits-priority": "P2"})
            async for _ in stream:
                pass
            return 200
        except openai.APIStatusError as exc:
            assert exc.response.headers["retry-after"]
            return exc.status_code

    statuses = await asyncio.gather(*(ask() for _ in range(5)))
    assert statuses.count(200) >= 2 and 429 in statuses


async def test_a_model_max_concurrency_caps_its_requests_in_flight(upstream, start_gateway):
    """`max_concurrency: 2` on the model: six concurrent streams, never more than two at the upstream,
    the others queue and all complete."""
    upstream.stream_chunks, upstream.chunk_delay = 4, 0.03
    cfg = config(upstream.url, 64)
    cfg["models"][0]["max_concurrency"] = 2
    gateway = await start_gateway(cfg)
    client = sdk(gateway)
    gate = gateway.admission.gates.get("m")
    peak = 0

    async def ask(i: int) -> None:
        nonlocal peak
        stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"q{i}"}],
                                                      stream=True)
        async for _ in stream:
            peak = max(peak, gate.in_flight)

    await asyncio.gather(*(ask(i) for i in range(6)))
    assert 1 <= peak <= 2
    assert gate.snapshot().limit == 2
    assert len(upstream.log.requests) == 6
