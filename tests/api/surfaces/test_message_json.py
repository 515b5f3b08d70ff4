"""A chat completion written as an Anthropic `message`: the template for an answer of text alone gives the
same bytes as the message object dumped, for any text, model, finish, stop sequence and usage."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from sits.translate.messages import message_json, message_object

USAGES = st.one_of(
    st.none(),
    st.fixed_dictionaries({"prompt_tokens": st.integers(0, 10**6), "completion_tokens": st.integers(0, 10**6)}),
    st.fixed_dictionaries({"prompt_tokens": st.integers(0, 10**6), "completion_tokens": st.integers(0, 10**6),
                           "prompt_tokens_details": st.fixed_dictionaries({"cached_tokens": st.integers(0, 10**6)}),
                           "completion_tokens_details": st.fixed_dictionaries(
                               {"reasoning_tokens": st.integers(0, 1000)})}),
)
MESSAGES = st.one_of(
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.text()}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.text(min_size=1),
                           "reasoning_content": st.text()}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.one_of(st.none(), st.text()),
                           "tool_calls": st.lists(st.fixed_dictionaries({
                               "id": st.text(max_size=8), "type": st.just("function"),
                               "function": st.fixed_dictionaries({"name": st.text(max_size=8),
                                                                  "arguments": st.just('{"a": 1}')})}), max_size=2)}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.text(min_size=1),
                           "thinking_blocks": st.just([{"type": "thinking", "thinking": "x", "signature": "s"}])}),
)


@settings(max_examples=300, deadline=None)
@given(text_message=MESSAGES, model=st.text(max_size=20), answered=st.one_of(st.none(), st.text(max_size=20)),
       finish=st.sampled_from([None, "stop", "length", "tool_calls", "content_filter"]),
       stop=st.one_of(st.none(), st.text(max_size=5)), sequences=st.one_of(st.none(), st.lists(st.text(max_size=5))),
       usage=USAGES)
def test_the_template_writes_what_the_message_object_dumps(text_message, model, answered, finish, stop, sequences,
                                                           usage):
    choice = {"index": 0, "message": text_message, "finish_reason": finish}
    if stop is not None:
        choice["stop_reason"] = stop
    completion = {"id": "chatcmpl-1", "object": "chat.completion", "choices": [choice]}
    if answered is not None:
        completion["model"] = answered
    if usage is not None:
        completion["usage"] = usage
    expected = orjson.dumps(message_object(completion, "msg_0a", model, sequences))
    assert message_json(completion, "msg_0a", model, sequences) == expected
