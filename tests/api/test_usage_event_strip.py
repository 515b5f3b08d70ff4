"""Taking the usage event the gateway asked for (a keyed stream) out of what the client gets."""

from __future__ import annotations

import orjson

from sits.api.chat_stream_relay import without_usage_event
from sits.api.body_fields import asking_usage


def event(payload: dict) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


TEXT = event({"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]})
FINISH = event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
USAGE = event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}})
DONE = b"data: [DONE]\n\n"


def test_the_usage_only_event_is_taken_out_wherever_it_is_in_the_read():
    assert without_usage_event(USAGE) == b""
    assert without_usage_event(TEXT + FINISH + USAGE + DONE) == TEXT + FINISH + DONE
    spaced = b'data: {"choices": [], "usage": {"prompt_tokens": 3}}\n\n'.replace(b'"usage": {', b'"usage":{')
    assert without_usage_event(FINISH + spaced + DONE) == FINISH + DONE


def test_an_event_of_several_lines_is_taken_out_whole_and_its_neighbours_kept():
    # `event:` / `id:` lines beside the data: the newline next to the usage is not the event's edge
    named = b"event: chunk\n" + USAGE[:-2] + b"\nid: 7\n\n"
    assert without_usage_event(TEXT + named + DONE) == TEXT + DONE
    assert without_usage_event(b"id: 6\n" + TEXT + named) == b"id: 6\n" + TEXT
    assert without_usage_event(named) == b""


def test_a_usage_riding_on_an_event_with_choices_or_cut_across_reads_stays():
    riding = event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3}})
    assert without_usage_event(riding + DONE) == riding + DONE
    assert without_usage_event(USAGE[:-2]) == USAGE[:-2]


def test_asking_for_usage_keeps_the_rest_of_the_body():
    raw = b' {"model":"m1","stream":true,"messages":[]}'
    assert orjson.loads(asking_usage(raw)) == {"stream_options": {"include_usage": True}, "model": "m1",
                                               "stream": True, "messages": []}
