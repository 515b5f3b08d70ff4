"""Rebuilding the partial answer from relayed SSE chunks, and the request that continues it; the text a
stream generated, read back for a stream that reported no usage."""

from __future__ import annotations

import json

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from sits.pipeline.stream_resume import generated_text, partial_answer, resume_body


def event(payload: dict) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def delta(text: str | None, index: int = 0, role: str | None = None) -> bytes:
    d: dict = {}
    if role:
        d["role"] = role
    if text is not None:
        d["content"] = text
    return event({"object": "chat.completion.chunk", "choices": [{"index": index, "delta": d}]})


def test_partial_answer_reads_content_deltas_even_when_events_are_cut_across_chunks():
    stream = delta(None, role="assistant") + delta("The answer") + delta(" is") + delta(" 42", index=1)
    cut = len(delta(None, role="assistant")) + 9  # inside the second event
    chunks = [stream[:cut], stream[cut:], b"data: <html>garbage\n\n", delta(" forty")[:20]]
    assert partial_answer(chunks) == "The answer is"  # choice 1 and an unfinished event are left out


def test_resume_body_appends_the_partial_answer_and_shrinks_the_budget():
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100,
                         "stream": True, "temperature": 0.2})
    continued = orjson.loads(resume_body(body, "The answer is", "m", None))
    assert continued["messages"][-1] == {"role": "assistant", "content": "The answer is"}
    assert continued["continue_final_message"] is True and continued["add_generation_prompt"] is False
    assert continued["max_tokens"] == 100 - 4  # 13 characters: 4 estimated tokens
    assert continued["stream"] is True and continued["temperature"] == 0.2


def test_nothing_to_resume():
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    assert resume_body(body, "", "m", None) is None  # nothing sent yet: a plain retry is right
    assert resume_body(body, "a long partial answer", "m", None) is None  # the budget is spent
    several = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2})
    assert resume_body(several, "partial", "m", None) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["content", "reasoning_content", "arguments"]), st.text(max_size=12)),
                max_size=8),
       st.booleans(), st.lists(st.integers(0, 3000), max_size=6))
def test_generated_text_is_what_each_event_says_whatever_the_text_and_the_cuts(pieces, spaced, cuts):
    def event(field: str, text: str) -> bytes:
        delta: dict = ({"tool_calls": [{"index": 0, "function": {"arguments": text}}]} if field == "arguments"
                       else {field: text})
        payload = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        raw = json.dumps(payload) if spaced else json.dumps(payload, separators=(",", ":"))  # both ways servers write
        return b"data: " + raw.encode() + b"\n\n"
    wire = event("content", "") + b"".join(event(f, t) for f, t in pieces) + b"data: [DONE]\n\n"
    bounds = sorted(c % (len(wire) + 1) for c in cuts)
    chunks = [wire[a:b] for a, b in zip([0, *bounds], [*bounds, len(wire)], strict=True)]
    assert generated_text(chunks) == "".join(t for _, t in pieces)
