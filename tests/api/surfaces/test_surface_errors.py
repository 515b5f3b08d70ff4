"""Bad input on each surface gets that surface's error shape naming the field; a stream that breaks ends
with that surface's error event; the gateway's own answers (static template) come through translated."""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from tests.conftest import base_url, one_model_config


class Answer:
    def __init__(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.status_code, self.text, self.headers = status, body.decode(), headers

    def json(self):
        return orjson.loads(self.text)


async def post(gateway, path: str, body: dict, headers: dict | None = None) -> Answer:
    async with aiohttp.ClientSession() as session, session.post(base_url(gateway) + path, data=orjson.dumps(body),
                                                                headers=headers or {}) as response:
        return Answer(response.status, await response.read(), {k.lower(): v for k, v in response.headers.items()})

CLAUDE = {"anthropic-version": "2023-06-01", "content-type": "application/json"}
GOOD_MESSAGES = {"model": "m1", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m1"}, "input"),
    ({"input": "hi"}, "model"),
    ({"model": "m1", "input": "hi", "temperature": "hot"}, "temperature"),
    ({"model": "m1", "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "m1", "input": [{"type": "computer_call"}]}, "input[0].type"),
    ({"model": "m1", "input": [{"role": "user", "content": [{"type": "input_file"}]}]}, "input[0].content[0].type"),
    ({"model": "m1", "input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"model": "m1", "input": "hi", "tool_choice": "sometimes"}, "tool_choice"),
    ({"model": "m1", "input": "hi", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"model": "m1", "input": "hi", "previous_response_id": "resp_nope"}, "previous_response_id"),
])
async def test_responses_bad_input_is_an_openai_error_naming_the_field(upstream, start_gateway, body, param):
    gateway = await start_gateway(one_model_config(upstream.url))
    answer = await post(gateway, "/v1/responses", body)
    assert 400 <= answer.status_code < 500
    error = answer.json()["error"]
    assert error["param"] == param and error["message"] and error["type"] == "invalid_request_error"
    assert not upstream.log.requests  # nothing half-applied: no upstream call


@pytest.mark.parametrize(("body", "headers", "field"), [
    (GOOD_MESSAGES, {"content-type": "application/json"}, "anthropic-version"),
    ({**GOOD_MESSAGES, "max_tokens": None}, CLAUDE, "max_tokens"),
    ({**GOOD_MESSAGES, "messages": [{"role": "system", "content": "x"}]}, CLAUDE, "messages[0].role"),
    ({**GOOD_MESSAGES, "messages": [{"role": "user", "content": [{"type": "video"}]}]}, CLAUDE,
     "messages[0].content[0].type"),
    ({**GOOD_MESSAGES, "tool_choice": {"type": "maybe"}}, CLAUDE, "tool_choice"),
    ({**GOOD_MESSAGES, "stop_sequences": "END"}, CLAUDE, "stop_sequences"),
    ({**GOOD_MESSAGES, "model": "nope"}, CLAUDE, "model"),
])
async def test_messages_bad_input_is_an_anthropic_error_naming_the_field(upstream, start_gateway, body, headers,
                                                                         field):
    gateway = await start_gateway(one_model_config(upstream.url))
    answer = await post(gateway, "/v1/messages", body, headers)
    assert 400 <= answer.status_code < 500
    payload = answer.json()
    assert payload["type"] == "error" and set(payload) == {"type", "error"}
    assert payload["error"]["type"] in ("invalid_request_error", "not_found_error")
    assert field in payload["error"]["message"]
    assert not upstream.log.requests


async def test_a_malformed_version_is_refused_after_good_ones_and_each_message_has_its_own_id(upstream,
                                                                                           start_gateway):
    """The well-formed versions seen are remembered; that lets no malformed one through."""
    gateway = await start_gateway(one_model_config(upstream.url))
    first = await post(gateway, "/v1/messages", GOOD_MESSAGES, CLAUDE)
    second = await post(gateway, "/v1/messages", GOOD_MESSAGES, CLAUDE)
    assert first.status_code == second.status_code == 200
    ids = {first.json()["id"], second.json()["id"]}
    assert len(ids) == 2 and all(i.startswith("msg_") for i in ids)
    bad = await post(gateway, "/v1/messages", GOOD_MESSAGES, {**CLAUDE, "anthropic-version": "2023-6-1"})
    assert bad.status_code == 400 and "anthropic-version" in bad.json()["error"]["message"]


async def test_a_broken_stream_ends_with_each_surfaces_error_event(upstream, start_gateway):
    upstream.mode = "cut_stream"
    upstream.stream_chunks = 6
    gateway = await start_gateway(one_model_config(upstream.url))
    responses = await post(gateway, "/v1/responses", {"model": "m1", "input": "hi", "stream": True})
    messages = await post(gateway, "/v1/messages", {**GOOD_MESSAGES, "stream": True}, CLAUDE)
    r_events = [line for line in responses.text.split("\n") if line.startswith("event:")]
    assert r_events[-1] == "event: response.failed" and "event: response.output_text.delta" in r_events
    assert "event: response.completed" not in r_events
    m_lines = messages.text.strip().split("\n")
    assert m_lines[-2] == "event: error" and orjson.loads(m_lines[-1][6:])["error"]["type"] == "api_error"
    assert "event: message_stop" not in m_lines


async def test_a_malformed_line_mid_stream_ends_each_surface_with_its_error_naming_it(upstream, start_gateway):
    """A translated stream's reader is its SSE check (the guard passes its chunks on): the garbage line
    never reaches the client, and the surface's error event says what was wrong."""
    upstream.mode, upstream.malformed_at, upstream.chunk_delay = "malformed_sse", 3, 0.02  # events arrive apart
    gateway = await start_gateway(one_model_config(upstream.url))
    responses = await post(gateway, "/v1/responses", {"model": "m1", "input": "hi", "stream": True})
    messages = await post(gateway, "/v1/messages", {**GOOD_MESSAGES, "stream": True}, CLAUDE)
    r_lines = responses.text.strip().split("\n")
    assert r_lines[-2] == "event: response.failed" and "event: response.output_text.delta" in r_lines
    assert "malformed SSE line" in orjson.loads(r_lines[-1][6:])["response"]["error"]["message"]
    m_lines = messages.text.strip().split("\n")
    assert m_lines[-2] == "event: error" and "event: content_block_delta" in m_lines
    assert "malformed SSE line" in orjson.loads(m_lines[-1][6:])["error"]["message"]
    assert not any("<html>" in line for line in r_lines[:-1] + m_lines[:-1])  # only the error names it


async def test_the_static_template_answers_both_surfaces(upstream, start_gateway):
    upstream.mode = "error500"
    config = one_model_config(upstream.url)
    config["resilience"] = {"static_answer": "We are busy; try again soon."}
    gateway = await start_gateway(config)
    responses = await post(gateway, "/v1/responses", {"model": "m1", "input": "hi"})
    messages = await post(gateway, "/v1/messages", GOOD_MESSAGES, CLAUDE)
    assert responses.json()["output"][0]["content"][0]["text"] == "We are busy; try again soon."
    assert responses.headers["x-sits-fallback"] == "static-template"
    assert messages.json()["content"][0]["text"] == "We are busy; try again soon."
    assert messages.headers["x-sits-fallback"] == "static-template"
