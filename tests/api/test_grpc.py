"""The gRPC door end to end: the official grpcio client against a running gateway and a test upstream."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import grpc
import lz4.frame
import openai
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sits.api.grpc import chat_pb2 as pb
from sits.app import Gateway
from sits.configuration.gateway import parse_config
from sits.errors import ConfigError
from sits.settings import Settings
from sits.api.grpc import chat_pb2_grpc
from sits.api.grpc.client_codec import chunks_of, completion_of, lz4_request
from tests.conftest import base_url, one_model_config, sdk
from tests.otlp_receiver import OtlpReceiver

HI = [pb.ChatMessage(role="user", content="hi")]


def grpc_config(url: str, **server: Any) -> dict[str, Any]:
    return one_model_config(url, grpc_port=0, **server)


def stub_for(gateway) -> tuple[grpc.aio.Channel, chat_pb2_grpc.ChatCompletionsStub]:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc.bound_port}")
    return channel, chat_pb2_grpc.ChatCompletionsStub(channel)


async def wait_for(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


async def test_unary_forwards_typed_and_extra_fields_and_answers_with_route_metadata(upstream, start_gateway):
    gateway = await start_gateway(grpc_config(upstream.url))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    request = pb.ChatCompletionRequest(
        model="m1", messages=[pb.ChatMessage(role="system", content="be brief"),
                              pb.ChatMessage(role="user", extra_json='{"content": [{"type": "text", "text": "hi"}]}')],
        temperature=0.7, max_tokens=12, stop=["\n"], extra_json=orjson.dumps({"tools": tools, "vendor_x": 1}).decode())
    channel, stub = stub_for(gateway)
    async with channel:
        response = await stub.Create(request, metadata=(("x-request-id", "req-grpc-1"),))
        completion = completion_of(response)
    assert completion.choices[0].message.content == "hello from upstream-a"
    assert completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.total_tokens) == (5, 9)
    assert (response.route.model, response.route.endpoint, response.route.attempts) == ("m1", "m1/ep-0", "m1/ep-0:ok")
    assert response.route.request_id == "req-grpc-1"
    sent = upstream.log.requests[-1]
    assert sent == {"model": "m1", "messages": [{"role": "system", "content": "be brief"},
                                                {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                    "temperature": 0.7, "max_tokens": 12, "stop": ["\n"], "tools": tools, "vendor_x": 1}
    assert upstream.log.headers[-1]["x-request-id"] == "req-grpc-1"


async def test_stream_yields_each_chunk_then_usage(upstream, start_gateway):
    upstream.stream_chunks = 4
    gateway = await start_gateway(grpc_config(upstream.url))
    channel, stub = stub_for(gateway)
    async with channel:
        call = stub.CreateStream(pb.ChatCompletionRequest(model="m1", messages=HI, include_usage=True))
        messages = [m async for m in call]
        assert await call.code() == grpc.StatusCode.OK
    assert messages[0].route.endpoint == "m1/ep-0" and messages[0].route.request_id
    assert not any(m.HasField("route") for m in messages[1:])
    chunks = [c for m in messages for c in chunks_of(m)]
    text = "".join(c.choices[0].delta.content for c in chunks if c.choices)
    assert text == "tok0 tok1 tok2 tok3 "
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens == 4
    assert upstream.log.requests[-1]["stream"] is True
    assert upstream.log.requests[-1]["stream_options"] == {"include_usage": True}


class SilentUpstream:
    """A loopback HTTP server that reads a chat request and never answers; it notes when the gateway hangs up."""

    def __init__(self) -> None:
        self.requests = 0
        self.hung_up = asyncio.Event()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> SilentUpstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"POST /v1/chat/completions "):
            writer.close()  # health probes: not what this test watches
            return
        self.requests += 1
        await reader.read()  # returns at EOF: the gateway closed the connection
        self.hung_up.set()
        writer.close()


async def test_deadline_exceeded_cancels_the_waiting_upstream_request(start_gateway):
    async with SilentUpstream() as upstream:
        gateway = await start_gateway(grpc_config(upstream.url))
        channel, stub = stub_for(gateway)
        async with channel:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Create(pb.ChatCompletionRequest(model="m1", messages=HI), timeout=0.4)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        await asyncio.wait_for(upstream.hung_up.wait(), 5)  # the gateway dropped the upstream request
        assert upstream.requests == 1


async def test_deadline_passing_mid_stream_cancels_the_upstream_request(upstream, start_gateway):
    upstream.stream_chunks, upstream.chunk_delay = 60, 0.05
    gateway = await start_gateway(grpc_config(upstream.url))
    channel, stub = stub_for(gateway)
    received = 0
    async with channel:
        call = stub.CreateStream(pb.ChatCompletionRequest(model="m1", messages=HI), timeout=0.6)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in call:
                received += 1
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert 0 < received < 60
    await wait_for(lambda: upstream.log.cancelled > 0)
    assert upstream.log.cancelled == 1 and upstream.log.completed_streams == 0


async def test_client_cancel_mid_stream_cancels_the_upstream_request(upstream, start_gateway):
    upstream.stream_chunks, upstream.chunk_delay = 60, 0.05
    gateway = await start_gateway(grpc_config(upstream.url))
    channel, stub = stub_for(gateway)
    async with channel:
        call = stub.CreateStream(pb.ChatCompletionRequest(model="m1", messages=HI))
        first = await call.read()
        assert chunks_of(first)[0].choices[0].delta.content == "tok0 "
        call.cancel()
        await wait_for(lambda: upstream.log.cancelled > 0)
    assert upstream.log.cancelled == 1 and upstream.log.completed_streams == 0


BAD_REQUESTS = [
    # (gRPC request, the same request as HTTP JSON, status)
    (pb.ChatCompletionRequest(model="m1", messages=HI, temperature=3.0),
     {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "temperature": 3.0},
     grpc.StatusCode.INVALID_ARGUMENT),
    (pb.ChatCompletionRequest(model="m1", messages=HI, max_tokens=0),
     {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0},
     grpc.StatusCode.INVALID_ARGUMENT),
    (pb.ChatCompletionRequest(model="m1", messages=[pb.ChatMessage(role="robot", content="hi")]),
     {"model": "m1", "messages": [{"role": "robot", "content": "hi"}]}, grpc.StatusCode.INVALID_ARGUMENT),
    (pb.ChatCompletionRequest(model="nope", messages=HI),
     {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}, grpc.StatusCode.NOT_FOUND),
]


@pytest.mark.parametrize(("request_message", "json_body", "status"), BAD_REQUESTS)
async def test_bad_requests_get_the_http_apis_message(upstream, start_gateway, request_message, json_body, status):
    gateway = await start_gateway(grpc_config(upstream.url))
    with pytest.raises(openai.APIStatusError) as http:
        await sdk(gateway).chat.completions.create(**json_body)
    channel, stub = stub_for(gateway)
    async with channel:
        for rpc in (stub.Create, stub.CreateStream):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                call = rpc(request_message)
                await (call if rpc is stub.Create else call.read())
            assert info.value.code() == status
            assert info.value.details() == http.value.body["message"]
            trailing = dict(info.value.trailing_metadata())
            assert trailing["sits-error-code"] == http.value.body["code"]
            assert trailing["sits-http-status"] == str(http.value.status_code)
    assert upstream.log.requests == []  # nothing reached the model server


@pytest.mark.parametrize(("request_message", "param"), [
    (pb.ChatCompletionRequest(model="m1", messages=HI, extra_json="{not json"), "extra_json"),
    (pb.ChatCompletionRequest(model="m1", messages=HI, extra_json='{"stream": true}'), "extra_json.stream"),
    (pb.ChatCompletionRequest(model="m1", messages=HI, temperature=0.5, extra_json='{"temperature": 1}'),
     "extra_json.temperature"),
    (pb.ChatCompletionRequest(model="m1"), "messages"),
    (pb.ChatCompletionRequest(model="m1", messages=[pb.ChatMessage(role="user", content="hi", extra_json='{"content": "x"}')]),
     "messages[0].extra_json.content"),
    (pb.ChatCompletionRequest(lz4_request=b"not an lz4 frame"), "lz4_request"),
    (pb.ChatCompletionRequest(model="m1", lz4_request=lz4.frame.compress(b"")), "lz4_request"),
])
async def test_grpc_only_fields_are_checked_and_named(upstream, start_gateway, request_message, param):
    gateway = await start_gateway(grpc_config(upstream.url))
    channel, stub = stub_for(gateway)
    async with channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Create(request_message)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(info.value.trailing_metadata())["sits-error-param"] == param
    assert upstream.log.requests == []


async def test_upstream_failure_maps_to_unavailable_with_attempts(upstream, start_gateway):
    upstream.mode = "error500"
    gateway = await start_gateway(grpc_config(upstream.url))
    channel, stub = stub_for(gateway)
    async with channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Create(pb.ChatCompletionRequest(model="m1", messages=HI))
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    trailing = dict(info.value.trailing_metadata())
    assert trailing["sits-error-code"] == "upstream_bad_status"
    assert trailing["x-sits-attempts"].startswith("m1/ep-0:upstream_bad_status")


async def test_stream_cut_by_upstream_ends_with_an_error_status_not_ok(upstream, start_gateway):
    upstream.stream_chunks, upstream.mode = 6, "cut_stream"
    gateway = await start_gateway(grpc_config(upstream.url))
    channel, stub = stub_for(gateway)
    received = []
    async with channel:
        call = stub.CreateStream(pb.ChatCompletionRequest(model="m1", messages=HI))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for message in call:
                received += chunks_of(message)
    assert info.value.code() == grpc.StatusCode.INTERNAL
    assert dict(info.value.trailing_metadata())["sits-error-code"] == "upstream_protocol_error"
    assert len(received) == 3


async def test_data_plane_keys_via_authorization_metadata(upstream, start_gateway):
    gateway = await start_gateway(grpc_config(upstream.url, api_keys_env="SITS_KEYS"), secrets={"SITS_KEYS": "k1,k2"})
    channel, stub = stub_for(gateway)
    request = pb.ChatCompletionRequest(model="m1", messages=HI)
    async with channel:
        for metadata, message in [((), "this gateway needs 'Authorization: Bearer <api key>'"),
                                  ((("authorization", "Bearer wrong"),), "invalid API key")]:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Create(request, metadata=metadata)
            assert (info.value.code(), info.value.details()) == (grpc.StatusCode.UNAUTHENTICATED, message)
        answer = await stub.Create(request, metadata=(("authorization", "Bearer k2"),))
    assert answer.completion.choices[0].message.content == "hello from upstream-a"


PROMPT_100K = ("The quick brown fox jumps over the lazy dog; " * 2300)[:100_000]


@pytest.mark.parametrize("compression", ["gzip", "lz4"])
async def test_large_prompt_round_trips_compressed(upstream, start_gateway, compression):
    gateway = await start_gateway(grpc_config(upstream.url))
    request = pb.ChatCompletionRequest(model="m1", messages=[pb.ChatMessage(role="user", content=PROMPT_100K)])
    channel, stub = stub_for(gateway)
    async with channel:
        if compression == "lz4":
            request.response_compression = pb.COMPRESSION_LZ4
            wrapped = lz4_request(request)
            assert wrapped.ByteSize() < request.ByteSize() // 10
            answer = await stub.Create(wrapped)
            chunks = [c async for m in stub.CreateStream(wrapped) for c in chunks_of(m)]
        else:
            request.response_compression = pb.COMPRESSION_GZIP
            answer = await stub.Create(request, compression=grpc.Compression.Gzip)
            chunks = [c async for m in stub.CreateStream(request, compression=grpc.Compression.Gzip)
                      for c in chunks_of(m)]
    assert completion_of(answer).choices[0].message.content == "hello from upstream-a"
    assert "".join(c.choices[0].delta.content for c in chunks) == "tok0 tok1 tok2 tok3 tok4 "
    assert [r["messages"][0]["content"] for r in upstream.log.requests] == [PROMPT_100K, PROMPT_100K]


async def test_large_answer_comes_back_lz4_compressed(upstream, start_gateway):
    """The static template (last fallback step) gives an answer over 1 KiB without a special upstream."""
    answer_text = ("All model servers are busy right now; please try again in a minute. " * 60)[:4000]
    config = grpc_config(upstream.url)
    config["resilience"] = {"static_answer": answer_text}
    upstream.mode = "error500"
    gateway = await start_gateway(config)
    request = pb.ChatCompletionRequest(model="m1", messages=HI, response_compression=pb.COMPRESSION_LZ4)
    channel, stub = stub_for(gateway)
    async with channel:
        response = await stub.Create(request)
        messages = [m async for m in stub.CreateStream(request)]
    assert response.WhichOneof("body") == "lz4_completion"
    assert len(response.lz4_completion) < len(answer_text) // 4
    assert completion_of(response).choices[0].message.content == answer_text
    assert response.route.fallback == "static-template"
    assert len(messages) == 1 and messages[0].lz4_chunks and not messages[0].chunks
    streamed = "".join(c.choices[0].delta.content for c in chunks_of(messages[0]) if c.choices)
    assert streamed == answer_text
    assert messages[0].route.fallback == "static-template"


async def test_fusion_workflow_answers_through_the_grpc_door(upstream, start_gateway):
    """`model: workflow:<name>` takes the director's workflow path; the `sits` extension is kept in extra_json."""
    config = grpc_config(upstream.url)
    config["workflows"] = {"ask": {"steps": [
        {"kind": "generate", "name": "draft", "branches": [{"model": "m1"}]},
        {"kind": "aggregate", "method": "weighted_vote"}]}}
    gateway = await start_gateway(config)
    request = pb.ChatCompletionRequest(model="workflow:ask", messages=HI, include_usage=True)
    channel, stub = stub_for(gateway)
    async with channel:
        response = await stub.Create(request)
        messages = [m async for m in stub.CreateStream(request)]
    completion = completion_of(response)
    assert completion.model == "workflow:ask"
    assert completion.choices[0].message.content == "hello from upstream-a"
    assert orjson.loads(completion.extra_json)["sits"]["aggregation"]["model"] == "m1"
    assert (response.route.workflow, response.route.model) == ("ask", "workflow:ask")
    extra = orjson.loads(completion.extra_json)["sits"]
    # one draft, no verifier: its neutral score, reported as is, and the same on both surfaces
    assert response.route.confidence == pytest.approx(extra["confidence"]) == pytest.approx(extra["confidence_raw"])
    chunks = [c for m in messages for c in chunks_of(m)]
    assert "".join(c.choices[0].delta.content for c in chunks if c.choices) == "hello from upstream-a"
    assert "sits" in orjson.loads(next(c.extra_json for c in chunks if c.choices and c.choices[0].finish_reason))
    assert chunks[-1].usage.total_tokens == 9  # the one draft: the test upstream counts 5 + 4


