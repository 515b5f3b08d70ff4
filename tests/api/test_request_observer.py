"""Token usage read from an answer's bytes without parsing it: either key order, spaces, one key missing."""

from __future__ import annotations

import pytest

from sits.pipeline.answer import stream_usage_of, usage_of


@pytest.mark.parametrize(("payload", "usage"), [
    (b'{"id":"x","usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}', (12, 5)),
    (b'{"usage": {"prompt_tokens" : 3 ,  "completion_tokens": 40}}', (3, 40)),
    (b'{"usage":{"completion_tokens":7,"total_tokens":9,"prompt_tokens":2}}', (2, 7)),  # other order
    (b'{"usage":{"prompt_tokens":4}}', (4, 0)),
    (b'{"choices":[{"text":"\\"prompt_tokens\\":99"}],"usage":{"completion_tokens":1}}', (0, 1)),
    (b'{"choices":[]}', None),
    (b'{"usage":{"total_tokens":9}}', None),
])
def test_usage_of(payload, usage):
    assert usage_of(payload) == usage


def test_stream_usage_only_from_an_event_that_carries_it():
    assert stream_usage_of(b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}\n\n') == (1, 2)
    assert stream_usage_of(b'data: {"choices":[{"delta":{"content":"usage"}}]}\n\n') is None
