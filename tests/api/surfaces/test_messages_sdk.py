"""The official anthropic SDK against a gateway in front of a chat-completions upstream."""

from __future__ import annotations

import anthropic
import pytest

from tests.conftest import base_url, one_model_config


def client(gateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=base_url(gateway), api_key="client-key", max_retries=0)


async def test_create_maps_system_stop_sequences_and_user_id(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    async with client(gateway) as claude:
        raw = await claude.messages.with_raw_response.create(
            model="m1", max_tokens=64, system="Be brief.", stop_sequences=["END"], metadata={"user_id": "u-7"},
            messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
        message = await raw.parse()
    assert message.content[0].type == "text" and message.content[0].text == "hello from upstream-a"
    assert message.stop_reason == "end_turn" and message.role == "assistant"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (5, 4)
    assert raw.headers["x-sits-model"] == "m1"
    sent = upstream.log.requests[-1]
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert sent["stop"] == ["END"] and sent["user"] == "u-7" and sent["max_tokens"] == 64


async def test_streaming_gives_the_messages_event_sequence(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    async with client(gateway) as claude:
        async with claude.messages.stream(model="m1", max_tokens=64,
                                          messages=[{"role": "user", "content": "hi"}]) as stream:
            kinds = [event.type async for event in stream]
            final = await stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_stop" in kinds and "message_delta" in kinds
    assert final.content[0].text == "".join(f"tok{i} " for i in range(5))
    assert final.usage.output_tokens == 5 and final.stop_reason == "end_turn"


async def test_bad_input_is_an_anthropic_error_naming_the_field(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    async with client(gateway) as claude:
        with pytest.raises(anthropic.BadRequestError) as info:
            await claude.messages.create(model="m1", max_tokens=0, messages=[{"role": "user", "content": "hi"}])
    assert info.value.body["type"] == "error"  # type: ignore[index]
    assert info.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "max_tokens" in info.value.body["error"]["message"]  # type: ignore[index]


async def test_count_tokens(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    async with client(gateway) as claude:
        counted = await claude.messages.count_tokens(model="m1", messages=[{"role": "user", "content": "hi there"}])
    assert counted.input_tokens > 0


async def test_data_plane_keys_accept_anthropic_clients_x_api_key(upstream, start_gateway):
    config = one_model_config(upstream.url, api_keys_env="SITS_KEYS")
    gateway = await start_gateway(config, secrets={"SITS_KEYS": "k1"})
    async with anthropic.AsyncAnthropic(base_url=base_url(gateway), api_key="k1", max_retries=0) as claude:
        message = await claude.messages.create(model="m1", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert message.content[0].text == "hello from upstream-a"
    async with anthropic.AsyncAnthropic(base_url=base_url(gateway), api_key="wrong", max_retries=0) as claude:
        with pytest.raises(anthropic.AuthenticationError) as info:
            await claude.messages.create(model="m1", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert info.value.body == {"type": "error", "error": {"type": "authentication_error",  # type: ignore[comparison-overlap]
                                                          "message": "invalid API key"}}