async def test_grpc_calls_land_in_the_same_metrics_as_http(upstream, start_gateway):
    upstream.stream_chunks, upstream.chunk_delay = 40, 0.02
    gateway = await start_gateway(grpc_config(upstream.url))
    await sdk(gateway).chat.completions.create(model="m1", messages=[{"role": "user", "content": "hi"}])
    channel, stub = stub_for(gateway)
    async with channel:
        await stub.Create(pb.ChatCompletionRequest(model="m1", messages=HI))
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.Create(pb.ChatCompletionRequest(model="nope", messages=HI))
        call = stub.CreateStream(pb.ChatCompletionRequest(model="m1", messages=HI))
        await call.read()
        call.cancel()
        await wait_for(lambda: upstream.log.cancelled > 0)
    async with aiohttp.ClientSession() as session, session.get(base_url(gateway) + "/metrics") as response:
        text = await response.text()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}

    def requests(**labels: str) -> float:
        return samples.get(("sits_requests_total", tuple(sorted(labels.items()))), 0.0)

    assert requests(model="m1", endpoint="m1/ep-0", status="200") == 2  # one HTTP, one gRPC
    assert requests(model="unknown", endpoint="none", status="404") == 1
    assert requests(model="m1", endpoint="m1/ep-0", status="499") == 1  # the cancelled stream


