"""Tenant keys on the gRPC door: the key from `authorization: Bearer ...` metadata passes the same gate as
on HTTP (model, limits, budgets, settlement), refusals carry gRPC's codes and the HTTP API's messages."""

from __future__ import annotations

import time

import grpc
import openai
import pytest

from sits.api.grpc import chat_pb2 as pb
from sits.api.grpc import chat_pb2_grpc
from sits.tenants.records import Budget, Limits
from tests.tenants.conftest import Keys, Spend, client, tenant_config

HI = [pb.ChatMessage(role="user", content="hi")]


def bearer(secret: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {secret}"),)


async def test_grpc_calls_pass_the_key_gate_with_grpc_codes_and_the_http_messages(usage_upstream, tenant_gateway):
    keys, spend = Keys(), Spend()
    keys.add("sk-g", "key_g", allowed_models=("m1",), limits=Limits(rpm=2))
    keys.add("sk-gone", "key_gone", revoked_at=time.time() - 1)
    keys.add("sk-soft", "key_soft", budget=Budget("daily", soft_usd=0.000001))
    raw = tenant_config(usage_upstream.url)
    raw["server"]["grpc_port"] = 0
    gateway = await tenant_gateway(raw, keys, spend)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc.bound_port}")
    stub = chat_pb2_grpc.ChatCompletionsStub(channel)

    async def refused(model: str, metadata: tuple[tuple[str, str], ...]) -> grpc.aio.AioRpcError:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Create(pb.ChatCompletionRequest(model=model, messages=HI), metadata=metadata)
        return info.value

    async with channel:
        missing = await refused("m1", ())
        assert (missing.code(), missing.details()) == (grpc.StatusCode.UNAUTHENTICATED,
                                                       "this gateway needs 'Authorization: Bearer <api key>'")
        revoked = await refused("m1", bearer("sk-gone"))
        assert (revoked.code(), revoked.details()) == (grpc.StatusCode.UNAUTHENTICATED, "API key key_gone is revoked")
        unknown = await refused("m1", bearer("sk-nobody"))
        assert (unknown.code(), unknown.details()) == (grpc.StatusCode.UNAUTHENTICATED, "invalid API key")

        forbidden = await refused("m2", bearer("sk-g"))
        assert forbidden.code() == grpc.StatusCode.PERMISSION_DENIED
        assert dict(forbidden.trailing_metadata())["sits-error-code"] == "model_not_allowed"
        async with client(gateway, "sk-g") as http:  # the HTTP door's message, word for word
            with pytest.raises(openai.PermissionDeniedError) as caught:
                await http.chat.completions.create(model="m2", messages=[{"role": "user", "content": "hi"}])
        assert forbidden.details() == caught.value.body["message"]

        answer = await stub.Create(pb.ChatCompletionRequest(model="m1", messages=HI), metadata=bearer("sk-g"))
        assert answer.completion.choices[0].message.content == "hi"
        stream = stub.CreateStream(pb.ChatCompletionRequest(model="m1", messages=HI, include_usage=True),
                                   metadata=bearer("sk-g"))
        messages = [m async for m in stream]
        assert await stream.code() == grpc.StatusCode.OK and messages

        limited = await refused("m1", bearer("sk-g"))  # rpm 2: the two calls above (403s take nothing)
        assert limited.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        trailers = dict(limited.trailing_metadata())
        assert trailers["x-sits-limit"] == "rpm" and int(trailers["retry-after"]) >= 1
        assert limited.details().startswith("key rpm limit of 2 per minute reached for key key_g; limit: rpm")

        first = stub.Create(pb.ChatCompletionRequest(model="m1", messages=HI), metadata=bearer("sk-soft"))
        await first
        assert "x-sits-budget-warning" not in dict(await first.initial_metadata())
        second = stub.Create(pb.ChatCompletionRequest(model="m1", messages=HI), metadata=bearer("sk-soft"))
        await second
        assert "soft budget" in dict(await second.initial_metadata())["x-sits-budget-warning"]

    records = await spend.wait_for(7)
    by_key = [(r.key_id, r.model, r.status) for r in records]
    assert by_key[:5] == [("key_g", "m2", 403), ("key_g", "m2", 403), ("key_g", "m1", 200), ("key_g", "m1", 200),
                          ("key_g", "m1", 429)]
    unary, streamed = records[2], records[3]
    # Settled on the usage the upstream reported (1000 in, 500 out at $3 / $15 per million), on both calls.
    assert unary.usage.input_tokens == streamed.usage.input_tokens == 1000
    assert unary.cost_usd == pytest.approx(streamed.cost_usd) == pytest.approx(0.0105)


async def test_a_keyed_grpc_stream_is_settled_on_the_usage_asked_for_or_on_its_counted_text(usage_upstream,
                                                                                           tenant_gateway):
    keys, spend = Keys(), Spend()
    keys.add("sk-n", "key_n", budget=Budget("daily", soft_usd=100.0))
    raw = tenant_config(usage_upstream.url)
    raw["server"]["grpc_port"] = 0
    gateway = await tenant_gateway(raw, keys, spend)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc.bound_port}") as channel:
        stub = chat_pb2_grpc.ChatCompletionsStub(channel)

        async def streamed() -> list[pb.ChatCompletionChunk]:
            stream = stub.CreateStream(pb.ChatCompletionRequest(model="m1", messages=HI, max_tokens=400),
                                       metadata=bearer("sk-n"))
            messages = [m async for m in stream]
            assert await stream.code() == grpc.StatusCode.OK
            return [chunk for m in messages for chunk in m.chunks]

        # the client asked for no usage: the gateway asks the upstream, settles on it, and does not send it on
        chunks = await streamed()
        assert len(chunks) == 3 and not any(chunk.HasField("usage") for chunk in chunks)
        assert usage_upstream.bodies[-1]["stream_options"] == {"include_usage": True}
        # an upstream that sends no usage at all: "t0 t1 t2 " counted (3 tokens by the chars / 4
        # estimate), not the 400 reserved
        usage_upstream.streams_usage = False
        assert len(await streamed()) == 3
    asked, counted = await spend.wait_for(2)
    assert (asked.usage.input_tokens, asked.usage.output_tokens, asked.status) == (1000, 500, 200)
    assert counted.usage.output_tokens == 3 and counted.status == 200
