"""The chat stream reader's learnt shape: text-only events it slices without parsing say exactly what
parsing them says, whatever the text (quotes, backslashes, escapes a server writes its own way), and
an event of another shape in the middle of a run is read for what it is."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits.translate.chat_stream import ChatDelta, ChatStreamReader, StreamEnd


def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 5, "model": "m",
             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def read(wire: bytes, cuts: list[int] | None = None) -> tuple[str, list[Any]]:
    """(the text, the other items) the reader makes of `wire` fed in pieces cut at `cuts`."""
    reader = ChatStreamReader()
    bounds = sorted(c % (len(wire) + 1) for c in cuts or [])
    items = [i for a, b in zip([0, *bounds], [*bounds, len(wire)], strict=True) for i in reader.feed(wire[a:b])]
    text = "".join(orjson.loads(b'"' + b"".join(i) + b'"') if isinstance(i, list) else i.text
                   for i in items if isinstance(i, list | ChatDelta))
    return text, [i for i in items if not isinstance(i, list)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=12), st.lists(st.integers(0, 5000), max_size=8))
def test_text_events_say_the_same_sliced_or_parsed(pieces, cuts):
    wire = event({"role": "assistant", "content": ""}) + b"".join(event({"content": p}) for p in pieces) \
        + event({}, "stop") + b"data: [DONE]\n\n"
    text, others = read(wire, cuts)
    assert text == "".join(pieces)
    assert [o.finish for o in others if isinstance(o, ChatDelta)] == [None, "stop"]
    assert others[-1] == StreamEnd()


@pytest.mark.parametrize("written", [
    rb'caf\u00e9',  # an escape orjson would not write
    rb'a\/b',
    rb'say \"hi\"',  # quotes in the text: parsed, not sliced
    rb'back\\',  # a text ending in a backslash
    rb'tab\there',
])
@pytest.mark.parametrize("one_event_per_read", [False, True])
def test_texts_written_another_way_come_through(written, one_event_per_read):
    first = event({"content": "Hello"})
    other = first.replace(b'"Hello"', b'"' + written + b'"')
    wire = first + other + other + b"data: [DONE]\n\n"
    cuts = [len(first), len(first) + len(other), len(first) + 2 * len(other)] if one_event_per_read else None
    text, _ = read(wire, cuts)
    assert text == "Hello" + 2 * orjson.loads(b'"' + written + b'"')


def test_a_lone_event_of_the_learnt_shape_is_sliced_and_anything_else_is_not():
    reader = ChatStreamReader()
    first = event({"content": "Hello"})
    assert reader.lone_text(first) is None  # nothing learnt yet
    assert reader.feed(first) == [[b"Hello"]]
    assert reader.lone_text(event({"content": "world"})) == b"world"
    assert reader.lone_text(event({"content": 'say "hi"'})) is None  # a quote: parsed
    assert reader.lone_text(event({"content": "a"}) + event({"content": "b"})) is None  # two events: a run
    assert reader.lone_text(event({"content": "a"})[:-1]) is None  # not whole
    assert reader.lone_text(event({"content": "x\\"})) is None  # ends in a backslash: parsed
    assert reader.lone_text(event({"content": ""})) is None


def test_an_event_of_another_shape_inside_a_run_is_read_for_what_it_is():
    wire = (event({"content": "a"}) + event({"content": "b"}) + event({"content": "c"}, usage={"prompt_tokens": 3})
            + event({"content": "d"}) + event({"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f"}}]})
            + event({"content": "e"}) + b": keep-alive\n\n" + event({"content": "f"}) + b"data: [DONE]\n\n")
    text, others = read(wire)
    assert text == "abcdef"
    assert [o.usage for o in others if isinstance(o, ChatDelta) and o.usage] == [{"prompt_tokens": 3}]
    assert [o.tools[0].name for o in others if isinstance(o, ChatDelta) and o.tools] == ["f"]


def test_crlf_line_ends_and_an_error_event():
    wire = (event({"content": "x"}) + event({"content": "y"})).replace(b"\n", b"\r\n") \
        + b'data: {"error":{"message":"engine died","code":"boom"}}\r\n\r\n'
    text, others = read(wire, [7, 300])
    assert text == "xy" and others == [StreamEnd("engine died", "boom")]


def test_events_of_the_shape_learnt_earlier_in_the_same_read_are_sliced():
    # A sliced piece is the text as the server escaped it; a parsed one is re-escaped the way orjson writes
    # it. `\u00e9` coming back as written shows the events after the first were sliced, not parsed, though
    # the shape was learnt from an event of the same read.
    first = event({"content": "Hello"})
    other = first.replace(b'"Hello"', rb'"caf\u00e9"')
    items = ChatStreamReader().feed(event({"role": "assistant", "content": ""}) + first + other + other
                                    + b"data: [DONE]\n\n")
    assert [p for i in items if isinstance(i, list) for p in i] == [b"Hello", rb"caf\u00e9", rb"caf\u00e9"]


def _wire_event(kind: str, text: str) -> bytes:
    if kind == "text":
        return event({"content": text})
    if kind == "role":
        return event({"role": "assistant", "content": ""})
    if kind == "tool":
        return event({"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f", "arguments": '{"a":'}}]})
    if kind == "usage":
        return event({"content": "u"}, usage={"prompt_tokens": 3})
    if kind == "finish":
        return event({}, "stop")
    if kind == "reasoning":  # the learnt head, then the text and another field before the learnt tail
        return event({"content": "r", "reasoning_content": "z"})
    if kind == "named":
        return b"event: chunk\n" + event({"content": "n"})
    return b": keep-alive\n\n"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("text"), st.text(max_size=5)),
                          st.tuples(st.sampled_from(["role", "tool", "usage", "finish", "named", "comment", "reasoning"]),
                                    st.just(""))), min_size=1, max_size=40),
       st.lists(st.integers(0, 20000), max_size=6))
def test_any_mix_of_events_reads_the_same_in_one_chunk_cut_anywhere_or_one_event_a_read(events, cuts):
    # Sliced by the learnt shape or parsed, in reads of many events, cut anywhere or one event a read: the
    # same text and the same other events, in order.
    wires = [_wire_event(kind, text) for kind, text in events]
    wire = b"".join(wires) + b"data: [DONE]\n\n"
    said = {"usage": "u", "named": "n", "reasoning": "r"}  # the text those events carry beside other fields
    expected = "".join(text if kind == "text" else said.get(kind, "") for kind, text in events)
    whole, cut = read(wire), read(wire, cuts)
    each = read(wire, list(itertools.accumulate(len(w) for w in wires)))
    assert whole == cut == each
    assert whole[0] == expected
    assert [o.tools[0].name for o in whole[1] if isinstance(o, ChatDelta) and o.tools] \
        == ["f" for kind, _ in events if kind == "tool"]
    assert [o.reasoning for o in whole[1] if isinstance(o, ChatDelta) and o.reasoning] \
        == ["z" for kind, _ in events if kind == "reasoning"]
    assert whole[1][-1] == StreamEnd()