def admission_config(url: str, limit: int, queue_p2: int = 1024) -> dict[str, Any]:
    config = grpc_config(url)
    config["admission"] = {"limiter": {"type": "fixed", "limit": limit}, "queue_size": {"P2": queue_p2}}
    return config


async def test_priority_metadata_goes_through_the_same_admission(upstream, start_gateway):
    upstream.stream_chunks, upstream.chunk_delay = 4, 0.05
    gateway = await start_gateway(admission_config(upstream.url, 1, queue_p2=1))
    gate = gateway.admission.gates.get("m1")
    channel, stub = stub_for(gateway)
    request = pb.ChatCompletionRequest(model="m1", messages=HI)
    async with channel:
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await stub.Create(request, metadata=(("x-sits-priority", "urgent!!"),))
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert dict(bad.value.trailing_metadata())["sits-error-param"] == "x-sits-priority"

        async def ask(priority: str) -> list[pb.ChatCompletionStreamResponse]:
            return [m async for m in stub.CreateStream(request, metadata=(("x-sits-priority", priority),))]

        holder = asyncio.create_task(ask("P1"))
        await wait_for(lambda: gate.in_flight == 1)
        queued = asyncio.create_task(ask("batch"))
        await wait_for(lambda: gate.queued() == 1)
        with pytest.raises(grpc.aio.AioRpcError) as shed:
            await ask("batch")  # the P2 queue (1) is full
        await asyncio.gather(holder, queued)
    assert shed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    trailing = dict(shed.value.trailing_metadata())
    assert trailing["sits-http-status"] == "429" and int(trailing["retry-after"]) >= 1
    assert len(upstream.log.requests) == 2


