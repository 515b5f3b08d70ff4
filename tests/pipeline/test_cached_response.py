"""Cached answers: rendered as the OpenAI SDK reads them; stored only from complete, successful answers."""

from __future__ import annotations

import httpx2 as httpx  # the HTTP client this openai SDK release is built on
import openai
import orjson
import pytest

from sits.pipeline.cached_response import (
    CompletionAccumulator,
    cache_header,
    completion_from_json,
    render_completion,
    render_sse,
)
from sits.state.semantic_cache import CachedCompletion, CacheHit

CHAT = "/chat/completions"
LONG = "Paris is the capital of France. " * 20  # several replay chunks
HIT = CacheHit(CachedCompletion(kind="chat", model="m1-upstream", content=LONG, finish_reason="stop", created=17,
                                prompt_tokens=9, completion_tokens=120, system_fingerprint="fp_1"),
               "semantic", 0.9612)
TEXT_HIT = CacheHit(CachedCompletion(kind="text", model="m1", content="upon a time", finish_reason="length",
                                     created=3), "exact", 1.0)


def sdk_client(body: bytes, content_type: str) -> openai.AsyncOpenAI:
    """The official SDK, its HTTP answered in-process with `body`."""
    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": content_type}, content=body)

    return openai.AsyncOpenAI(api_key="sk-test", base_url="http://cache.test/v1", max_retries=0,
                              http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))


async def test_json_body_parses_as_chat_completion_and_is_marked():
    client = sdk_client(render_completion(HIT, "r1"), "application/json")
    completion = await client.chat.completions.create(model="m1", messages=[{"role": "user", "content": "q"}])
    assert completion.object == "chat.completion" and completion.id == "chatcmpl-cache-r1"
    assert completion.choices[0].message.content == LONG
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.total_tokens == 129
    assert completion.system_fingerprint == "fp_1"
    assert completion.model_extra["sits_cache"] == {"match": "semantic", "similarity": 0.9612}
    assert cache_header(HIT) == (b"x-sits-cache", b"hit; match=semantic; similarity=0.9612")


@pytest.mark.parametrize("include_usage", [False, True])
async def test_sse_replay_parses_as_chat_completion_chunks(include_usage):
    events = render_sse(HIT, "r2", include_usage=include_usage)
    assert events[-1] == b"data: [DONE]\n\n"
    assert all(e.startswith(b"data: ") and e.endswith(b"\n\n") for e in events)
    client = sdk_client(b"".join(events), "text/event-stream")
    stream = await client.chat.completions.create(model="m1", messages=[{"role": "user", "content": "q"}],
                                                  stream=True)
    chunks = [c async for c in stream]
    assert all(c.object == "chat.completion.chunk" and c.id == "chatcmpl-cache-r2" for c in chunks)
    assert all(c.model_extra["sits_cache"]["match"] == "semantic" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == LONG
    assert len(chunks) > 3  # content in several pieces
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    usage = [c.usage for c in chunks if c.usage is not None]
    assert [u.total_tokens for u in usage] == ([129] if include_usage else [])


async def test_text_completion_json_and_sse_parse():
    client = sdk_client(render_completion(TEXT_HIT, "r3"), "application/json")
    completion = await client.completions.create(model="m1", prompt="Once")
    assert completion.object == "text_completion" and completion.choices[0].text == "upon a time"
    assert completion.choices[0].finish_reason == "length" and completion.usage is None
    client = sdk_client(b"".join(render_sse(TEXT_HIT, "r3")), "text/event-stream")
    chunks = [c async for c in await client.completions.create(model="m1", prompt="Once", stream=True)]
    assert "".join(c.choices[0].text for c in chunks) == "upon a time"


@pytest.mark.parametrize("split", [1, 7, 64, 100_000])
def test_accumulator_rebuilds_a_replayed_stream_from_any_byte_split(split):
    raw = b"".join(render_sse(HIT, "r4", include_usage=True))
    acc = CompletionAccumulator(CHAT)
    for i in range(0, len(raw), split):
        acc.feed(raw[i : i + split])
    assert acc.result() == HIT.completion


def upstream_stream(*events: object, done: bool = True) -> bytes:
    out = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
    return out + (b"data: [DONE]\n\n" if done else b"")


def chunk(delta: dict | None = None, finish: str | None = None, index: int = 0) -> dict:
    return {"id": "c", "object": "chat.completion.chunk", "created": 5, "model": "m1",
            "choices": [{"index": index, "delta": delta or {}, "finish_reason": finish}]}


GOOD = [chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}), chunk({"content": "lo"}),
        chunk(finish="stop")]


