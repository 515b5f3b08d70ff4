"""HTTP/2 (h2c, prior knowledge) on the HTTP door end to end: the official openai SDK over httpx's HTTP/2
client, and a raw h2 client where the test needs frame-level control (flow-control windows, resets)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import httpx2 as httpx  # the HTTP client this openai SDK release is built on (h2 for HTTP/2)
import openai
import orjson
import pytest

from sits.app import Gateway
from sits.configuration.gateway import parse_config
from sits.settings import Settings
from tests.api.test_grpc import SilentUpstream
from tests.conftest import one_model_config

HI = [{"role": "user", "content": "hi"}]
CHAT = "/v1/chat/completions"


def h2_config(url: str, **server: Any) -> dict[str, Any]:
    return one_model_config(url, http2_port=0, **server)


def h2_url(gateway: Gateway) -> str:
    assert gateway.http2 is not None
    return f"http://127.0.0.1:{gateway.http2.h2c_bound_port}"


def h2_client(**kwargs: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(http2=True, http1=False, timeout=10, **kwargs)


def h2_sdk(gateway: Gateway, http_client: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=h2_url(gateway) + "/v1", api_key="client-key", max_retries=0,
                              http_client=http_client)


async def wait_for(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


async def test_unary_chat_over_h2c_with_the_openai_sdk(upstream, start_gateway):
    gateway = await start_gateway(h2_config(upstream.url))
    async with h2_client() as http:
        raw = await h2_sdk(gateway, http).chat.completions.with_raw_response.create(
            model="m1", messages=HI, extra_headers={"x-request-id": "req-h2-1"})
        completion = raw.parse()
    assert raw.http_response.http_version == "HTTP/2"
    assert completion.choices[0].message.content == "hello from upstream-a"
    assert completion.usage is not None and completion.usage.total_tokens == 9
    assert raw.headers["x-sits-model"] == "m1"
    assert raw.headers["x-request-id"] == "req-h2-1"
    assert upstream.log.headers[-1]["x-request-id"] == "req-h2-1"  # the same id goes upstream


async def test_streaming_relays_every_chunk_to_done(upstream, start_gateway):
    upstream.stream_chunks = 6
    gateway = await start_gateway(h2_config(upstream.url))
    async with h2_client() as http:
        stream = await h2_sdk(gateway, http).chat.completions.create(
            model="m1", messages=HI, stream=True, stream_options={"include_usage": True})
        chunks = [c async for c in stream]
        async with http.stream("POST", h2_url(gateway) + CHAT,
                               json={"model": "m1", "messages": HI, "stream": True}) as response:
            assert response.http_version == "HTTP/2"
            assert response.headers["content-type"] == "text/event-stream"
            assert response.headers["x-sits-model"] == "m1" and response.headers["x-request-id"]
            events = [line async for line in response.aiter_lines() if line.startswith("data: ")]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "tok0 tok1 tok2 tok3 tok4 tok5 "
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6
    assert events[-1] == "data: [DONE]" and len(events) == 6 + 2  # chunks, the finish chunk, [DONE]


async def test_translated_streams_are_read_by_the_h2_door(upstream, start_gateway):
    """The Responses and Messages surfaces over HTTP/2: the door pulls the translated relay."""
    upstream.stream_chunks = 4
    gateway = await start_gateway(h2_config(upstream.url))
    async with h2_client() as http:
        stream = await h2_sdk(gateway, http).responses.create(model="m1", input="hi", stream=True)
        events = [e async for e in stream]
        async with http.stream("POST", h2_url(gateway) + "/v1/messages",
                               headers={"anthropic-version": "2023-06-01"},
                               json={"model": "m1", "max_tokens": 10, "stream": True, "messages": HI}) as response:
            assert response.http_version == "HTTP/2"
            names = [line[7:] async for line in response.aiter_lines() if line.startswith("event: ")]
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "tok0 tok1 tok2 tok3 "
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert names.count("content_block_delta") == 4


async def test_many_concurrent_streams_share_one_connection(upstream, start_gateway):
    upstream.stream_chunks, upstream.chunk_delay = 4, 0.01
    gateway = await start_gateway(h2_config(upstream.url))
    assert gateway.http2 is not None
    connections: set[int] = set()

    async def one(i: int, client: openai.AsyncOpenAI) -> str:
        if i % 2:
            completion = await client.chat.completions.create(model="m1", messages=HI)
            return completion.choices[0].message.content or ""
        stream = await client.chat.completions.create(model="m1", messages=HI, stream=True)
        text = ""
        async for chunk in stream:
            connections.update(id(c) for c in gateway.http2.connections.connections)
            text += chunk.choices[0].delta.content or "" if chunk.choices else ""
        return text

    async with h2_client() as http:
        client = h2_sdk(gateway, http)
        answers = await asyncio.gather(*(one(i, client) for i in range(40)))
    assert answers.count("hello from upstream-a") == 20
    assert answers.count("tok0 tok1 tok2 tok3 ") == 20
    assert len(connections) == 1  # forty requests, one TCP connection
    assert len(upstream.log.requests) == 40


@pytest.mark.parametrize(("body", "status", "code", "param"), [
    (b'{"model": "m1", "messages": [', 400, "invalid_json", "body"),
    (b'{"model": "m1"}', 422, "missing_required_parameter", "messages"),
    (b'{"model": "m1", "messages": [{"role": "robot", "content": "x"}]}', 422, "invalid_type", "messages[0].role"),
    (b'{"model": "zzz", "messages": [{"role": "user", "content": "x"}]}', 404, "model_not_found", "model"),
])
async def test_bad_input_gets_an_openai_shaped_error_on_its_stream(upstream, start_gateway, body, status, code, param):
    gateway = await start_gateway(h2_config(upstream.url))
    async with h2_client() as http:
        response = await http.post(h2_url(gateway) + CHAT, content=body, headers={"content-type": "application/json"})
        ok = await http.post(h2_url(gateway) + CHAT, json={"model": "m1", "messages": HI})  # same connection
    assert response.status_code == status
    error = response.json()["error"]
    assert (error["code"], error["param"]) == (code, param) and error["message"]
    assert response.headers["x-request-id"]
    assert ok.status_code == 200


async def test_bad_input_through_the_sdk_raises_its_typed_errors(upstream, start_gateway):
    gateway = await start_gateway(h2_config(upstream.url))
    async with h2_client() as http:
        client = h2_sdk(gateway, http)
        with pytest.raises(openai.UnprocessableEntityError) as unprocessable:
            await client.chat.completions.create(model="m1", messages=[])
        with pytest.raises(openai.NotFoundError) as not_found:
            await client.chat.completions.create(model="zzz", messages=HI)
    assert unprocessable.value.body["param"] == "messages"  # type: ignore[index]
    assert not_found.value.body["code"] == "model_not_found"  # type: ignore[index]


async def test_body_over_the_limit_is_a_413_on_that_stream_only(upstream, start_gateway):
    gateway = await start_gateway(h2_config(upstream.url, max_body_bytes=4096))
    big = [{"role": "user", "content": "x" * 10_000}]

    async def chunked_body() -> AsyncIterator[bytes]:  # no content-length: the limit trips on DATA frames
        payload = orjson.dumps({"model": "m1", "messages": big})
        for i in range(0, len(payload), 1000):
            yield payload[i:i + 1000]

    async with h2_client() as http:
        with pytest.raises(openai.APIStatusError) as declared:
            await h2_sdk(gateway, http).chat.completions.create(model="m1", messages=big)
        streamed = await http.post(h2_url(gateway) + CHAT, content=chunked_body())
        ok = await http.post(h2_url(gateway) + CHAT, json={"model": "m1", "messages": HI})
    assert declared.value.status_code == 413
    assert declared.value.body["code"] == "payload_too_large"  # type: ignore[index]
    assert streamed.status_code == 413
    assert streamed.json()["error"]["message"] == "request body exceeds the limit of 4096 bytes"
    assert ok.status_code == 200
    assert len(upstream.log.requests) == 1  # only the small one went upstream


async def test_headers_over_the_limit_are_a_431(upstream, start_gateway):
    gateway = await start_gateway(h2_config(upstream.url, max_header_bytes=2048))
    async with h2_client() as http:
        response = await http.post(h2_url(gateway) + CHAT, json={"model": "m1", "messages": HI},
                                   headers={"x-padding": "p" * 3000})
        ok = await http.post(h2_url(gateway) + CHAT, json={"model": "m1", "messages": HI})
    assert response.status_code == 431
    assert response.json()["error"]["code"] == "headers_too_large"
    assert ok.status_code == 200


async def test_losing_the_connection_cancels_every_stream_on_it(upstream, start_gateway):
    upstream.stream_chunks, upstream.chunk_delay = 40, 0.03
    gateway = await start_gateway(h2_config(upstream.url))
    async with h2_client() as http:
        client = h2_sdk(gateway, http)
        streams = [await client.chat.completions.create(model="m1", messages=HI, stream=True) for _ in range(3)]
        for stream in streams:
            await stream.__anext__()
    # leaving the client closed the socket with three streams open
    await wait_for(lambda: upstream.log.cancelled >= 3)
    assert upstream.log.cancelled == 3 and upstream.log.completed_streams == 0


class RawH2:
    """A frame-level HTTP/2 client on a socket, for what httpx does not let a test control."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, window: int) -> None:
        self.reader, self.writer = reader, writer
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.conn.initiate_connection()

    @classmethod
    async def open(cls, port: int, window: int = 65535) -> RawH2:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer, window)
        await client.flush()
        return client

    async def flush(self) -> None:
        self.writer.write(self.conn.data_to_send())
        await self.writer.drain()

    async def post(self, path: str, body: bytes) -> int:
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, [(":method", "POST"), (":path", path), (":scheme", "http"),
                                           (":authority", "127.0.0.1"), ("content-type", "application/json")])
        self.conn.send_data(stream_id, body, end_stream=True)
        await self.flush()
        return stream_id

    async def events(self, seconds: float, ack: bool = False, until_ended: int | None = None) -> list[h2.events.Event]:
        """Every event that arrives within `seconds`, or until stream `until_ended` ends. DATA is
        acknowledged (WINDOW_UPDATE) only with `ack`: without it the client is a reader that stalled."""
        out: list[h2.events.Event] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                data = await asyncio.wait_for(self.reader.read(65536), left)
            except TimeoutError:
                break
            if not data:
                break
            events = self.conn.receive_data(data)
            for event in events:
                if ack and isinstance(event, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            out.extend(events)
            await self.flush()
            if until_ended is not None and any(isinstance(e, h2.events.StreamEnded) and e.stream_id == until_ended
                                               for e in events):
                break
        return out

    def close(self) -> None:
        self.writer.close()


def data_bytes(events: list[h2.events.Event], stream_id: int) -> bytes:
    return b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived) and e.stream_id == stream_id)


