"""Rebuilding the partial answer from relayed SSE chunks, and the request that continues it."""

from __future__ import annotations

import orjson

from sits.pipeline.stream_resume import partial_answer, resume_body


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
