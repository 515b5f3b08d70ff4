"""Tools, function-call items and thinking through both surfaces, streamed and not."""

from __future__ import annotations

import anthropic
import orjson

from tests.api.surfaces.scripted_upstream import TOOL_ARGS
from tests.conftest import base_url, one_model_config, sdk

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CLAUDE_WEATHER = {"name": "get_weather", "description": "Weather in a city",
                  "input_schema": WEATHER["parameters"]}


async def test_responses_function_call_round_trip(scripted, start_gateway):
    gateway = await start_gateway(one_model_config(scripted.url))
    client = sdk(gateway)
    first = await client.responses.create(model="m1", input="Weather in Paris?", tools=[WEATHER],
                                          tool_choice={"type": "function", "name": "get_weather"})
    call = next(item for item in first.output if item.type == "function_call")
    assert (call.name, call.arguments, call.call_id) == ("get_weather", TOOL_ARGS, "call_1")
    sent = scripted.requests[-1]
    assert sent["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER["parameters"]}}]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    second = await client.responses.create(model="m1", previous_response_id=first.id, tools=[WEATHER], input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "sunny"}'}])
    assert second.output_text == "It is sunny."
    assert scripted.requests[-1]["messages"][-2:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": TOOL_ARGS}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'}]


async def test_responses_streamed_function_call_arguments(scripted, start_gateway):
    gateway = await start_gateway(one_model_config(scripted.url))
    stream = await sdk(gateway).responses.create(model="m1", input="Weather?", tools=[WEATHER], stream=True)
    events = [e async for e in stream]
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert "".join(deltas) == TOOL_ARGS
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.arguments == TOOL_ARGS
    final = events[-1].response
    assert final.output[0].type == "function_call" and final.output[0].arguments == TOOL_ARGS
    assert final.usage.input_tokens_details.cached_tokens == 3


async def test_text_format_json_schema_passes_through(scripted, start_gateway):
    gateway = await start_gateway(one_model_config(scripted.url))
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
              "additionalProperties": False}
    await sdk(gateway).responses.create(model="m1", input="json please", text={
        "format": {"type": "json_schema", "name": "thing", "schema": schema, "strict": True}})
    assert scripted.requests[-1]["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "thing", "schema": schema, "strict": True}}


async def test_messages_tools_and_thinking(scripted, start_gateway):
    gateway = await start_gateway(one_model_config(scripted.url))
    async with anthropic.AsyncAnthropic(base_url=base_url(gateway), api_key="k", max_retries=0) as claude:
        first = await claude.messages.create(model="m1", max_tokens=100, tools=[CLAUDE_WEATHER],
                                             tool_choice={"type": "any"},
                                             messages=[{"role": "user", "content": "Weather in Paris?"}])
        assert first.stop_reason == "tool_use"
        thinking, use = first.content
        assert thinking.type == "thinking" and thinking.thinking == "thinking it over"
        assert use.type == "tool_use" and use.input == {"city": "Paris"} and use.id == "call_1"
        assert scripted.requests[-1]["tool_choice"] == "required"
        second = await claude.messages.create(model="m1", max_tokens=100, tools=[CLAUDE_WEATHER], messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}])
        assert second.content[-1].text == "It is sunny."
        sent = scripted.requests[-1]["messages"]
        assert sent[1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": TOOL_ARGS.replace(" ", "")}
        assert sent[1]["reasoning_content"] == "thinking it over"
        assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
        async with claude.messages.stream(model="m1", max_tokens=100, tools=[CLAUDE_WEATHER],
                                          messages=[{"role": "user", "content": "Weather?"}]) as stream:
            events = [e async for e in stream]
            final = await stream.get_final_message()
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["thinking", "tool_use"]
    assert [e.index for e in events if e.type == "content_block_start"] == [0, 1]
    assert final.content[1].input == orjson.loads(TOOL_ARGS) and final.stop_reason == "tool_use"
    assert final.content[0].thinking == "thinking it over"
    assert (final.usage.input_tokens, final.usage.cache_read_input_tokens, final.usage.output_tokens) == (8, 3, 7)