async def test_resetting_one_stream_cancels_its_upstream_request_while_a_sibling_completes(upstream, start_gateway):
    """RST_STREAM(CANCEL) is how HTTP/2 clients (curl, Go, gRPC core, browsers) give up on one answer.
    httpx does not send it when a response is closed early (encode/httpcore#1022): see the next tests."""
    upstream.stream_chunks, upstream.chunk_delay = 40, 0.03
    gateway = await start_gateway(h2_config(upstream.url))
    assert gateway.http2 is not None
    client = await RawH2.open(gateway.http2.h2c_bound_port)
    try:
        body = orjson.dumps({"model": "m1", "messages": HI, "stream": True})
        cancelled, sibling = await client.post(CHAT, body), await client.post(CHAT, body)
        first = await client.events(1.0, ack=True)
        assert data_bytes(first, cancelled) and data_bytes(first, sibling)  # both streams are live
        client.conn.reset_stream(cancelled, h2.errors.ErrorCodes.CANCEL)
        await client.flush()
        rest = await client.events(10.0, ack=True, until_ended=sibling)
        await wait_for(lambda: upstream.log.cancelled > 0)
    finally:
        client.close()
    assert (first_part := data_bytes(first, sibling) + data_bytes(rest, sibling)).endswith(b"data: [DONE]\n\n")
    assert first_part.count(b"tok") == 40
    assert not any(isinstance(e, h2.events.StreamEnded) and e.stream_id == cancelled for e in rest)
    assert upstream.log.cancelled == 1 and upstream.log.completed_streams == 1


