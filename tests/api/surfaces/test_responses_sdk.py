"""The official openai SDK's Responses client against a gateway in front of a chat-completions upstream."""

from __future__ import annotations

import openai
import pytest

from tests.conftest import one_model_config, sdk


async def test_create_with_text_input_and_instructions(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    raw = await sdk(gateway).responses.with_raw_response.create(
        model="m1", input="hi", instructions="Be brief.", max_output_tokens=20, temperature=0.2)
    response = raw.parse()
    assert response.output_text == "hello from upstream-a"
    assert response.status == "completed" and response.id.startswith("resp_")
    assert response.usage is not None and (response.usage.input_tokens, response.usage.output_tokens) == (5, 4)
    assert raw.headers["x-sits-model"] == "m1" and raw.headers["x-sits-endpoint"] == "m1/ep-0"
    sent = upstream.log.requests[-1]
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert sent["max_tokens"] == 20 and sent["temperature"] == 0.2


async def test_streaming_gives_the_responses_event_sequence(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    stream = await sdk(gateway).responses.create(model="m1", input=[{"role": "user", "content": "hi"}], stream=True)
    events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert deltas == [f"tok{i} " for i in range(5)]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = events[-1].response
    assert done.output_text == "".join(deltas) and done.usage.output_tokens == 5


async def test_previous_response_id_continues_the_conversation_and_store_can_be_read_back(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    client = sdk(gateway)
    first = await client.responses.create(model="m1", input="first question", instructions="Sys")
    second = await client.responses.create(model="m1", input="second question", previous_response_id=first.id)
    assert upstream.log.requests[-1]["messages"] == [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "hello from upstream-a"},
        {"role": "user", "content": "second question"},
    ]
    fetched = await client.responses.retrieve(second.id)
    assert fetched.id == second.id and fetched.output_text == "hello from upstream-a"
    items = await client.responses.input_items.list(second.id)
    assert [i.content[0].text for i in items.data] == ["second question"]
    await client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError) as info:
        await client.responses.create(model="m1", input="again", previous_response_id=first.id)
    assert info.value.body["param"] == "previous_response_id"  # type: ignore[index]
