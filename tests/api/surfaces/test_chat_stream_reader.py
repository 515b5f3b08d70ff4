"""The chat stream reader's learnt shape: text-only events it slices without parsing say exactly what
parsing them says, whatever the text (quotes, backslashes, escapes a server writes its own way), and
an event of another shape in the middle of a run is read for what it is. The same for the shape
foreseen from the role event, and for the finish and usage events read by their bytes."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits.errors import UpstreamProtocolError
from sits.pipeline.sse_guard import SseGuard
from sits.translate import stream_opening
from sits.translate.chat_delta import ChatDelta, StreamEnd
from sits.translate.chat_stream import ChatStreamReader


def event(delta: dict[str, Any], finish: str | None = None, usage: Any = "absent") -> bytes:
    """An event as vLLM lays it out (`_server_event`)."""
    return _server_event("vllm", delta, finish, usage=usage)


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


def _server_event(layout: str, delta: dict[str, Any] | None, finish: Any = None, *, usage: Any = "absent",
                  stop_reason: Any = "absent") -> bytes:
    """An event as servers lay it out: `vllm` (id, object, created, model, then choices; a `stop_reason`
    in the choice), `llama` (choices first, the finish reason before the delta, the model after),
    `openai` (a `refusal` beside the role), `late` (the model after the choices, none in a usage event)."""
    choice: dict[str, Any]
    if layout == "llama":
        choice = {"finish_reason": finish, "index": 0}
        if delta is not None:
            choice["delta"] = delta
    else:
        choice = {"index": 0}
        if delta is not None:
            choice["delta"] = {**delta, "refusal": None} if layout == "openai" and "role" in delta else delta
        choice.update({"logprobs": None, "finish_reason": finish})
        if stop_reason != "absent":
            choice["stop_reason"] = stop_reason
    top: dict[str, Any]
    if layout == "late":  # the model after the choices, and not in a usage event
        top = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 5,
               "choices": [choice] if delta is not None else []}
        if delta is not None:
            top["model"] = "m"
    elif layout == "llama":
        top = {"choices": [choice] if delta is not None else [], "created": 5, "id": "chatcmpl-1", "model": "m",
               "system_fingerprint": "b1", "object": "chat.completion.chunk"}
    else:
        top = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 5, "model": "m",
               "choices": [choice] if delta is not None else []}
    if usage != "absent":
        top["usage"] = usage
    return b"data: " + orjson.dumps(top) + b"\n\n"


def _stream_event(layout: str, kind: str, text: str) -> bytes:
    counts = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    return {
        "text": lambda: _server_event(layout, {"content": text}),
        "role": lambda: _server_event(layout, {"role": "assistant", "content": ""}),
        "role_null": lambda: _server_event(layout, {"role": "assistant", "content": None}),
        "finish": lambda: _server_event(layout, {}, "stop"),
        "finish_content": lambda: _server_event(layout, {"content": ""}, "length"),
        "finish_stop_string": lambda: _server_event(layout, {}, "stop", stop_reason="###"),
        "finish_odd": lambda: _server_event(layout, {}, text or "stop2"),
        "finish_number": lambda: _server_event(layout, {}, 7),
        "usage": lambda: _server_event(layout, None, usage=counts),
        "usage_null_model": lambda: _server_event(layout, None, usage=counts).replace(b'"model":"m"', b'"model":null'),
        "usage_not_object": lambda: _server_event(layout, None, usage=[1]),
        "usage_and_more": lambda: _server_event(layout, None, usage=counts)[:-3] + b',"x":1}\n\n',
        "tool": lambda: _server_event(layout, {"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f"}}]}),
    }[kind]()


def _sequence(items: list[Any]) -> list[Any]:
    """Items as what they say: runs of text decoded and joined, other items as they are."""
    out: list[Any] = []
    for item in items:
        if isinstance(item, list):
            text = orjson.loads(b'"' + b"".join(item) + b'"')
            if out and isinstance(out[-1], str):
                out[-1] += text
            else:
                out.append(text)
        else:
            out.append(item)
    return out


_KINDS = ["role", "role_null", "finish", "finish_content", "finish_stop_string", "finish_odd", "finish_number",
          "usage", "usage_null_model", "usage_not_object", "usage_and_more", "tool"]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["vllm", "llama", "openai", "late"]),
       st.lists(st.one_of(st.tuples(st.just("text"), st.text(max_size=4)),
                          st.tuples(st.sampled_from(_KINDS), st.sampled_from(["", "é", "a_b", "x1"]))),
                min_size=1, max_size=16),
       st.booleans())
def test_every_event_says_what_parsing_it_alone_says(layout, events, one_event_a_read):
    # Each event parsed by a reader of its own (nothing learnt) is the reference: the stream's reader,
    # which slices text events by a learnt or foreseen shape and reads finish and usage events by their
    # bytes, says the same, in the same order.
    wires = [_stream_event(layout, kind, text) for kind, text in events] + [b"data: [DONE]\n\n"]
    reference = _sequence([item for wire in wires for item in ChatStreamReader().feed(wire)])
    reader = ChatStreamReader()
    if one_event_a_read:
        items = [item for wire in wires for item in reader.feed(wire)]
    else:
        items = reader.feed(b"".join(wires))
    assert _sequence(items) == reference


def test_the_role_event_foretells_the_text_events_shape():
    reader = ChatStreamReader()
    text = _stream_event("vllm", "text", "Hi")
    assert reader.lone_text(text) is None  # nothing learnt yet
    reader.feed(_stream_event("vllm", "role", ""))
    assert reader.lone_text(text) == b"Hi"  # foreseen: sliced without parsing a text event first
    other = ChatStreamReader()
    other.feed(_stream_event("openai", "role", ""))  # a refusal beside the role: nothing foreseen
    assert other.lone_text(_stream_event("openai", "text", "Hi")) is None


@pytest.mark.parametrize("layout", ["vllm", "llama"])
def test_a_stream_of_a_known_shape_parses_only_its_role_event(layout, monkeypatch):
    # The text events' shape foreseen from the role event, the finish and usage events read by their
    # bytes: of a whole stream one event a read, only the role event is parsed (the llama.cpp layout
    # writes its model after `choices`: its usage event, without the model, is parsed too). Counted on
    # the module's source, loaded on its own, whose `orjson` can be watched in every build.
    import importlib.util

    import sits.translate.chat_stream as installed

    source = Path(installed.__file__).with_name("chat_stream.py")
    spec = importlib.util.spec_from_file_location("chat_stream_from_source", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parsed: list[bytes] = []

    class CountingJson:
        JSONDecodeError = orjson.JSONDecodeError
        dumps = staticmethod(orjson.dumps)

        @staticmethod
        def loads(data: bytes) -> Any:
            parsed.append(bytes(data))
            return orjson.loads(data)

    monkeypatch.setattr(module, "orjson", CountingJson)
    stream_opening.OPENINGS.pop("upstream", None)  # the first stream learns the source's opening
    wires = [_stream_event(layout, "role", ""), *(_stream_event(layout, "text", t) for t in ["Hel", "lo"]),
             _stream_event(layout, "finish", ""), _stream_event(layout, "usage", ""), b"data: [DONE]\n\n"]
    reader = module.ChatStreamReader()
    items = [item for wire in wires for item in reader.feed(wire)]
    whole_events = [p for p in parsed if b'"choices"' in p]  # not the usage object read on its own
    assert _sequence(items) == _sequence([item for wire in wires for item in ChatStreamReader().feed(wire)])
    assert len(whole_events) == (1 if layout == "vllm" else 2)
    # The next stream of the source, with its own id and `created`: its role event is read by the opening
    # the first one learnt, so nothing of it is parsed but the llama layout's usage event.
    parsed.clear()
    later = [_own_values(wire, "chatcmpl-later", 1733000000) for wire in wires]
    reader = module.ChatStreamReader()
    items = [item for wire in later for item in reader.feed(wire)]
    assert _sequence(items) == _sequence([item for wire in later for item in ChatStreamReader().feed(wire)])
    assert len([p for p in parsed if b'"choices"' in p]) == (0 if layout == "vllm" else 1)


def _own_values(wire: bytes, stream_id: str, created: int) -> bytes:
    """A `_server_event` stream with its own id and `created` instead of the layout helper's."""
    return wire.replace(b'"chatcmpl-1"', orjson.dumps(stream_id)).replace(b'"created":5', b'"created":%d' % created)


