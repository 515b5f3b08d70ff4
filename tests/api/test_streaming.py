"""Streaming relay: disconnects cancel upstream work; broken streams end with an error event, never [DONE]."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson

from tests.conftest import PER_STREAM, base_url, left_for_the_collector, one_model_config, read_slowly

STREAM_BODY = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def read_events(response: aiohttp.ClientResponse) -> list[bytes]:
    events = []
    async for line in response.content:
        if line.startswith(b"data: "):
            events.append(line[6:].strip())
    return events


async def test_client_disconnect_mid_stream_cancels_upstream(upstream, start_gateway):
    upstream.stream_chunks, upstream.chunk_delay = 50, 0.05
    gateway = await start_gateway(one_model_config(upstream.url))
    async with aiohttp.ClientSession() as session:
        response = await session.post(base_url(gateway) + "/v1/chat/completions", json=STREAM_BODY)
        await response.content.readline()  # the first event arrived: the stream is live
        response.close()  # the client goes away mid-stream
    for _ in range(100):
        if upstream.log.cancelled:
            break
        await asyncio.sleep(0.05)
    assert upstream.log.cancelled == 1
    assert upstream.log.completed_streams == 0


async def test_a_client_reading_slowly_gets_a_long_stream_whole_and_in_order(upstream, start_gateway):
    """Eight MB of events against a client that reads 64 KB at a time with pauses: the client's socket
    fills, the gateway stops reading the upstream until it drains and then goes on (a relay that never
    resumed would stall here; one that ignored the full socket would buffer the whole stream)."""
    upstream.stream_chunks, upstream.chunk_padding = 400, 20_000
    gateway = await start_gateway(one_model_config(upstream.url))
    body = await read_slowly(gateway, "/v1/chat/completions", STREAM_BODY)
    events = [line[6:] for line in body.split(b"\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    tokens = [orjson.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1]]
    assert [t.split(" ")[0] for t in tokens if t] == [f"tok{i}" for i in range(400)]
    assert upstream.log.completed_streams == 1


async def test_stream_cut_by_upstream_ends_with_error_event_and_no_done(upstream, start_gateway):
    upstream.stream_chunks, upstream.mode = 6, "cut_stream"
    gateway = await start_gateway(one_model_config(upstream.url))
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url(gateway) + "/v1/chat/completions", json=STREAM_BODY) as response:
            events = await read_events(response)
    assert b"[DONE]" not in events
    error = orjson.loads(events[-1])["error"]
    assert error["code"] == "upstream_protocol_error"
    assert len(events) == 4  # three content chunks relayed, then the error


async def test_stream_error_before_first_byte_is_a_plain_http_error(upstream, start_gateway):
    upstream.mode = "error500"
    gateway = await start_gateway(one_model_config(upstream.url))
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url(gateway) + "/v1/chat/completions", json=STREAM_BODY) as response:
            assert response.status == 502
            assert (await response.json())["error"]["code"] == "upstream_bad_status"


async def test_health_and_readiness(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    async with aiohttp.ClientSession() as session:
        async with session.get(base_url(gateway) + "/healthz") as response:
            assert response.status == 200
        async with session.get(base_url(gateway) + "/readyz") as response:
            assert response.status == 200 and (await response.json())["status"] == "ready"


async def test_shutdown_drains_in_flight_stream(upstream, start_gateway):
    upstream.stream_chunks, upstream.chunk_delay = 10, 0.05
    gateway = await start_gateway(one_model_config(upstream.url))
    async with aiohttp.ClientSession() as session:
        response = await session.post(base_url(gateway) + "/v1/chat/completions", json=STREAM_BODY)
        stopping = asyncio.create_task(gateway.stop())
        events = await read_events(response)
        await stopping
    assert events[-1] == b"[DONE]"
    assert gateway.readiness() == (False, "draining")


async def test_total_timeout_mid_stream_ends_with_timeout_event(upstream, start_gateway):
    upstream.stream_chunks, upstream.chunk_delay = 20, 0.1
    config = {"models": [{"name": "m1", "endpoints": [{"url": upstream.url, "timeouts": {"total_s": 0.5}}]}]}
    gateway = await start_gateway(config)
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url(gateway) + "/v1/chat/completions", json=STREAM_BODY) as response:
            events = await read_events(response)
    assert b"[DONE]" not in events
    assert orjson.loads(events[-1])["error"]["code"] == "upstream_timeout"
    assert 2 <= len(events) - 1 < 20


async def test_relayed_streams_leave_nothing_for_the_cyclic_garbage_collector(upstream, start_gateway):
    """Every object a relayed stream makes is freed by reference counting when the stream ends. A
    reference cycle per stream (the relay, its exchange, the exchange's SSE guard holding the relay's
    callback) leaves them to the collector, whose passes then pause the gateway for milliseconds at a
    time under load. Chat, Responses and Messages streams, on one kept-alive connection."""
    gateway = await start_gateway(one_model_config(upstream.url))
    url = base_url(gateway)
    bodies = [("/v1/chat/completions", STREAM_BODY),
              ("/v1/responses", {"model": "m1", "input": "hi", "stream": True, "store": False}),
              ("/v1/messages", {"model": "m1", "max_tokens": 16, "stream": True,
                                "messages": [{"role": "user", "content": "hi"}]})]
    async with aiohttp.ClientSession() as session:
        async def streams(count: int) -> None:
            for i in range(count):
                path, body = bodies[i % len(bodies)]
                async with session.post(url + path, json=body, headers={"anthropic-version": "2023-06-01"}) as r:
                    assert r.status == 200
                    await r.read()

        await streams(3)  # warm-up: the connections and whatever is made once
        left = await left_for_the_collector(lambda: streams(30))
    assert not left & PER_STREAM, f"streams left reference cycles through {sorted(left & PER_STREAM)}"
