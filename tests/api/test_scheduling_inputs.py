"""What a request needs reaches the scheduler's filters: tools, vision and JSON output against the
features a model declares (never its free-form capability labels), and the client's max_tokens against the context window."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import orjson
import pytest

from sits.api.body_fields import max_tokens_of
from sits.api.schemas import CHAT_COMPLETION
from tests.conftest import sdk
from tests.upstream_server import FakeUpstream

MESSAGES = [{"role": "user", "content": "what is the weather in Paris?"}]
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}}}]


def config(small: str, big: str | None = None, **small_model: Any) -> dict[str, Any]:
    models: list[dict[str, Any]] = [{"name": "small", "capabilities": ["chat"], "features": [], "endpoints": [{"url": small}],
                                     "fallbacks": ["big"] if big else [], **small_model}]
    if big:
        models.append({"name": "big", "capabilities": ["chat"], "features": ["tools", "vision", "json"],
                       "endpoints": [{"url": big}]})
    return {"server": {"drain_timeout_s": 2}, "models": models, "control": {"allow_loopback": True}}


@pytest.mark.parametrize(("body", "needs"), [
    ({"messages": MESSAGES}, set()),
    ({"messages": MESSAGES, "tools": TOOLS}, {"tools"}),
    ({"messages": MESSAGES, "tools": []}, set()),
    ({"messages": MESSAGES, "functions": [{"name": "f", "parameters": {}}]}, {"tools"}),
    ({"messages": MESSAGES, "response_format": {"type": "json_object"}}, {"json"}),
    ({"messages": MESSAGES, "response_format": {"type": "text"}}, set()),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}],
      "tools": TOOLS}, {"tools", "vision"}),
])
def test_chat_needs(body, needs):
    assert CHAT_COMPLETION.needs(CHAT_COMPLETION.parse(orjson.dumps({"model": "m", **body}))) == needs


@pytest.mark.parametrize(("body", "budget"), [
    ({}, 0), ({"max_tokens": 300}, 300), ({"max_completion_tokens": 200, "max_tokens": 300}, 200),
    ({"max_tokens": None}, 0), ({"max_tokens": True}, 0),
])
def test_max_tokens_of(body, budget):
    assert max_tokens_of(body) == budget


async def test_a_tools_request_goes_to_the_fallback_that_declares_tools(upstream, upstream_b, start_gateway):
    gateway = await start_gateway(config(upstream.url, upstream_b.url))
    raw = await sdk(gateway).chat.completions.with_raw_response.create(model="small", messages=MESSAGES, tools=TOOLS)
    assert raw.headers["x-sits-model"] == "big"
    assert raw.headers["x-sits-attempts"] == "big/ep-0:ok"
    assert upstream.log.requests == []  # the model without tools was never called


async def test_a_request_the_model_can_serve_stays_on_it(upstream, upstream_b, start_gateway):
    gateway = await start_gateway(config(upstream.url, upstream_b.url))
    raw = await sdk(gateway).chat.completions.with_raw_response.create(model="small", messages=MESSAGES)
    assert raw.headers["x-sits-model"] == "small"
    assert upstream_b.log.requests == []


async def test_no_capable_model_is_a_400_naming_what_is_missing(upstream, start_gateway):
    gateway = await start_gateway(config(upstream.url))
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}]
    with pytest.raises(openai.BadRequestError) as info:
        await sdk(gateway).chat.completions.create(model="small", messages=image, tools=TOOLS)
    assert info.value.code == "model_not_capable"
    assert "'small' does not support tools, vision (its features: none)" in info.value.message
    assert upstream.log.requests == []


async def test_a_model_that_declares_no_features_takes_everything(upstream, start_gateway):
    cfg = config(upstream.url)
    del cfg["models"][0]["features"]
    gateway = await start_gateway(cfg)
    raw = await sdk(gateway).chat.completions.with_raw_response.create(
        model="small", messages=MESSAGES, tools=TOOLS, response_format={"type": "json_object"})
    assert raw.headers["x-sits-model"] == "small"


async def test_capability_labels_are_not_features(upstream, start_gateway):
    """The documented registration example labels a model; its tools and JSON requests must still reach it."""
    cfg = config(upstream.url)
    del cfg["models"][0]["features"]
    cfg["models"][0]["capabilities"] = ["numerical-reasoning", "regulatory-reporting"]
    gateway = await start_gateway(cfg)
    client = sdk(gateway)
    for extra in ({"tools": TOOLS}, {"response_format": {"type": "json_object"}}):
        raw = await client.chat.completions.with_raw_response.create(model="small", messages=MESSAGES, **extra)
        assert raw.headers["x-sits-model"] == "small"
    assert len(upstream.log.requests) == 2


async def test_max_tokens_counts_against_the_context_window(upstream, upstream_b, start_gateway):
    cfg = config(upstream.url, context_window=1000)
    cfg["models"].append({"name": "long", "context_window": 32768, "endpoints": [{"url": upstream_b.url}]})
    gateway = await start_gateway(cfg)
    client = sdk(gateway)
    raw = await client.chat.completions.with_raw_response.create(model="small", messages=MESSAGES, max_tokens=500)
    assert raw.headers["x-sits-model"] == "small"
    raw = await client.chat.completions.with_raw_response.create(model="small", messages=MESSAGES, max_tokens=2000)
    assert raw.headers["x-sits-model"] == "long"  # prompt + 2,000 asked for does not fit 1,000: a larger window
    assert len(upstream.log.requests) == 1


async def test_max_tokens_over_every_window_is_a_context_error_before_any_upstream(upstream, start_gateway):
    gateway = await start_gateway(config(upstream.url, context_window=1000))
    with pytest.raises(openai.BadRequestError) as info:
        await sdk(gateway).chat.completions.create(model="small", messages=MESSAGES, max_tokens=4000)
    assert info.value.code == "context_length_exceeded"
    assert "maximum context length is 1000 tokens" in info.value.message
    assert upstream.log.requests == []


async def test_model_auto_picks_a_model_that_can_serve_the_request(upstream, upstream_b, start_gateway):
    gateway = await start_gateway({"server": {"drain_timeout_s": 2}, "control": {"allow_loopback": True}, "models": [
        {"name": "tiny", "tier": "tiny", "features": [], "endpoints": [{"url": upstream.url}]},
        {"name": "heavy", "tier": "heavy", "features": ["tools"], "endpoints": [{"url": upstream_b.url}]},
    ]})
    client = sdk(gateway)
    hello = [{"role": "user", "content": "hi"}]
    plain = await client.chat.completions.with_raw_response.create(model="auto", messages=hello)
    assert plain.headers["x-sits-model"] == "tiny"  # a short prompt: the tier rule's choice
    tools = await client.chat.completions.with_raw_response.create(model="auto", messages=hello, tools=TOOLS)
    assert tools.headers["x-sits-model"] == "heavy"  # the only model that declares tools
    assert "auto=tier tiny" in tools.headers["x-sits-route"]


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan", "inf", "3600001"])
async def test_a_malformed_sla_header_is_422_naming_it(upstream, start_gateway, value):
    gateway = await start_gateway(config(upstream.url))
    with pytest.raises(openai.UnprocessableEntityError) as info:
        await sdk(gateway).chat.completions.create(model="small", messages=MESSAGES,
                                                   extra_headers={"x-sits-sla-ms": value})
    assert info.value.body["param"] == "x-sits-sla-ms"
    assert upstream.log.requests == []


async def test_the_request_sla_keeps_it_off_an_endpoint_slower_than_that(upstream, start_gateway):
    slow = FakeUpstream("slow", chunk_delay=0.05)  # a stream of 5 chunks: about 250 ms
    await slow.start()
    try:
        gateway = await start_gateway({"server": {"drain_timeout_s": 2}, "control": {"allow_loopback": True},
                                       "models": [{"name": "m", "endpoints": [{"url": upstream.url},
                                                                              {"url": slow.url}]}]})
        client = sdk(gateway)

        async def stream(prompt: str, **headers: str) -> str:
            raw = await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": prompt}], stream=True, extra_headers=headers)
            async for _ in raw.parse():
                pass
            return raw.headers["x-sits-endpoint"]

        used = {await stream(f"warm-up {i}") for i in range(16)}  # different prompts: both endpoints measured
        assert used == {"m/ep-0", "m/ep-1"}
        await asyncio.sleep(0.3)  # p95 is recomputed every 0.2 s
        picked = [await stream(f"bounded {i}", **{"x-sits-sla-ms": "100"}) for i in range(8)]
        assert set(picked) == {"m/ep-0"}  # the slow endpoint's p95 is over the request's 100 ms
    finally:
        await slow.stop()