_IDS = st.one_of(st.from_regex(r"chatcmpl-[0-9a-f]{1,32}", fullmatch=True),
                 st.text(min_size=1, max_size=12),  # quotes, backslashes, non-ASCII: parsed, never read by bytes
                 st.just(""))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["vllm", "llama", "openai", "late"]),
       st.lists(st.tuples(_IDS, st.integers(0, 2**70), st.sampled_from(["role", "role_null"]),
                          st.lists(st.sampled_from(["text", "finish", "finish_content", "usage", "tool"]), max_size=5),
                          st.booleans()), min_size=1, max_size=5))
def test_a_later_streams_role_event_read_by_the_opening_says_what_parsing_it_says(layout, streams):
    # Streams of one source, each with its own id and `created`: the readers after the first may read the
    # role event by the opening the first learnt. Every stream still says what its events say parsed each
    # alone, in the same order, whatever its id and number (one a JSON escape, non-ASCII or beyond 64 bits
    # is parsed).
    source = f"test-opening-{layout}"
    stream_opening.OPENINGS.pop(source, None)  # the memo under test, empty to start
    for stream_id, created, role, kinds, one_event_a_read in streams:
        wires = [_own_values(_stream_event(layout, kind, "Hi"), stream_id, created) for kind in [role, *kinds]]
        wires.append(b"data: [DONE]\n\n")
        reference = _sequence([item for wire in wires for item in _parsed_alone(wire)])
        reader = ChatStreamReader(source)
        items = [i for wire in wires for i in reader.feed(wire)] if one_event_a_read else reader.feed(b"".join(wires))
        assert _sequence(items) == reference


