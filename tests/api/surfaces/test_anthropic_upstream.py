"""An endpoint that declares `api: anthropic`: OpenAI clients (chat, Responses) and Anthropic clients reach it,
with requests, answers, streams, errors and usage (cache reads and writes) translated both ways."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.conftest import base_url, sdk

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


def config(url: str) -> dict:
    return {"server": {"drain_timeout_s": 2}, "models": [{"name": "claude", "endpoints": [
        {"url": url, "api": "anthropic", "upstream_model": "claude-up", "api_key_env": "ANTHROPIC_KEY"}]}]}


async def test_chat_client_reaches_an_anthropic_api_model(scripted, start_gateway):
    gateway = await start_gateway(config(scripted.url), secrets={"ANTHROPIC_KEY": "sk-ant"})
    completion = await sdk(gateway).chat.completions.create(
        model="claude", max_tokens=50, stop=["END"], user="u-1",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    assert scripted.paths[-1] == "/v1/messages"
    sent, headers = scripted.requests[-1], scripted.headers[-1]
    assert headers["x-api-key"] == "sk-ant" and headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers
    assert sent == {"model": "claude-up", "system": "Be brief.", "max_tokens": 50, "stop_sequences": ["END"],
                    "metadata": {"user_id": "u-1"},
                    "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert completion.choices[0].message.content == "Bonjour."
    assert completion.choices[0].finish_reason == "stop"
    usage = completion.usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (150, 9)
    assert usage.prompt_tokens_details.cached_tokens == 100
    assert usage.prompt_tokens_details.model_extra["cache_creation_tokens"] == 30


async def test_chat_stream_and_tools_from_an_anthropic_api_model(scripted, start_gateway):
    gateway = await start_gateway(config(scripted.url), secrets={"ANTHROPIC_KEY": "k"})
    stream = await sdk(gateway).chat.completions.create(
        model="claude", messages=[{"role": "user", "content": "Weather?"}], tools=[WEATHER], stream=True,
        stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert scripted.requests[-1]["stream"] is True and scripted.requests[-1]["max_tokens"] == 4096
    calls = [tc for c in chunks for choice in c.choices for tc in (choice.delta.tool_calls or ())]
    assert calls[0].id == "toolu_1" and calls[0].function.name == "get_weather"
    assert "".join(c.function.arguments or "" for c in calls) == '{"city": "Paris"}'
    assert [choice.finish_reason for c in chunks for choice in c.choices if choice.finish_reason] == ["tool_calls"]
    reasoning = [choice.delta.model_extra.get("reasoning_content") for c in chunks for choice in c.choices]
    assert "hmm" in reasoning
    assert chunks[-1].usage.prompt_tokens == 150 and chunks[-1].usage.completion_tokens == 9


async def test_anthropic_client_reaches_an_anthropic_api_model_through_chat(scripted, start_gateway):
    gateway = await start_gateway(config(scripted.url), secrets={"ANTHROPIC_KEY": "k"})
    async with anthropic.AsyncAnthropic(base_url=base_url(gateway), api_key="k", max_retries=0) as claude:
        message = await claude.messages.create(model="claude", max_tokens=30,
                                               messages=[{"role": "user", "content": "hi"}])
        async with claude.messages.stream(model="claude", max_tokens=30,
                                          messages=[{"role": "user", "content": "hi"}]) as stream:
            final = await stream.get_final_message()
    for answer in (message, final):
        assert [b.type for b in answer.content] == ["thinking", "text"]
        assert answer.content[1].text == "Bonjour."
        assert (answer.usage.input_tokens, answer.usage.cache_read_input_tokens,
                answer.usage.cache_creation_input_tokens, answer.usage.output_tokens) == (20, 100, 30, 9)
    assert message.content[0].signature == "sig-1"  # the upstream's thinking block, signature kept


async def test_an_anthropic_api_error_reaches_an_openai_client_in_openai_shape(scripted, start_gateway):
    scripted.anthropic_status = 400
    gateway = await start_gateway(config(scripted.url), secrets={"ANTHROPIC_KEY": "k"})
    with pytest.raises(openai.BadRequestError) as info:
        await sdk(gateway).chat.completions.create(model="claude", messages=[{"role": "user", "content": "hi"}])
    assert info.value.body["message"] == "messages: roles must alternate"  # type: ignore[index]
    assert info.value.body["type"] == "invalid_request_error"  # type: ignore[index]
