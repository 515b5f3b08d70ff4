"""`/v1/responses` passed through to an endpoint that declares `api: responses` (a scripted upstream
that answers with the input it was sent): only `model` replaced, `previous_response_id` expanded from
SITS's store into input items, the answer and its stream relayed unchanged and stored under the
upstream's id; an unknown `previous_response_id` is refused by chat-only endpoints."""

from __future__ import annotations

import aiohttp
import openai
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import base_url, sdk


def config(url: str, api: str = "responses") -> dict:
    return {"server": {"drain_timeout_s": 2},
            "models": [{"name": "m1", "endpoints": [{"url": url, "api": api, "upstream_model": "up-model"}]}]}


async def test_body_sent_as_given_answer_relayed_and_stored(scripted, start_gateway):
    gateway = await start_gateway(config(scripted.url))
    first = await sdk(gateway).responses.create(model="m1", input="hello", max_output_tokens=9,
                                                extra_body={"reasoning": {"effort": "low"}})
    assert scripted.paths[-1] == "/v1/responses"
    assert scripted.requests[-1] == {"model": "up-model", "input": "hello", "max_output_tokens": 9,
                                     "reasoning": {"effort": "low"}}
    assert first.id == "resp_up1" and first.output_text == '"hello"' and first.model_extra["scripted"] is True

    stream = await sdk(gateway).responses.create(model="m1", input="next", previous_response_id=first.id,
                                                 instructions="Be brief.", stream=True)
    events = [e async for e in stream]
    assert [e.type for e in events] == ["response.created", "response.output_text.delta", "response.completed"]
    sent = scripted.requests[-1]
    assert "previous_response_id" not in sent and sent["instructions"] == "Be brief."
    assert sent["input"] == [
        {"type": "message", "role": "user", "content": "hello"},
        {"type": "message", "role": "assistant", "content": '"hello"'},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "next"}]}]
    second = events[-1].response
    assert (await sdk(gateway).responses.retrieve(second.id)).id == "resp_up2"
    items = await sdk(gateway).responses.input_items.list(second.id)
    assert [item.content[0].text for item in items.data] == ["next"]


async def test_a_stream_that_fails_is_relayed_and_not_stored(scripted, start_gateway):
    gateway = await start_gateway(config(scripted.url))
    stream = await sdk(gateway).responses.create(model="m1", input="please fail", stream=True)
    events = [e async for e in stream]
    assert events[-1].type == "response.failed" and events[-1].response.error.message == "scripted failure"
    with pytest.raises(openai.NotFoundError):
        await sdk(gateway).responses.retrieve(events[0].response.id)


async def test_a_malformed_line_in_a_passed_through_stream_ends_it_with_response_failed(scripted, start_gateway):
    """The tap is a passed-through stream's SSE check (the exchange's guard passes its chunks on): the
    line that is no SSE never reaches the client, and the stream ends with `response.failed` naming it."""
    gateway = await start_gateway(config(scripted.url))
    async with aiohttp.ClientSession() as session:
        body = {"model": "m1", "input": "garbage", "stream": True}
        async with session.post(base_url(gateway) + "/v1/responses", json=body) as response:
            text = (await response.read()).decode()
    lines = [line for line in text.split("\n") if line]
    failed = orjson.loads(lines[-1][len("data: "):])
    assert failed["type"] == "response.failed" and "malformed SSE line" in failed["response"]["error"]["message"]
    assert not any("<html>" in line for line in lines[:-1])
    assert "response.completed" not in text


async def test_usage_is_recorded_from_the_responses_usage(scripted, start_gateway):
    gateway = await start_gateway(config(scripted.url))
    await sdk(gateway).responses.create(model="m1", input="hello")
    stream = await sdk(gateway).responses.create(model="m1", input="hello", stream=True)
    [e async for e in stream]
    async with aiohttp.ClientSession() as session, session.get(base_url(gateway) + "/metrics") as response:
        text = await response.text()
    tokens = {s.labels["direction"]: s.value for family in text_string_to_metric_families(text)
              for s in family.samples if s.name == "sits_tokens_total" and s.labels.get("model") == "m1"}
    assert tokens == {"input": 24, "output": 8}  # 12 and 4 per answer, whole and streamed


async def test_unknown_previous_response_id(scripted, start_gateway):
    passing = await start_gateway(config(scripted.url))
    await sdk(passing).responses.create(model="m1", input="hi", previous_response_id="resp_elsewhere")
    assert scripted.requests[-1]["previous_response_id"] == "resp_elsewhere"  # for the upstream to continue
    chat_only = await start_gateway(config(scripted.url, api="openai"))
    with pytest.raises(openai.NotFoundError) as caught:
        await sdk(chat_only).responses.create(model="m1", input="hi", previous_response_id="resp_elsewhere")
    assert caught.value.body["param"] == "previous_response_id"  # type: ignore[index]
    assert len(scripted.requests) == 1  # nothing was sent


async def test_chat_completions_to_a_responses_endpoint_go_to_its_chat_api(scripted, start_gateway):
    gateway = await start_gateway(config(scripted.url))
    completion = await sdk(gateway).chat.completions.create(model="m1", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "It is sunny." and scripted.paths[-1] == "/v1/chat/completions"
    assert scripted.requests[-1]["model"] == "up-model"