async def test_resetting_a_request_still_waiting_for_its_answer_hangs_up_on_the_upstream(upstream, start_gateway):
    async with SilentUpstream() as silent:
        config = h2_config(upstream.url)
        config["models"].append({"name": "m2", "endpoints": [{"url": silent.url}]})
        gateway = await start_gateway(config)
        assert gateway.http2 is not None
        client = await RawH2.open(gateway.http2.h2c_bound_port)
        try:
            waiting = await client.post(CHAT, orjson.dumps({"model": "m2", "messages": HI}))
            await wait_for(lambda: silent.requests == 1)
            client.conn.reset_stream(waiting, h2.errors.ErrorCodes.CANCEL)
            await client.flush()
            await asyncio.wait_for(silent.hung_up.wait(), 5)  # the handler task was cancelled, not left waiting
            sibling = await client.post(CHAT, orjson.dumps({"model": "m1", "messages": HI}))
            events = await client.events(5.0, ack=True, until_ended=sibling)
        finally:
            client.close()
    assert b"hello from upstream-a" in data_bytes(events, sibling)


async def test_a_slow_reader_holds_the_relay_at_its_flow_control_window(upstream, start_gateway):
    upstream.stream_chunks = 200
    gateway = await start_gateway(h2_config(upstream.url))
    assert gateway.http2 is not None
    client = await RawH2.open(gateway.http2.h2c_bound_port, window=1024)
    try:
        body = orjson.dumps({"model": "m1", "messages": HI, "stream": True})
        stream_id = await client.post(CHAT, body)
        first = await client.events(1.0)
        held = data_bytes(first, stream_id)
        assert any(isinstance(e, h2.events.ResponseReceived) for e in first)
        assert 0 < len(held) <= 1024  # the window, not the 200 chunks the upstream has ready
        assert not any(isinstance(e, h2.events.StreamEnded) for e in first)
        rest = bytearray(held)
        client.conn.acknowledge_received_data(len(held), stream_id)  # now read, handing each window back
        await client.flush()
        events = await client.events(20.0, ack=True, until_ended=stream_id)
        rest += data_bytes(events, stream_id)
        assert any(isinstance(e, h2.events.StreamEnded) for e in events)
        assert rest.endswith(b"data: [DONE]\n\n") and rest.count(b"tok") == 200
    finally:
        client.close()