async def test_upstream_4xx_is_relayed_with_the_model_servers_message(upstream, start_gateway):
    upstream.mode = "context_error"
    gateway = await start_gateway(grpc_config(upstream.url))
    with pytest.raises(openai.BadRequestError) as http:
        await sdk(gateway).chat.completions.create(model="m1", messages=[{"role": "user", "content": "hi"}])
    channel, stub = stub_for(gateway)
    async with channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Create(pb.ChatCompletionRequest(model="m1", messages=HI))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == http.value.body["message"] == "This model's maximum context length is 4096 tokens"
    assert dict(info.value.trailing_metadata())["sits-error-code"] == "context_length_exceeded"


async def test_lz4_request_cannot_expand_past_the_size_limit(upstream, start_gateway):
    gateway = await start_gateway(grpc_config(upstream.url, max_body_bytes=64 * 1024))
    inner = pb.ChatCompletionRequest(model="m1", messages=[pb.ChatMessage(role="user", content="a" * 200_000)])
    bomb = lz4_request(inner)
    assert bomb.ByteSize() < 4096  # small on the wire, 200 KB once expanded
    channel, stub = stub_for(gateway)
    async with channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Create(bomb)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "expands to more than 65536 bytes" in info.value.details()
    assert upstream.log.requests == []


