"""A chat stream that breaks mid-answer goes on from the partial answer on another endpoint or a
fallback model (resilience.resume_streams), with the official SDK streaming through a real gateway."""

from __future__ import annotations

import aiohttp
import orjson

from tests.conftest import base_url, sdk

MESSAGES = [{"role": "user", "content": "count"}]


def config(models: list[dict], resume: bool = True) -> dict:
    return {"server": {"drain_timeout_s": 2}, "models": models, "resilience": {"resume_streams": resume}}


async def collect(gateway, model: str) -> str:
    stream = await sdk(gateway).chat.completions.create(model=model, messages=MESSAGES, stream=True, max_tokens=50)
    return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])


async def test_a_broken_stream_goes_on_on_the_fallback_model(upstream, upstream_b, start_gateway):
    upstream.mode, upstream.chunk_delay = "cut_stream", 0.02  # cut after two of five events
    gateway = await start_gateway(config([
        {"name": "p", "endpoints": [{"url": upstream.url}], "fallbacks": ["b"]},
        {"name": "b", "endpoints": [{"url": upstream_b.url}]}]))
    text = await collect(gateway, "p")
    assert text == "tok0 tok1 " + "tok0 tok1 tok2 tok3 tok4 "  # the partial answer, then the fallback's
    sent = upstream_b.log.requests[-1]
    assert sent["messages"][-1] == {"role": "assistant", "content": "tok0 tok1 "}
    assert sent["continue_final_message"] is True and sent["model"] == "b"
    assert sent["max_tokens"] == 50 - 3  # 10 characters already answered: 3 estimated tokens


async def test_resumes_on_another_endpoint_of_the_same_model_and_shows_the_splice(upstream, upstream_b,
                                                                                  start_gateway):
    upstream.mode, upstream.chunk_delay = "cut_stream", 0.02
    gateway = await start_gateway(config([{"name": "p", "endpoints": [{"url": upstream.url},
                                                                       {"url": upstream_b.url}]}])
                                  | {"routing": {"profiles": {"default": {"picker": {"type": "round-robin-picker"}}}}})
    body = {"model": "p", "messages": MESSAGES, "stream": True}
    for _ in range(2):  # round robin: one of two requests starts on the endpoint that breaks
        async with aiohttp.ClientSession() as session, \
                session.post(base_url(gateway) + "/v1/chat/completions", json=body) as r:
            wire = await r.read()
        if r.headers["x-sits-endpoint"] == "p/ep-0":
            break
    assert b": sits resumed the answer on p/ep-1 after " in wire, wire
    assert wire.rstrip().endswith(b"data: [DONE]") and b'"error"' not in wire
    events = [orjson.loads(line[6:]) for line in wire.split(b"\n") if line.startswith(b"data: {")]
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]).startswith(
        "tok0 tok1 tok0")


async def test_off_by_default_a_broken_stream_ends_with_an_error_event(upstream, upstream_b, start_gateway):
    upstream.mode, upstream.chunk_delay = "cut_stream", 0.02
    gateway = await start_gateway(config([
        {"name": "p", "endpoints": [{"url": upstream.url}], "fallbacks": ["b"]},
        {"name": "b", "endpoints": [{"url": upstream_b.url}]}], resume=False))
    async with aiohttp.ClientSession() as session, \
            session.post(base_url(gateway) + "/v1/chat/completions",
                         json={"model": "p", "messages": MESSAGES, "stream": True}) as r:
        wire = await r.read()
    assert b'"error"' in wire and b"[DONE]" not in wire
    assert upstream_b.log.requests == []