async def test_a_stream_granted_no_window_for_the_keep_alive_timeout_is_reset_and_its_upstream_cancelled(
        upstream, start_gateway):
    """A client that stops reading one stream without resetting it (httpx closing a response early) must
    not hold the relay and its upstream request for as long as the connection lives."""
    upstream.stream_chunks, upstream.chunk_delay = 200, 0.02  # 4 s of answer
    gateway = await start_gateway(h2_config(upstream.url, keep_alive_timeout_s=1.0))
    assert gateway.http2 is not None
    client = await RawH2.open(gateway.http2.h2c_bound_port, window=1024)
    try:
        stream_id = await client.post(CHAT, orjson.dumps({"model": "m1", "messages": HI, "stream": True}))
        events = await client.events(2.5)  # never a WINDOW_UPDATE
        await wait_for(lambda: upstream.log.cancelled > 0)
    finally:
        client.close()
    resets = [e for e in events if isinstance(e, h2.events.StreamReset) and e.stream_id == stream_id]
    assert resets and resets[0].error_code == h2.errors.ErrorCodes.CANCEL
    assert 0 < len(data_bytes(events, stream_id)) <= 1024
    assert upstream.log.cancelled == 1 and upstream.log.completed_streams == 0


async def test_drain_finishes_open_streams_refuses_new_ones_then_says_goaway(upstream, tmp_path):
    upstream.stream_chunks, upstream.chunk_delay = 10, 0.05
    gateway = Gateway(Settings(host="127.0.0.1", port=0, data_dir=tmp_path / "data"),
                      parse_config(h2_config(upstream.url)), rng_seed=7)
    await gateway.start()
    assert gateway.http2 is not None
    client = await RawH2.open(gateway.http2.h2c_bound_port)
    try:
        body = orjson.dumps({"model": "m1", "messages": HI, "stream": True})
        open_stream = await client.post(CHAT, body)
        events = await client.events(0.2)
        stopping = asyncio.create_task(gateway.stop())
        await asyncio.sleep(0.05)  # the drain has begun
        late_stream = await client.post(CHAT, body)  # opened during the drain: refused
        events += await client.events(3.0)
        await stopping
    finally:
        client.close()
    goaway = [i for i, e in enumerate(events) if isinstance(e, h2.events.ConnectionTerminated)]
    assert goaway and events[goaway[0]].last_stream_id == open_stream and events[goaway[0]].error_code == 0
    ended = [i for i, e in enumerate(events) if isinstance(e, h2.events.StreamEnded) and e.stream_id == open_stream]
    assert ended and ended[0] < goaway[0]  # GOAWAY after the last answer: h2-based clients fail streams after it
    assert data_bytes(events, open_stream).endswith(b"data: [DONE]\n\n")  # the open stream finished
    refused = [e for e in events if isinstance(e, h2.events.StreamReset) and e.stream_id == late_stream]
    assert refused and refused[0].error_code == h2.errors.ErrorCodes.REFUSED_STREAM
    assert upstream.log.completed_streams == 1 and len(upstream.log.requests) == 1
