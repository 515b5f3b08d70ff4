"""Messages' `stop_sequence`: named when the chat server says which of the client's stop strings it
stopped on (vLLM's `stop_reason`, or an Anthropic-API upstream's own `stop_sequence`), null when it
does not (llama-server: tests/api/surfaces/test_llama_server_responses.py)."""

from __future__ import annotations

import anthropic
import pytest

from tests.conftest import base_url


def config(url: str, api: str) -> dict:
    return {"server": {"drain_timeout_s": 2}, "models": [{"name": "m1", "endpoints": [{"url": url, "api": api}]}]}


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_stop_sequence_named_whole_and_streamed(scripted, start_gateway, api):
    scripted.stopped_on = "END"
    gateway = await start_gateway(config(scripted.url, api))
    async with anthropic.AsyncAnthropic(base_url=base_url(gateway), api_key="k", max_retries=0) as claude:
        whole = await claude.messages.create(model="m1", max_tokens=20, stop_sequences=["STOP", "END"],
                                             messages=[{"role": "user", "content": "hi"}])
        async with claude.messages.stream(model="m1", max_tokens=20, stop_sequences=["END"],
                                          messages=[{"role": "user", "content": "hi"}]) as stream:
            streamed = await stream.get_final_message()
        # a stop string the client did not send is not one of its stop sequences
        other = await claude.messages.create(model="m1", max_tokens=20, stop_sequences=["STOP"],
                                             messages=[{"role": "user", "content": "hi"}])
    assert (whole.stop_reason, whole.stop_sequence) == ("stop_sequence", "END")
    assert (streamed.stop_reason, streamed.stop_sequence) == ("stop_sequence", "END")
    assert (other.stop_reason, other.stop_sequence) == ("end_turn", None)


async def test_no_stop_sequence_when_the_server_does_not_name_one(scripted, start_gateway):
    gateway = await start_gateway(config(scripted.url, "openai"))
    async with anthropic.AsyncAnthropic(base_url=base_url(gateway), api_key="k", max_retries=0) as claude:
        message = await claude.messages.create(model="m1", max_tokens=20, stop_sequences=["END"],
                                               messages=[{"role": "user", "content": "hi"}])
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)
