"""`model: "auto"` schedules the models of the chosen tier like endpoints: health, circuit state, load,
features and cost decide among them, and a tier with no usable model falls through to its neighbour."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.conftest import sdk
from tests.upstream_server import FakeUpstream

CODE = [{"role": "user", "content": "Fix this:\n```python\ndef f(x):\n    return x +\n```"}]  # the tier rule: base
HI = [{"role": "user", "content": "hi"}]  # tiny
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]


def two_base_models(a: str, b: str, **extra: Any) -> dict[str, Any]:
    return {"server": {"drain_timeout_s": 2}, "control": {"allow_loopback": True}, "models": [
        {"name": "base-a", "tier": "base", "endpoints": [{"url": a}], **extra},
        {"name": "base-b", "tier": "base", "endpoints": [{"url": b}], **extra},
    ]}


async def test_a_failing_model_of_the_tier_leaves_the_healthy_one_serving(upstream, upstream_b, start_gateway):
    """Every request once went to the tier's first model: 502, 502, then 503 while the second idled."""
    gateway = await start_gateway(two_base_models(upstream.url, upstream_b.url))
    client = sdk(gateway)
    upstream.mode = "error500"
    for _ in range(6):
        raw = await client.chat.completions.with_raw_response.create(model="auto", messages=CODE)
        assert raw.headers["x-sits-model"] == "base-b"
        assert "auto=tier base" in raw.headers["x-sits-route"]
    assert len(upstream_b.log.requests) == 6
    assert len(upstream.log.requests) < 6  # the failing model is skipped once its circuit opens


async def test_load_spreads_over_the_models_of_the_tier(upstream, upstream_b, start_gateway):
    gateway = await start_gateway(two_base_models(upstream.url, upstream_b.url))
    client = sdk(gateway)
    upstream.mode = upstream_b.mode = "hang"  # each holds its requests until released
    calls = [asyncio.create_task(client.chat.completions.with_raw_response.create(model="auto", messages=CODE))
             for _ in range(4)]
    for _ in range(200):
        if len(upstream.log.requests) + len(upstream_b.log.requests) == 4:
            break
        await asyncio.sleep(0.01)
    upstream.release()
    upstream_b.release()
    answers = await asyncio.gather(*calls)
    models = sorted(a.headers["x-sits-model"] for a in answers)
    assert models == ["base-a", "base-a", "base-b", "base-b"]  # least in flight first, each in turn


async def test_the_cheaper_model_of_the_tier_is_preferred_when_both_are_idle(upstream, upstream_b, start_gateway):
    config = two_base_models(upstream.url, upstream_b.url)
    config["models"][0]["cost_per_1k_input"] = 0.01
    config["models"][1]["cost_per_1k_input"] = 0.001
    gateway = await start_gateway(config)
    raw = await sdk(gateway).chat.completions.with_raw_response.create(model="auto", messages=CODE)
    assert raw.headers["x-sits-model"] == "base-b"


async def test_a_tier_whose_models_cannot_take_the_request_falls_through(upstream, upstream_b, start_gateway):
    gateway = await start_gateway({"server": {"drain_timeout_s": 2}, "control": {"allow_loopback": True}, "models": [
        {"name": "small", "tier": "tiny", "features": [], "endpoints": [{"url": upstream.url}]},
        {"name": "big", "tier": "heavy", "features": ["tools"], "endpoints": [{"url": upstream_b.url}]},
    ]})
    raw = await sdk(gateway).chat.completions.with_raw_response.create(model="auto", messages=HI, tools=TOOLS)
    assert raw.headers["x-sits-model"] == "big"
    route = raw.headers["x-sits-route"]
    assert "auto=tier tiny" in route and "tier=heavy" in route
    assert upstream.log.requests == []


async def test_a_tier_with_no_model_falls_through_to_the_nearest(upstream, start_gateway):
    gateway = await start_gateway({"server": {"drain_timeout_s": 2}, "control": {"allow_loopback": True}, "models": [
        {"name": "big", "tier": "heavy", "endpoints": [{"url": upstream.url}]},
    ]})
    raw = await sdk(gateway).chat.completions.with_raw_response.create(model="auto", messages=HI)
    assert raw.headers["x-sits-model"] == "big"
    assert "auto=tier tiny" in raw.headers["x-sits-route"]


async def test_when_every_model_of_the_tier_fails_the_neighbouring_tier_answers(upstream, upstream_b,
                                                                                 start_gateway):
    down = FakeUpstream("down")
    await down.start()
    down.mode = "error500"
    try:
        gateway = await start_gateway({"server": {"drain_timeout_s": 2}, "control": {"allow_loopback": True},
                                       "models": [
            {"name": "base-a", "tier": "base", "endpoints": [{"url": down.url}]},
            {"name": "big", "tier": "heavy", "endpoints": [{"url": upstream_b.url}]},
            {"name": "small", "tier": "tiny", "endpoints": [{"url": upstream.url}]},
        ]})
        raw = await sdk(gateway).chat.completions.with_raw_response.create(model="auto", messages=CODE)
        assert raw.headers["x-sits-model"] == "big"  # the nearest tier, the larger on ties
        assert raw.headers["x-sits-attempts"] == "base-a/ep-0:upstream_bad_status,big/ep-0:ok"
    finally:
        await down.stop()


@pytest.mark.parametrize("tools", [False, True])
async def test_no_model_anywhere_can_take_it_is_a_400(upstream, start_gateway, tools):
    gateway = await start_gateway({"server": {"drain_timeout_s": 2}, "control": {"allow_loopback": True}, "models": [
        {"name": "small", "tier": "tiny", "features": [], "endpoints": [{"url": upstream.url}]},
    ]})
    client = sdk(gateway)
    if not tools:
        raw = await client.chat.completions.with_raw_response.create(model="auto", messages=HI)
        assert raw.headers["x-sits-model"] == "small"
        return
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        await client.chat.completions.create(model="auto", messages=HI, tools=TOOLS)
    assert info.value.code == "model_not_capable"
    assert upstream.log.requests == []


PROOF = ("Prove that the sum of the first n odd numbers is n squared, then prove the following 40 statements "
         "step by step, justifying each step:\n" + "\n".join(
             f"{i}. Show that if x_{i} = {i}*x_{i - 1} + {i * i} then x_{i} > {i} * (x_{i - 1} - 1), using "
             f"induction on n and the bound from step {i - 1}." for i in range(1, 41)))


async def test_with_understanding_on_a_long_proof_needs_the_heavy_tier_when_idle(upstream, upstream_b,
                                                                                   start_gateway):
    """Idle, the old rule scored 0.6 * complexity at most, never reaching heavy's 0.7: a 40-step proof went
    to base. Now complexity alone says which tier is needed, with the calibrated default cut-offs."""
    gateway = await start_gateway({
        "server": {"drain_timeout_s": 2}, "understanding": {"enabled": True, "embedder": "charngram"},
        "models": [{"name": "small", "tier": "tiny", "endpoints": [{"url": upstream.url}]},
                   {"name": "big", "tier": "heavy", "endpoints": [{"url": upstream_b.url}]}]})
    client = sdk(gateway)
    proof = await client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": PROOF}])
    assert proof.headers["x-sits-model"] == "big" and "needs heavy" in proof.headers["x-sits-route"]
    hi = await client.chat.completions.with_raw_response.create(model="auto", messages=HI)
    assert hi.headers["x-sits-model"] == "small" and "needs tiny" in hi.headers["x-sits-route"]
