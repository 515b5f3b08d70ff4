"""llama.cpp's `llama-server` serves Anthropic's `/v1/messages` itself: the real Anthropic-API upstream
behind an endpoint that declares `api: anthropic`, reached by an OpenAI client and an Anthropic client."""

from __future__ import annotations

import anthropic
import pytest

from tests.conftest import base_url, sdk


def config(url: str) -> dict:
    return {"server": {"drain_timeout_s": 2},
            "models": [{"name": "smol", "endpoints": [{"url": url, "api": "anthropic"}]}]}


def _input_known(caplog: pytest.LogCaptureFixture) -> bool:
    """False when the upstream opened a stream without message_start (llama-server does, now and then) and
    the gateway said so: the stream's input tokens are unknown, not wrong."""
    known = not any("without message_start" in r.getMessage() for r in caplog.records)
    caplog.clear()
    return known


async def test_openai_and_anthropic_clients_reach_llama_servers_messages_api(llama, start_gateway, caplog):
    gateway = await start_gateway(config(llama.url))
    client = sdk(gateway)
    completion = await client.chat.completions.create(
        model="smol", max_tokens=6, temperature=0, messages=[{"role": "user", "content": "Say hi"}])
    assert completion.choices[0].message.content
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage.prompt_tokens > 5 and 0 < completion.usage.completion_tokens <= 6
    stream = await client.chat.completions.create(
        model="smol", max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Say hi"}])
    chunks = [c async for c in stream]
    text = "".join(choice.delta.content or "" for c in chunks for choice in c.choices)
    assert text and chunks[-1].usage is not None
    usage = chunks[-1].usage
    assert 0 < usage.completion_tokens <= 6
    if _input_known(caplog):
        assert usage.prompt_tokens > 5
        # the second request's prompt was in llama-server's cache: Anthropic's cache_read_input_tokens, as cached tokens
        assert usage.prompt_tokens_details.cached_tokens > 0
    else:
        assert usage.prompt_tokens == 0
    async with anthropic.AsyncAnthropic(base_url=base_url(gateway), api_key="k", max_retries=0) as claude:
        async with claude.messages.stream(model="smol", max_tokens=6,
                                          messages=[{"role": "user", "content": "Say hi"}]) as stream:
            final = await stream.get_final_message()
    assert final.content[0].type == "text" and final.content[0].text
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens <= 6
    if _input_known(caplog):
        assert final.usage.input_tokens + final.usage.cache_read_input_tokens > 5
    else:
        assert final.usage.input_tokens + final.usage.cache_read_input_tokens == 0
