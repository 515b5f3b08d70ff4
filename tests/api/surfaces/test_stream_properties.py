"""Property tests of the stream translation: every valid chat-completion chunk sequence, cut into byte
chunks anywhere or read one event at a time, becomes a valid event sequence of each surface (order, indices, usage totals), and a
Messages stream translated back to chat chunks says the same thing again."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits.errors import UpstreamProtocolError
from sits.pipeline.sse_guard import SseGuard
from sits.translate.anthropic_upstream import AnthropicToChat
from sits.translate.chat_delta import ChatDelta, StreamEnd
from sits.translate.chat_stream import ChatStreamReader
from sits.translate.messages_stream import MessagesStream
from sits.translate.responses_passthrough import ResponsesTap
from sits.translate.responses_stream import ResponsesStream
from sits.translate.sse import SseSplitter

pieces = st.lists(st.text(min_size=1, max_size=8), max_size=5)
tool = st.tuples(st.from_regex(r"call_[a-z0-9]{1,6}", fullmatch=True), st.from_regex(r"[a-z_]{1,10}", fullmatch=True),
                 st.lists(st.text(min_size=1, max_size=6), min_size=0, max_size=4))
usage = st.one_of(st.none(), st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)).flatmap(
    lambda pc: st.tuples(st.just(pc[0]), st.just(pc[1]), st.integers(0, pc[0]))))


@st.composite
def chat_streams(draw: Any) -> dict[str, Any]:
    reasoning, text = draw(pieces), draw(pieces)
    tools = draw(st.lists(tool, max_size=3, unique_by=lambda t: t[0]))
    finish = draw(st.sampled_from(["tool_calls"] if tools else ["stop", "length"]))
    used = draw(usage)
    events: list[dict[str, Any]] = [{"role": "assistant", "content": ""}] if draw(st.booleans()) else []
    events += [{"reasoning_content": p} for p in reasoning]
    events += [{"content": p} for p in text]
    for index, (call_id, name, args) in enumerate(tools):
        events.append({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                       "function": {"name": name, "arguments": ""}}]})
        events += [{"tool_calls": [{"index": index, "function": {"arguments": a}}]} for a in args]
    chunks = [{"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
               "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in events]
    chunks.append({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if used is not None:
        prompt, completion, cached = used
        chunks.append({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [],
                       "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion,
                                 "prompt_tokens_details": {"cached_tokens": cached}}})
    each = [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]
    wire = b"".join(each)
    if draw(st.booleans()):  # one event per read, as a model server writes tokens
        parts = each
    else:
        cuts = sorted(draw(st.lists(st.integers(0, len(wire)), max_size=12)))
        parts = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
    return {"reasoning": "".join(reasoning), "text": "".join(text),
            "tools": [(c, n, "".join(a)) for c, n, a in tools], "finish": finish, "usage": used, "parts": parts}


def events_of(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    splitter = SseSplitter()
    return [(e.name, orjson.loads(e.data)) for e in splitter.feed(raw)]


@settings(max_examples=150, deadline=None)
@given(chat_streams())
def test_every_chat_stream_is_a_valid_responses_event_sequence(stream):
    translator = ResponsesStream("resp_abc", 0, {"model": "m"})
    events = events_of(b"".join(b"".join(translator.feed(p)) for p in stream["parts"]))
    assert translator.ended and translator.error is None
    names = [n for n, _ in events]
    assert all(n == data["type"] for n, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == ("response.incomplete" if stream["finish"] == "length" else "response.completed")
    added = [d["output_index"] for n, d in events if n == "response.output_item.added"]
    done = [d["output_index"] for n, d in events if n == "response.output_item.done"]
    assert added == list(range(len(added))) and sorted(done) == added
    for index in added:  # each item opens before anything is said of it, and nothing is said after it closed
        positions = [i for i, (n, d) in enumerate(events) if d.get("output_index") == index]
        assert events[positions[0]][0] == "response.output_item.added"
        assert events[positions[-1]][0] == "response.output_item.done"
    text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    assert text == stream["text"]
    final = events[-1][1]["response"]
    calls = [(o["call_id"], o["name"], o["arguments"]) for o in final["output"] if o["type"] == "function_call"]
    assert calls == stream["tools"]
    for call_id, _, arguments in stream["tools"]:
        item = next(o for o in final["output"] if o.get("call_id") == call_id)
        pieces = [d["delta"] for n, d in events if n == "response.function_call_arguments.delta"
                  and d["item_id"] == item["id"]]
        assert "".join(pieces) == arguments
    messages = [o for o in final["output"] if o["type"] == "message"]
    assert [m["content"][0]["text"] for m in messages] == ([stream["text"]] if stream["text"] or not calls else [])
    usage = final["usage"]
    prompt, completion, cached = stream["usage"] or (0, 0, 0)
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (prompt, completion,
                                                                                     prompt + completion)
    assert usage["input_tokens_details"]["cached_tokens"] == cached


@settings(max_examples=150, deadline=None)
@given(chat_streams(), st.lists(st.integers(0, 4000), max_size=10))
def test_every_chat_stream_is_a_valid_messages_event_sequence_and_translates_back(stream, back_cuts):
    translator = MessagesStream("msg_abc", "m")
    raw = b"".join(b"".join(translator.feed(p)) for p in stream["parts"])
    events = events_of(raw)
    assert translator.ended and translator.error is None
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    open_index, started = None, []
    for name, data in events:
        if name == "content_block_start":
            assert open_index is None
            open_index = data["index"]
            started.append((data["index"], data["content_block"]))
        elif name == "content_block_delta":
            assert data["index"] == open_index
        elif name == "content_block_stop":
            assert data["index"] == open_index
            open_index = None
    assert open_index is None and [i for i, _ in started] == list(range(len(started)))
    assert "".join(d["delta"]["thinking"] for n, d in events if d.get("delta", {}).get("type") == "thinking_delta") \
        == stream["reasoning"]
    assert "".join(d["delta"]["text"] for n, d in events if d.get("delta", {}).get("type") == "text_delta") \
        == stream["text"]
    uses = [(b["id"], b["name"]) for _, b in started if b["type"] == "tool_use"]
    assert uses == [(c, n) for c, n, _ in stream["tools"]]
    delta = events[-2][1]
    prompt, completion, cached = stream["usage"] or (0, 0, 0)
    assert delta["usage"] == {"input_tokens": prompt - cached, "output_tokens": completion,
                              "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}
    assert delta["delta"]["stop_reason"] == {"stop": "end_turn", "length": "max_tokens",
                                             "tool_calls": "tool_use"}[stream["finish"]]

    # ... and back: the Messages stream, cut anywhere, as chat chunks says the same
    cuts = sorted(c % (len(raw) + 1) for c in back_cuts)
    back = AnthropicToChat(include_usage=True)
    chat = b"".join(back.feed(raw[a:b]) for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True))
    deltas = [d for d in ChatStreamReader().feed(chat)]
    assert isinstance(deltas[-1], StreamEnd) and deltas[-1].error is None
    said = [ChatDelta(text=orjson.loads(b'"' + b"".join(d) + b'"')) if isinstance(d, list) else d for d in deltas
            if isinstance(d, list | ChatDelta)]
    assert "".join(d.text for d in said) == stream["text"]
    assert "".join(d.reasoning for d in said) == stream["reasoning"]
    calls: dict[int, list[Any]] = {}
    for d in said:
        for t in d.tools:
            entry = calls.setdefault(t.index, [t.id, t.name, ""])
            entry[2] += t.arguments
    assert [tuple(calls[i]) for i in sorted(calls)] == stream["tools"]
    assert [d.finish for d in said if d.finish] == [stream["finish"]]
    usage = next(d.usage for d in said if d.usage is not None)
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (prompt, completion)
    assert usage["prompt_tokens_details"]["cached_tokens"] == cached


def test_a_broken_stream_ends_with_each_surfaces_error_event():
    responses, messages = ResponsesStream("resp_x", 0, {"model": "m"}), MessagesStream("msg_x", "m")
    part = b'data: {"choices":[{"index":0,"delta":{"content":"par"}}]}\n\ndata: {"error":{"message":"engine died"}}\n\n'
    r_events = events_of(b"".join(responses.feed(part)))
    m_events = events_of(b"".join(messages.feed(part)))
    assert r_events[-1][0] == "response.failed"
    assert r_events[-1][1]["response"]["error"]["message"] == "engine died"
    assert m_events[-1] == ("error", {"type": "error", "error": {"type": "api_error", "message": "engine died"}})
    assert responses.error == messages.error == "engine died"
    assert responses.feed(b"data: [DONE]\n\n") == [] and messages.feed(b"data: [DONE]\n\n") == []


def test_a_messages_stream_without_message_start_still_begins_with_the_role_and_says_its_input_is_unknown():
    """llama-server now and then opens its stream with a content block, no message_start."""
    events = [("content_block_start", {"type": "content_block_start", "index": 0,
                                       "content_block": {"type": "text", "text": ""}}),
              ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "text_delta", "text": "Hi"}}),
              ("content_block_stop", {"type": "content_block_stop", "index": 0}),
              ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                 "usage": {"output_tokens": 2}}),
              ("message_stop", {"type": "message_stop"})]
    raw = b"".join(b"event: %s\ndata: %s\n\n" % (name.encode(), orjson.dumps(data)) for name, data in events)
    back = AnthropicToChat(include_usage=True)
    chunks = [orjson.loads(line[6:]) for line in back.feed(raw).split(b"\n") if line.startswith(b"data: {")]
    assert back.missing_start
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[1]["choices"][0]["delta"] == {"content": "Hi"}
    assert chunks[-1]["usage"]["completion_tokens"] == 2 and chunks[-1]["usage"]["prompt_tokens"] == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["Hi", " error", " response.failed", " ok", "\u00e9"]), max_size=8),
       st.sampled_from(["completed", "incomplete", "failed"]),
       st.sampled_from([None, b"event: %b\n", b"event:%b\n", b"event: %b \n", b"event: %b\r\n", b"event:  %b\n"]),
       st.lists(st.integers(0, 4000), max_size=10))
def test_the_pass_through_tap_finds_the_closing_response_however_the_stream_is_cut(texts, status, named, cuts):
    # `named`: how the name line is spelt (a server's spacing; none: the type is read from the data)
    def event(kind: str, **fields: Any) -> bytes:
        line = named % kind.encode() if named else b""
        return line + b"data: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"
    response = {"id": "resp_up", "status": "in_progress", "output": []}
    each = [event("response.created", response=response)]
    each += [event("response.output_text.delta", delta=t) for t in texts]
    closed = {**response, "status": status, **({"error": {"message": "boom"}} if status == "failed" else {})}
    each.append(event(f"response.{status}", response=closed))
    wire = b"".join(each)
    bounds = sorted(c % (len(wire) + 1) for c in cuts)
    parts = each if not cuts else [wire[a:b] for a, b in zip([0, *bounds], [*bounds, len(wire)], strict=True)]
    tap = ResponsesTap()
    closings = [tap.feed(part) for part in parts]
    assert closings.count(True) == 1 and tap.ended and tap.response_id == "resp_up"
    if status == "failed":
        assert tap.response is None and tap.error == "boom"
    else:
        assert tap.response == closed and tap.error is None


_ODD_LINES = [b": keep-alive", b"id: 7", b"retry: 10", b"<html>oops</html>", b"data: not json", b"data: 42",
              b"HTTP/1.1 502", b"\xff\xfe", b"data:", b" data: {}", b"event: response.output_text.delta\n<html>"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("delta"), st.sampled_from(["Hi", " error", "\u00e9"])),
                          st.tuples(st.just("odd"), st.sampled_from(range(len(_ODD_LINES))))), max_size=8),
       st.booleans(), st.lists(st.integers(0, 3000), max_size=6), st.booleans())
def test_the_pass_through_tap_refuses_exactly_the_streams_the_sse_guard_refuses(body, named, cuts, one_event_a_read):
    """A passed-through stream's chunks reach the tap unchecked (the tap is its SSE check): a stream with a
    malformed line raises the guard's error, however it is read, and no other stream does."""
    def event(kind: str, **fields: Any) -> bytes:
        line = b"event: " + kind.encode() + b"\n" if named else b""
        return line + b"data: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"
    response = {"id": "resp_up", "status": "in_progress", "output": []}
    each = [event("response.created", response=response)]
    each += [event("response.output_text.delta", delta=v) if kind == "delta" else _ODD_LINES[v] + b"\n\n"
             for kind, v in body]
    each.append(event("response.completed", response={**response, "status": "completed"}))
    wire = b"".join(each)
    try:
        SseGuard("upstream").check(wire)
        refused = None
    except UpstreamProtocolError as exc:
        refused = str(exc)
    bounds = sorted(c % (len(wire) + 1) for c in cuts)
    parts = each if one_event_a_read else [wire[a:b] for a, b in zip([0, *bounds], [*bounds, len(wire)], strict=True)]
    tap = ResponsesTap()
    if refused is None:
        assert [tap.feed(part) for part in parts].count(True) == 1 and tap.response_id == "resp_up"
    else:
        with pytest.raises(UpstreamProtocolError) as raised:
            for part in parts:
                tap.feed(part)
        assert str(raised.value) == refused