def test_accumulator_stores_a_complete_stream():
    acc = CompletionAccumulator(CHAT)
    acc.feed(upstream_stream(*GOOD))
    result = acc.result()
    assert result == CachedCompletion(kind="chat", model="m1", content="Hello", finish_reason="stop", created=5)


@pytest.mark.parametrize("raw", [
    upstream_stream(*GOOD, done=False),                                              # cut: no [DONE]
    upstream_stream(*GOOD[:3]),                                                      # no finish_reason
    upstream_stream(*GOOD[:3], chunk(finish="content_filter")),
    upstream_stream(*GOOD[:2], {"error": {"message": "boom", "type": "upstream_error"}}),  # relayed error event
    upstream_stream(*GOOD[:2]) + b"event: error\ndata: {}\n\n",
    upstream_stream(chunk({"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f"}}]}),
                    chunk(finish="tool_calls")),
    upstream_stream(*GOOD, chunk({"content": "x"}, index=1)),                         # a second choice
    upstream_stream(*GOOD[:2]) + b"data: {not json\n\n" + upstream_stream(*GOOD[2:]),
    upstream_stream(*GOOD) + upstream_stream(chunk({"content": "after done"}), done=False),
    b"",
])
def test_accumulator_never_stores_errors_or_partial_streams(raw):
    acc = CompletionAccumulator(CHAT)
    acc.feed(raw)
    assert acc.result() is None


def test_accumulator_bounds_what_it_keeps():
    acc = CompletionAccumulator(CHAT, max_chars=4)
    acc.feed(upstream_stream(*GOOD))
    assert acc.result() is None
    assert CompletionAccumulator("/embeddings").result() is None


def body(**changes) -> bytes:
    base = {"id": "x", "object": "chat.completion", "created": 9, "model": "m1", "system_fingerprint": "fp",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}}
    return orjson.dumps({**base, **changes})


def test_completion_from_json():
    assert completion_from_json(CHAT, body()) == CachedCompletion(
        kind="chat", model="m1", content="Paris", finish_reason="stop", created=9, prompt_tokens=4,
        completion_tokens=1, system_fingerprint="fp")
    text = orjson.dumps({"model": "m1", "created": 1, "choices": [{"index": 0, "text": "t", "finish_reason": "stop"}]})
    assert completion_from_json("/completions", text).content == "t"


@pytest.mark.parametrize("raw", [
    orjson.dumps({"error": {"message": "rate limited", "type": "rate_limit", "code": 429}}),
    body(choices=[]),
    body(choices=[{"index": 0, "message": {"role": "assistant", "content": "a"}, "finish_reason": "stop"}] * 2),
    body(choices=[{"index": 0, "message": {"role": "assistant", "content": None,
                                           "tool_calls": [{"id": "t", "type": "function"}]},
                   "finish_reason": "tool_calls"}]),
    body(choices=[{"index": 0, "message": {"role": "assistant", "content": "Par"}, "finish_reason": None}]),
    body(model=None),
    b"<html>bad gateway</html>",
])
def test_completion_from_json_rejects_errors_and_unreplayable_answers(raw):
    assert completion_from_json(CHAT, raw) is None
