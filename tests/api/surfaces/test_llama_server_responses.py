"""llama.cpp's `llama-server` serves `/v1/responses` itself: the real upstream behind an endpoint that
declares `api: responses`, which SITS passes Responses requests through to (and chat requests to its
`/v1/chat/completions`). Two gateway replicas share the response store through a real Redis, so a
conversation passed through on one continues on the other; llama-server itself refuses
`previous_response_id`, so a second turn that works was expanded by SITS."""

from __future__ import annotations

import openai
import pytest

from tests.api.surfaces.conftest import REDIS_URL
from tests.conftest import sdk


def config(url: str, prefix: str) -> dict:
    return {"server": {"drain_timeout_s": 2},
            "models": [{"name": "smol", "endpoints": [{"url": url, "api": "responses"}]}],
            "responses": {"backend": "redis", "redis_url": REDIS_URL, "prefix": prefix}}


async def test_responses_pass_through_to_llama_server_and_continue_across_replicas(llama, start_gateway, prefix):
    a = await start_gateway(config(llama.url, prefix))
    b = await start_gateway(config(llama.url, prefix))
    first = await sdk(a).responses.create(model="smol", input="My name is Ada. Say hi.", max_output_tokens=8,
                                          temperature=0)
    assert first.output_text and first.status in ("completed", "incomplete")
    # relayed as llama-server wrote it: its own id and fields, not SITS's translation of a chat completion
    assert first.completed_at and first.usage.output_tokens_details is None
    assert first.usage.input_tokens > 5 and 0 < first.usage.output_tokens <= 8

    stream = await sdk(b).responses.create(model="smol", input="What is my name?", previous_response_id=first.id,
                                           max_output_tokens=8, temperature=0, stream=True)
    events = [e async for e in stream]
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    second = events[-1].response
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas and second.output_text == deltas
    # the first turn (its input and answer) went to llama-server as input items
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens

    third = await sdk(a).responses.create(model="smol", input="And again?", previous_response_id=second.id,
                                          max_output_tokens=4, temperature=0)
    assert third.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens
    assert (await sdk(b).responses.retrieve(second.id)).output_text == deltas

    # a response SITS never stored stays in the body for the upstream, which says what it thinks of it
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        await sdk(a).responses.create(model="smol", input="hi", previous_response_id="resp_elsewhere")

    # chat completions go to the same server's /v1/chat/completions
    completion = await sdk(a).chat.completions.create(model="smol", max_tokens=4,
                                                      messages=[{"role": "user", "content": "Say hi"}])
    assert completion.choices[0].message.content and completion.usage.completion_tokens <= 4


async def test_messages_stop_sequence_with_llama_server(llama, start_gateway, prefix):
    """llama-server's chat answer does not say which stop word ended it: `stop_sequence` stays null."""
    import anthropic

    from tests.conftest import base_url
    gateway = await start_gateway(config(llama.url, prefix))
    async with anthropic.AsyncAnthropic(base_url=base_url(gateway), api_key="k", max_retries=0) as claude:
        message = await claude.messages.create(
            model="smol", max_tokens=30, stop_sequences=["is", "zzz"],
            messages=[{"role": "user", "content": "Count: 1, 2, 3, 4, 5, 6"}])
    assert message.stop_reason in ("end_turn", "max_tokens") and message.stop_sequence is None
