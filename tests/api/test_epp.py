"""The endpoint picker end to end: a real grpcio client sends what Envoy's ext_proc filter sends
(request headers, body chunks, trailers, the response path) to a running gateway's EPP port."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import grpc
import orjson
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sits.api.epp.protocol import DESTINATION, DESTINATION_NAMESPACE, SERVED, SUBSET, SUBSET_NAMESPACE
from sits.configuration.gateway import parse_config
from sits.errors import ConfigError

Mode = processing_mode_pb2.ProcessingMode
CHAT = "/v1/chat/completions"


def chat_body(model: str = "m1", text: str = "hi", **extra: Any) -> bytes:
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": text}], **extra})


def headers_message(path: str = CHAT, end_of_stream: bool = False, subset: Any = None,
                    mode: int | None = Mode.FULL_DUPLEX_STREAMED,
                    extra: Iterable[tuple[str, str]] = ()) -> pb.ProcessingRequest:
    headers = [(":method", "POST" if not end_of_stream else "GET"), (":path", path), (":authority", "gw"),
               ("content-type", "application/json"), *extra]
    message = pb.ProcessingRequest(request_headers=pb.HttpHeaders(
        headers=base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in headers]),
        end_of_stream=end_of_stream))
    if mode is not None:
        message.protocol_config.request_body_mode = mode
        message.protocol_config.response_body_mode = mode
    if subset is not None:
        hint = struct_pb2.Struct()
        if isinstance(subset, str):
            hint.fields[SUBSET].string_value = subset
        else:
            hint.fields[SUBSET].list_value.extend(subset)
        message.metadata_context.filter_metadata[SUBSET_NAMESPACE].CopyFrom(hint)
    return message


def body_messages(body: bytes, chunk: int = 16 * 1024, end_of_stream: bool = True) -> list[pb.ProcessingRequest]:
    parts = [body[i:i + chunk] for i in range(0, len(body), chunk)]
    return [pb.ProcessingRequest(request_body=pb.HttpBody(body=part, end_of_stream=end_of_stream and i == len(parts) - 1))
            for i, part in enumerate(parts)]


def response_messages(status: str = "200", served: str | None = None) -> list[pb.ProcessingRequest]:
    headers = pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=base_pb2.HeaderMap(headers=[
        base_pb2.HeaderValue(key=":status", raw_value=status.encode())])))
    if served is not None:
        headers.metadata_context.filter_metadata[DESTINATION_NAMESPACE].fields[SERVED].string_value = served
    return [headers, pb.ProcessingRequest(response_body=pb.HttpBody(body=b'{"ok":1}', end_of_stream=True))]


class Epp:
    """One ext_proc stream at a time, messages sent in order, answers read as the proxy reads them."""

    def __init__(self, gateway) -> None:
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{gateway.epp.bound_port}",
                                                 options=[("grpc.max_receive_message_length", 64 * 1024 * 1024),
                                                          ("grpc.max_send_message_length", 64 * 1024 * 1024)])
        self.stub = pb_grpc.ExternalProcessorStub(self.channel)

    async def exchange(self, messages: list[pb.ProcessingRequest], answers: int) -> list[pb.ProcessingResponse]:
        """Send every message, read `answers` answers, close the stream."""
        call = self.stub.Process()
        for m in messages:
            await call.write(m)
        out = [await asyncio.wait_for(call.read(), 30) for _ in range(answers)]
        await call.done_writing()
        assert await call.read() == grpc.aio.EOF
        return out

    async def close(self) -> None:
        await self.channel.close()


def destination(answer: pb.ProcessingResponse) -> str:
    """The header the answer sets, checked equal to the dynamic metadata's value (the protocol's MUST)."""
    common = answer.request_headers.response if answer.HasField("request_headers") else answer.request_body.response
    header = {h.header.key: h.header.raw_value.decode() for h in common.header_mutation.set_headers}[DESTINATION]
    meta = answer.dynamic_metadata.fields[DESTINATION_NAMESPACE].struct_value.fields[DESTINATION].string_value
    assert header == meta
    return header


def picked(answer: pb.ProcessingResponse) -> str:
    """The picked endpoint: the first of the destination list (fallbacks follow it)."""
    return destination(answer).split(",")[0]


def streamed(answers: list[pb.ProcessingResponse]) -> bytes:
    chunks = [a.request_body.response.body_mutation.streamed_response for a in answers if a.HasField("request_body")]
    assert chunks and chunks[-1].end_of_stream and not any(c.end_of_stream for c in chunks[:-1])
    return b"".join(c.body for c in chunks)


def immediate_status(answer: pb.ProcessingResponse) -> tuple[int, dict[str, Any]]:
    assert answer.HasField("immediate_response"), answer
    r = answer.immediate_response
    return r.status.code, orjson.loads(r.body)


def addr(upstream) -> str:
    return f"127.0.0.1:{upstream.port}"


def pool_config(*models: dict[str, Any], **server: Any) -> dict[str, Any]:
    return {"server": {"drain_timeout_s": 2, "epp_port": 0, **server}, "models": list(models)}


@pytest.fixture
async def epp_of():
    opened: list[Epp] = []

    def make(gateway) -> Epp:
        opened.append(Epp(gateway))
        return opened[-1]

    yield make
    for e in opened:
        await e.close()


async def test_headers_body_in_chunks_and_trailers_get_the_destination_and_the_body_back(
        upstream, upstream_b, start_gateway, epp_of):
    gateway = await start_gateway(pool_config({"name": "m1", "endpoints": [{"url": upstream.url},
                                                                          {"url": upstream_b.url}]}))
    epp = epp_of(gateway)
    body = chat_body(text="explain " * 200, max_tokens=32, stream=True)
    messages = [headers_message(), *body_messages(body, chunk=300, end_of_stream=False),
                pb.ProcessingRequest(request_trailers=pb.HttpTrailers())]
    chunks = -(-len(body) // 62_000)
    answers = await epp.exchange(messages, 1 + chunks + 1)
    assert answers[0].HasField("request_headers") and answers[0].request_headers.response.clear_route_cache
    assert destination(answers[0]) in {addr(upstream), addr(upstream_b)}  # the pick alone by default
    # trailers follow: the streamed body does not end the stream, the trailers' answer does
    body_back = answers[1:-1]
    assert b"".join(a.request_body.response.body_mutation.streamed_response.body for a in body_back) == body
    assert not any(a.request_body.response.body_mutation.streamed_response.end_of_stream for a in body_back)
    assert answers[-1].HasField("request_trailers")


async def test_response_path_passes_through_and_the_endpoint_is_counted_until_it_ends(upstream, start_gateway,
                                                                                      epp_of):
    gateway = await start_gateway(pool_config({"name": "m1", "endpoints": [{"url": upstream.url}]}))
    epp = epp_of(gateway)
    call = epp.stub.Process()
    for m in [headers_message(), *body_messages(chat_body())]:
        await call.write(m)
    first = await call.read()
    assert picked(first) == addr(upstream)
    assert streamed([await call.read()]) == chat_body()
    endpoint_id = gateway.routing_table().models["m1"].endpoints[0].id
    assert gateway._stats.get(endpoint_id).in_flight == 1
    for m in response_messages():
        await call.write(m)
    headers_answer, body_answer = await call.read(), await call.read()
    assert headers_answer.HasField("response_headers") and not headers_answer.response_headers.response.HasField(
        "header_mutation")
    assert body_answer.response_body.response.body_mutation.streamed_response.body == b'{"ok":1}'  # echoed (duplex)
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF
    assert gateway._stats.get(endpoint_id).in_flight == 0


async def test_a_200_kb_prompt_is_streamed_back_whole(upstream, start_gateway, epp_of):
    gateway = await start_gateway(pool_config({"name": "m1", "endpoints": [{"url": upstream.url}]}))
    body = chat_body(text="x" * 200_000)
    answers = await epp_of(gateway).exchange([headers_message(), *body_messages(body)], 1 + -(-len(body) // 62_000))
    assert picked(answers[0]) == addr(upstream)
    assert streamed(answers[1:]) == body


async def test_a_body_over_max_body_bytes_is_413(upstream, start_gateway, epp_of):
    gateway = await start_gateway(pool_config({"name": "m1", "endpoints": [{"url": upstream.url}]},
                                              max_body_bytes=4096))
    answers = await epp_of(gateway).exchange([headers_message(), *body_messages(chat_body(text="y" * 8000),
                                                                                chunk=1024)], 1)
    status, error = immediate_status(answers[0])
    assert status == 413 and error["error"]["code"] == "payload_too_large"


async def test_upstream_model_name_is_rewritten_in_the_body_and_an_alias_resolves(upstream, start_gateway, epp_of):
    gateway = await start_gateway({**pool_config({"name": "m1", "endpoints": [{"url": upstream.url,
                                                                              "upstream_model": "org/real-7b"}]}),
                                   "aliases": {"chat": "m1"}})
    body = chat_body(model="chat", temperature=0.5, vendor_x=[1, 2])
    answers = await epp_of(gateway).exchange([headers_message(), *body_messages(body)], 2)
    sent = streamed(answers[1:])
    assert orjson.loads(sent) == {**orjson.loads(body), "model": "org/real-7b"}
    set_headers = {h.header.key: h.header.raw_value.decode()
                   for h in answers[0].request_headers.response.header_mutation.set_headers}
    assert set_headers["content-length"] == str(len(sent)) and set_headers["x-sits-model"] == "m1"


async def test_buffered_mode_answers_headers_first_and_puts_the_destination_on_the_body(upstream, start_gateway,
                                                                                        epp_of):
    gateway = await start_gateway(pool_config({"name": "m1", "endpoints": [{"url": upstream.url,
                                                                           "upstream_model": "real"}]}))
    epp = epp_of(gateway)
    call = epp.stub.Process()
    await call.write(headers_message(mode=Mode.BUFFERED))
    first = await call.read()
    assert first.HasField("request_headers") and not first.request_headers.response.HasField("header_mutation")
    await call.write(body_messages(chat_body())[0])
    answer = await call.read()
    assert answer.HasField("request_body") and picked(answer) == addr(upstream)
    assert orjson.loads(answer.request_body.response.body_mutation.body)["model"] == "real"
    await call.done_writing()


async def test_concurrent_streams_each_get_a_pick(upstream, upstream_b, start_gateway, epp_of):
    gateway = await start_gateway(pool_config({"name": "m1", "endpoints": [{"url": upstream.url},
                                                                          {"url": upstream_b.url}]}))
    epp = epp_of(gateway)

    async def one(i: int) -> str:
        answers = await epp.exchange([headers_message(), *body_messages(chat_body(text=f"question {i}"))], 2)
        assert orjson.loads(streamed(answers[1:]))["messages"][0]["content"] == f"question {i}"
        return picked(answers[0])

    picks = await asyncio.gather(*(one(i) for i in range(24)))
    assert set(picks) <= {addr(upstream), addr(upstream_b)} and len(picks) == 24
    ids = [e.id for e in gateway.routing_table().models["m1"].endpoints]
    assert all(gateway._stats.get(i).in_flight == 0 for i in ids)  # every stream's count given back


async def test_auto_schedules_the_tier_the_prompt_needs(upstream, upstream_b, start_gateway, epp_of):
    gateway = await start_gateway(pool_config(
        {"name": "small", "tier": "tiny", "endpoints": [{"url": upstream.url}]},
        {"name": "big", "tier": "heavy", "endpoints": [{"url": upstream_b.url}]}))
    epp = epp_of(gateway)
    greeting = await epp.exchange([headers_message(), *body_messages(chat_body(model="auto", text="hi"))], 2)
    assert picked(greeting[0]) == addr(upstream)
    assert orjson.loads(streamed(greeting[1:]))["model"] == "small"  # `auto` becomes the model's name
    hard = ("Prove rigorously that the sequence converges, derive the closed form of its limit step by step, "
            "then analyse the complexity of an algorithm computing it and justify every bound. ") * 30
    heavy = await epp.exchange([headers_message(), *body_messages(chat_body(model="auto", text=hard))], 2)
    assert picked(heavy[0]) == addr(upstream_b)
    assert orjson.loads(streamed(heavy[1:]))["model"] == "big"


@pytest.mark.parametrize("as_string", [False, True])
async def test_the_subset_hint_is_respected(upstream, upstream_b, start_gateway, epp_of, as_string):
    gateway = await start_gateway(pool_config({"name": "m1", "endpoints": [{"url": upstream.url},
                                                                          {"url": upstream_b.url}]},
                                              epp_fallbacks=1))
    epp = epp_of(gateway)
    only_b = addr(upstream_b) if as_string else [addr(upstream_b)]
    for i in range(8):
        answers = await epp.exchange([headers_message(subset=only_b), *body_messages(chat_body(text=f"q{i}"))], 2)
        assert destination(answers[0]) == addr(upstream_b)  # no fallback outside the subset either
    outside = await epp.exchange([headers_message(subset=["10.9.9.9:8000"]), *body_messages(chat_body())], 1)
    status, error = immediate_status(outside[0])
    assert status == 503 and "subset hint" in error["error"]["message"]


async def test_unhealthy_endpoints_are_avoided_and_none_ready_is_503(upstream, upstream_b, start_gateway, epp_of):
    config = pool_config({"name": "m1", "endpoints": [{"url": upstream.url}, {"url": upstream_b.url}]},
                         epp_fallbacks=1)
    config["control"] = {"health": {"unhealthy_threshold": 1, "interval_s": 3600}}
    gateway = await start_gateway(config)
    epp = epp_of(gateway)
    a, b = gateway.routing_table().models["m1"].endpoints
    now = gateway._clock()
    gateway._health.probe_result(a.id, False, now, "connection refused")
    for i in range(6):
        answers = await epp.exchange([headers_message(), *body_messages(chat_body(text=f"q{i}"))], 2)
        assert destination(answers[0]) == addr(upstream_b)  # nor listed as a fallback
    gateway._health.probe_result(b.id, False, now, "connection refused")
    answers = await epp.exchange([headers_message(), *body_messages(chat_body())], 1)
    status, error = immediate_status(answers[0])
    assert status == 503 and error["error"]["type"] == "overloaded_error"
    assert {h.header.key: h.header.raw_value for h in answers[0].immediate_response.headers.set_headers}[
        "content-type"] == b"application/json"


async def test_admission_sheds_with_429_and_releases_tickets_when_streams_end(upstream, start_gateway, epp_of):
    config = pool_config({"name": "m", "endpoints": [{"url": upstream.url}]})
    config["admission"] = {"limiter": {"type": "fixed", "limit": 1}, "queue_size": {"P2": 0}}
    gateway = await start_gateway(config)
    epp = epp_of(gateway)
    gate = gateway.admission.gates.get("m")
    holder = epp.stub.Process()  # holds the one slot: picked, response not yet seen
    for m in [headers_message(), *body_messages(chat_body(model="m"))]:
        await holder.write(m)
    assert picked(await holder.read()) == addr(upstream)
    await holder.read()
    assert gate.in_flight == 1
    batch = headers_message(extra=[("x-sits-priority", "batch")])
    answers = await epp.exchange([batch, *body_messages(chat_body(model="m"))], 1)
    status, error = immediate_status(answers[0])
    assert status == 429 and error["error"]["code"] in ("queue_full", "shed")
    await holder.done_writing()  # the proxy closes the stream: the ticket comes back
    assert await holder.read() == grpc.aio.EOF
    for _ in range(500):
        if gate.in_flight == 0:
            break
        await asyncio.sleep(0.01)
    assert gate.in_flight == 0
    again = await epp.exchange([batch, *body_messages(chat_body(model="m"))], 2)
    assert picked(again[0]) == addr(upstream)


async def test_client_errors_are_openai_shaped_immediate_responses(upstream, start_gateway, epp_of):
    gateway = await start_gateway(pool_config({"name": "m1", "endpoints": [{"url": upstream.url}]}))
    epp = epp_of(gateway)
    missing = await epp.exchange([headers_message(), *body_messages(chat_body(model="nope"))], 1)
    status, error = immediate_status(missing[0])
    assert status == 404 and error["error"]["code"] == "model_not_found" and "m1" in error["error"]["message"]
    invalid = await epp.exchange([headers_message(), *body_messages(b'{"model": "m1", "messages": []}')], 1)
    status, error = immediate_status(invalid[0])
    assert status == 422 and error["error"]["param"] == "messages"


async def test_a_request_without_a_body_is_answered_on_its_headers(upstream, start_gateway, epp_of):
    gateway = await start_gateway(pool_config({"name": "m1", "endpoints": [{"url": upstream.url}]}))
    answers = await epp_of(gateway).exchange([headers_message("/v1/models", end_of_stream=True)], 1)
    assert picked(answers[0]) == addr(upstream)


async def test_a_fallback_that_served_takes_the_in_flight_count(upstream, upstream_b, start_gateway, epp_of):
    gateway = await start_gateway(pool_config({"name": "m1", "endpoints": [{"url": upstream.url},
                                                                          {"url": upstream_b.url}]},
                                              epp_fallbacks=1))
    epp = epp_of(gateway)
    call = epp.stub.Process()
    for m in [headers_message(), *body_messages(chat_body())]:
        await call.write(m)
    listed = destination(await call.read())
    await call.read()
    primary, fallback = listed.split(",")  # epp_fallbacks: 1, both endpoints listed, the picked one first
    by_address = {f"127.0.0.1:{e.port}": e.id for e in gateway.routing_table().models["m1"].endpoints}
    await call.write(response_messages(served=fallback)[0])
    await call.read()
    assert gateway._stats.get(by_address[primary]).in_flight == 0
    assert gateway._stats.get(by_address[fallback]).in_flight == 1
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF
    assert gateway._stats.get(by_address[fallback]).in_flight == 0


async def test_health_is_serving_for_every_service_name(upstream, start_gateway):
    gateway = await start_gateway(pool_config({"name": "m1", "endpoints": [{"url": upstream.url}]}))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.epp.bound_port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"):
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, service


def test_epp_port_is_validated_like_the_other_ports():
    with pytest.raises(ConfigError, match="epp_port"):
        parse_config({"server": {"port": 9000, "epp_port": 9000}, "models": []})
    with pytest.raises(ConfigError, match="epp_port"):
        parse_config({"server": {"epp_port": 70000}, "models": []})


def test_envoy_stubs_and_the_otlp_exporter_share_one_environment():
    """xds-protos also ships copies of opentelemetry/proto and google/api modules (older ones): when it is
    installed after opentelemetry-proto / googleapis-common-protos, the OTLP exporter cannot import.
    Reinstalling those two (`pip install --force-reinstall --no-deps ...`) puts their files back."""
    from envoy.service.ext_proc.v3 import external_processor_pb2  # noqa: F401
    from opentelemetry.exporter.otlp.proto.common._internal import _encode_value  # noqa: F401
    from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope  # noqa: F401
