"""The official openai SDK against a running gateway in front of real upstream HTTP servers."""

from __future__ import annotations

import asyncio

import openai
import pytest

from tests.conftest import one_model_config, sdk

MESSAGES = [{"role": "user", "content": "hi"}]


async def test_chat_completion_non_streaming(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    client = sdk(gateway)
    raw = await client.chat.completions.with_raw_response.create(model="m1", messages=MESSAGES)
    completion = raw.parse()
    assert completion.choices[0].message.content == "hello from upstream-a"
    assert raw.headers["x-sits-model"] == "m1"
    assert raw.headers["x-sits-endpoint"] == "m1/ep-0"
    assert raw.headers["x-request-id"]


async def test_chat_completion_streaming_with_usage(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    stream = await sdk(gateway).chat.completions.create(
        model="m1", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    texts, usage = [], None
    async for chunk in stream:
        texts += [c.delta.content for c in chunk.choices if c.delta.content]
        usage = chunk.usage or usage
    assert texts == [f"tok{i} " for i in range(5)]
    assert usage is not None and usage.completion_tokens == 5


async def test_unknown_fields_tools_and_response_format_pass_through(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    await sdk(gateway).chat.completions.create(
        model="m1", messages=MESSAGES, tools=tools, response_format={"type": "json_object"},
        extra_body={"guided_regex": "[a-z]+", "top_k": 5},
    )
    sent = upstream.log.requests[-1]
    assert sent["tools"] == tools
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["guided_regex"] == "[a-z]+" and sent["top_k"] == 5


async def test_upstream_model_name_and_key_come_from_config(upstream, start_gateway):
    config = {"models": [{"name": "friendly", "endpoints": [
        {"url": upstream.url, "upstream_model": "org/real-model-7b", "api_key_env": "UPSTREAM_KEY"}]}]}
    gateway = await start_gateway(config, secrets={"UPSTREAM_KEY": "sk-upstream"})
    await sdk(gateway).chat.completions.create(model="friendly", messages=MESSAGES)
    assert upstream.log.requests[-1]["model"] == "org/real-model-7b"
    # The client's own Authorization header never travels upstream; the configured key does.
    assert upstream.log.headers[-1]["authorization"] == "Bearer sk-upstream"


async def test_client_authorization_is_not_forwarded(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    await sdk(gateway).chat.completions.create(model="m1", messages=MESSAGES)
    assert "authorization" not in upstream.log.headers[-1]


async def test_request_id_is_propagated(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    raw = await sdk(gateway).chat.completions.with_raw_response.create(
        model="m1", messages=MESSAGES, extra_headers={"x-request-id": "req-123"}
    )
    assert raw.headers["x-request-id"] == "req-123"
    assert upstream.log.headers[-1]["x-request-id"] == "req-123"


async def test_completions_embeddings_and_models(upstream, start_gateway):
    config = one_model_config(upstream.url)
    config["aliases"] = {"chat-default": "m1"}
    gateway = await start_gateway(config)
    client = sdk(gateway)
    completion = await client.completions.create(model="chat-default", prompt="say")
    assert completion.choices[0].text == "completion from upstream-a"
    embedding = await client.embeddings.create(model="m1", input=["a", "b"])
    assert len(embedding.data) == 2
    models = [m.id async for m in client.models.list()]
    assert models[:2] == ["m1", "chat-default"]


async def test_an_answer_over_a_mebibyte_is_relayed_whole(upstream, start_gateway):
    """A batch of large embeddings (about 1.8 MB of JSON) reaches the gateway in many reads."""
    upstream.embedding_triples = 1024
    gateway = await start_gateway(one_model_config(upstream.url))
    embedding = await sdk(gateway, timeout=10).embeddings.create(model="m1", input=[f"text {i}" for i in range(150)])
    assert len(embedding.data) == 150 and len(embedding.data[149].embedding) == 3072


async def test_unknown_model_is_404_listing_available(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    with pytest.raises(openai.NotFoundError) as info:
        await sdk(gateway).chat.completions.create(model="nope", messages=MESSAGES)
    assert "Available models: m1" in info.value.message
    assert info.value.body["code"] == "model_not_found"


async def test_upstream_5xx_becomes_502_with_openai_error(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    upstream.mode = "error500"
    with pytest.raises(openai.APIStatusError) as info:
        await sdk(gateway).chat.completions.create(model="m1", messages=MESSAGES)
    assert info.value.status_code == 502
    assert info.value.body["code"] == "upstream_bad_status"


async def test_unreachable_pool_is_503_with_retry_after_not_500(start_gateway):
    gateway = await start_gateway(one_model_config("http://127.0.0.1:9/v1"))
    with pytest.raises(openai.APIStatusError) as info:
        await sdk(gateway).chat.completions.create(model="m1", messages=MESSAGES)
    assert info.value.status_code == 503
    assert info.value.response.headers["retry-after"] == "1"
    assert "cannot connect" in info.value.message
    assert info.value.response.headers["x-sits-attempts"] == "m1/ep-0:upstream_connect_error"


async def test_first_byte_timeout_is_504(upstream, start_gateway):
    config = {"models": [{"name": "m1", "endpoints": [
        {"url": upstream.url, "timeouts": {"first_byte_s": 0.3}}]}]}
    gateway = await start_gateway(config)
    upstream.mode = "hang"
    with pytest.raises(openai.APIStatusError) as info:
        await sdk(gateway).chat.completions.create(model="m1", messages=MESSAGES)
    assert info.value.status_code == 504


async def test_two_endpoints_share_load_and_survive_one_down(upstream, upstream_b, start_gateway):
    config = {"models": [{"name": "m1", "endpoints": [
        {"url": upstream.url}, {"url": upstream_b.url}, {"url": "http://127.0.0.1:9/v1"}]}]}
    gateway = await start_gateway(config)
    client = sdk(gateway)
    answers = await asyncio.gather(*[client.chat.completions.create(model="m1", messages=MESSAGES)
                                     for _ in range(40)])
    contents = {a.choices[0].message.content for a in answers}
    assert contents == {"hello from upstream-a", "hello from upstream-b"}


async def test_many_concurrent_requests(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    client = sdk(gateway, http_client=None)
    results = await asyncio.gather(*[
        client.chat.completions.create(model="m1", messages=[{"role": "user", "content": f"q{i}"}],
                                       stream=i % 2 == 0)
        for i in range(200)
    ])
    assert len(results) == 200
    sent = sorted(r["messages"][0]["content"] for r in upstream.log.requests)
    assert sent == sorted(f"q{i}" for i in range(200))