def _parsed_alone(wire: bytes) -> list[Any]:
    """What a reader with nothing learnt, of a source of its own, makes of one event."""
    stream_opening.OPENINGS.pop("alone", None)
    return ChatStreamReader("alone").feed(wire)


def test_a_later_streams_role_event_is_not_parsed_and_its_shape_carries_its_own_values():
    stream_opening.OPENINGS.pop("opening-source", None)
    first = ChatStreamReader("opening-source")
    first.feed(_own_values(_stream_event("vllm", "role", ""), "chatcmpl-aaa", 1733000000))
    assert "opening-source" in stream_opening.OPENINGS  # learnt
    second = ChatStreamReader("opening-source")
    [role] = second.feed(_own_values(_stream_event("vllm", "role", ""), "chatcmpl-bbbbbb", 1733000042))
    assert isinstance(role, ChatDelta) and role.model == "m" and role.text == "" and role.finish is None
    # the text events' shape foreseen with the second stream's own id and number, not the first's
    text = _own_values(_stream_event("vllm", "text", "Hi"), "chatcmpl-bbbbbb", 1733000042)
    assert second.lone_text(text) == b"Hi"
    assert second.lone_text(_own_values(_stream_event("vllm", "text", "Hi"), "chatcmpl-aaa", 1733000000)) is None
    finish = _own_values(_stream_event("vllm", "finish", ""), "chatcmpl-bbbbbb", 1733000042)
    assert second.feed(finish) == ChatStreamReader().feed(finish)


