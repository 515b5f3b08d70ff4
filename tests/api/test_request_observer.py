"""Token usage read from an answer's bytes without parsing it (and from a parsed one, the same): either key
order, spaces, one key missing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sits.pipeline.answer import counts_of, stream_usage_of, usage_of


@pytest.mark.parametrize(("payload", "usage"), [
    (b'{"id":"x","usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}', (12, 5)),
    (b'{"usage": {"prompt_tokens" : 3 ,  "completion_tokens": 40}}', (3, 40)),
    (b'{"usage":{"completion_tokens":7,"total_tokens":9,"prompt_tokens":2}}', (2, 7)),  # other order
    (b'{"usage":{"prompt_tokens":4}}', (4, 0)),
    (b'{"choices":[{"text":"\\"prompt_tokens\\":99"}],"usage":{"completion_tokens":1}}', (0, 1)),
    (b'{"choices":[]}', None),
    (b'{"usage":{"total_tokens":9}}', None),
    (b'{"usage":{"prompt_tokens":123456789012345678901,"completion_tokens":0}}', (123456789012345678901, 0)),
])
def test_usage_of(payload, usage):
    assert usage_of(payload) == usage
    assert counts_of(json.loads(payload)) == usage  # the same counts from the parsed answer


@pytest.mark.parametrize(("payload", "usage"), [
    (b'{"usage":{"prompt_tokens":12,"completion_tokens":5', (12, 5)),  # cut short: not read by position
    (b'{"usage":{"prompt_tokens":,"completion_tokens":5}}', (0, 5)),  # no digits: not read by position
    (b'{"usage":{"prompt_tokens":12,"completion_tokens":}', (12, 0)),
])
def test_usage_of_a_usage_that_is_not_json(payload, usage):
    assert usage_of(payload) == usage


def test_stream_usage_only_from_an_event_that_carries_it():
    assert stream_usage_of(b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}\n\n') == (1, 2)
    assert stream_usage_of(b'data: {"choices":[{"delta":{"content":"usage"}}]}\n\n') is None


@given(prompt=st.integers(0, 10**9), completion=st.integers(0, 10**9), indent=st.sampled_from([None, 1]),
       order=st.booleans(), details=st.booleans(), last=st.booleans())
def test_usage_of_reads_what_json_says(prompt, completion, indent, order, details, last):
    """Compact (read by position) or spaced (by regex), either key order, with or without more keys."""
    usage = {"prompt_tokens": prompt, "completion_tokens": completion} if order else \
        {"completion_tokens": completion, "prompt_tokens": prompt}
    if details:
        usage["prompt_tokens_details"] = {"cached_tokens": 1}
    usage["total_tokens"] = prompt + completion
    answer = {"choices": [{"message": {"content": '"usage":{"prompt_tokens":5'}}], "usage": usage}
    if not last:
        answer = {"usage": usage, "id": "x"}
    payload = json.dumps(answer, indent=indent, separators=(",", ":") if indent is None else None).encode()
    assert usage_of(payload) == (prompt, completion)
    assert counts_of(answer) == (prompt, completion)