async def test_grpc_call_continues_the_callers_trace_into_the_upstream(upstream, start_gateway):
    receiver = OtlpReceiver()
    await receiver.start()
    try:
        config = grpc_config(upstream.url)
        config["telemetry"] = {"tracing": {"endpoint": receiver.url}}
        gateway = await start_gateway(config)
        trace_id, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
        channel, stub = stub_for(gateway)
        async with channel:
            await stub.Create(pb.ChatCompletionRequest(model="m1", messages=HI, max_tokens=7),
                              metadata=(("traceparent", f"00-{trace_id}-{caller_span}-01"),))
        spans = await receiver.wait_for(lambda found: {s.kind for s in found} >= {2, 3})  # server and client spans
    finally:
        await receiver.stop()
    server = next(s for s in spans if s.kind == 2)
    attempt = next(s for s in spans if s.kind == 3)
    assert server.name == "POST /sits.v1.ChatCompletions/Create"
    assert (server.trace_id, server.parent_span_id) == (trace_id, caller_span)
    assert server.attributes["gen_ai.request.max_tokens"] == 7
    assert attempt.parent_span_id == server.span_id
    assert upstream.log.headers[-1]["traceparent"] == f"00-{trace_id}-{attempt.span_id}-01"


async def test_a_grpc_port_in_use_is_a_startup_error_not_a_shared_port(upstream, start_gateway, tmp_path):
    first = await start_gateway(grpc_config(upstream.url))
    config = parse_config(one_model_config(upstream.url, grpc_port=first.grpc.bound_port))
    second = Gateway(Settings(host="127.0.0.1", port=0, data_dir=tmp_path / "second"), config)
    try:
        with pytest.raises(ConfigError, match=f"server.grpc_port: cannot listen on 127.0.0.1:{first.grpc.bound_port}"):
            await second.start()
    finally:
        await second.stop()


async def test_shutdown_lets_an_in_flight_stream_finish_and_refuses_new_calls(upstream, tmp_path):
    upstream.stream_chunks, upstream.chunk_delay = 10, 0.05
    gateway = Gateway(Settings(host="127.0.0.1", port=0, data_dir=tmp_path / "data"),
                      parse_config(grpc_config(upstream.url)))  # drain_timeout_s: 2
    await gateway.start()
    request = pb.ChatCompletionRequest(model="m1", messages=HI)
    channel, stub = stub_for(gateway)
    async with channel:
        call = stub.CreateStream(request)
        messages = [await call.read()]
        stopping = asyncio.create_task(gateway.stop())
        await asyncio.sleep(0.1)  # the gateway is draining now
        while (message := await call.read()) is not grpc.aio.EOF:
            messages.append(message)
        assert await call.code() == grpc.StatusCode.OK
        await asyncio.wait_for(stopping, 5)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Create(request, timeout=2)
    assert "".join(c.choices[0].delta.content for m in messages for c in chunks_of(m) if c.choices) == \
        "".join(f"tok{i} " for i in range(10))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