def test_a_source_whose_role_events_differ_in_another_field_is_learnt_again_only_now_and_then():
    # A field that changes per stream (here a fingerprint) makes each role event miss the opening: the
    # first miss learns the new one (a changed layout), later misses in a row learn again only every
    # `_RELEARN_EVERY`th time; every stream still says what parsing it says.
    source = "varying-source"
    stream_opening.OPENINGS.pop(source, None)
    stream_opening.MISSES.pop(source, None)
    role = _stream_event("vllm", "role", "")
    learnt = []
    for n in range(2 * stream_opening.RELEARN_EVERY + 1):
        event = role.replace(b'"model":"m"', b'"model":"m","system_fingerprint":"fp%d"' % n)
        assert ChatStreamReader(source).feed(event) == _parsed_alone(event)
        learnt.append(stream_opening.OPENINGS[source])
    relearnt = [n for n in range(1, len(learnt)) if learnt[n] is not learnt[n - 1]]
    assert relearnt == [1, stream_opening.RELEARN_EVERY, 2 * stream_opening.RELEARN_EVERY]
    # a hit ends the run: the next miss learns at once again
    hit = role.replace(b'"model":"m"', b'"model":"m","system_fingerprint":"fp%d"' % (len(learnt) - 1))
    ChatStreamReader(source).feed(hit.replace(b'"chatcmpl-1"', b'"chatcmpl-2"'))
    assert source not in stream_opening.MISSES


# Lines a server might send between its events: SSE fields, comments, and what is no SSE at all.
_ODD_EVENTS = [b": keep-alive", b"event: message", b"id: 7", b"retry: 100", b"data:{}", b"data:  {\"a\":1}",
               b"<html>oops</html>", b"data: not json", b"data: 42", b"data: [1]", b"HTTP/1.1 502 Bad Gateway",
               b"data: {\"a\":1}\n<html>", b"event: x\ndata: {\"b\":2}", b"\xff\xfe", b"data: [DONE] tail",
               b"data:\n", b" data: {}"]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["vllm", "llama", "openai", "late"]),
       st.lists(st.one_of(st.tuples(st.just("text"), st.text(max_size=4)),
                          st.tuples(st.sampled_from(["role", "finish", "usage", "usage_split"]), st.just("")),
                          st.tuples(st.just("odd"), st.sampled_from(range(len(_ODD_EVENTS))))),
                min_size=1, max_size=12),
       st.lists(st.integers(0, 3000), max_size=4), st.booleans())
def test_the_reader_refuses_exactly_the_streams_the_sse_guard_refuses(layout, events, cuts, one_event_a_read):
    """A translated stream's chunks reach its reader unchecked (the reader is its SSE check): a stream with
    a malformed line ends with the guard's error, however it is read, and no other stream does."""
    wires = []
    for kind, value in events:
        if kind == "odd":
            wires.append(_ODD_EVENTS[value] + b"\n\n")
        elif kind == "usage_split":  # a usage event whose JSON holds a line end: two lines, the second no field
            wires.append(_stream_event(layout, "usage", "").replace(b'"usage":{', b'"usage":{\n'))
        else:
            wires.append(_stream_event(layout, kind, value))
    wire = b"".join(wires) + b"data: [DONE]\n\n"
    guard = SseGuard("upstream")
    try:
        guard.check(wire)
        refused = None
    except UpstreamProtocolError as exc:
        refused = str(exc)
    reader = ChatStreamReader()
    bounds = sorted(c % (len(wire) + 1) for c in cuts)
    reads = wires + [b"data: [DONE]\n\n"] if one_event_a_read else \
        [wire[a:b] for a, b in zip([0, *bounds], [*bounds, len(wire)], strict=True)]
    if refused is None:
        for chunk in reads:
            reader.feed(chunk)
    else:
        with pytest.raises(UpstreamProtocolError) as raised:
            for chunk in reads:
                reader.feed(chunk)
        assert str(raised.value) == refused


@pytest.mark.parametrize("wire", [b"\n\n: ping\n\n", b'data: {"a":1}\n\n\n\n: ping\n\n'])
def test_blank_lines_and_comments_before_a_shape_is_known_say_no_text(wire):
    """Before a shape is learnt nothing is read as a text event's bytes: a comment after a blank line is
    no text (a read that starts with a blank line once looked like the unlearnt shape's bytes)."""
    assert not any(isinstance(item, list) for item in ChatStreamReader().feed(wire))


def test_a_line_that_is_no_sse_after_a_blank_line_is_refused_before_a_shape_is_known():
    with pytest.raises(UpstreamProtocolError, match="malformed SSE line"):
        ChatStreamReader().feed(b"\n\nhello\n\n")
