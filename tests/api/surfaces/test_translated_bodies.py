"""A Responses or Messages create body that its surface accepts translates to a valid chat body: the
request path routes the translation without validating it again (`api/surface_path.py`), so the
translators must check what every chat field needs. Property tests over bodies that mix well-formed
and malformed fields: each either is refused with an error naming a field, or becomes a chat body that
the chat schema accepts unchanged."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sits.api.schemas import CHAT_COMPLETION
from sits.errors import InvalidRequest
from sits.translate import messages as messages_wire
from sits.translate import responses as responses_wire

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# JSON values as orjson reads them from a client (no NaN or infinities: JSON has none)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(-3, 3, allow_nan=False),
                    st.sampled_from(["", "x", "hello"]))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "type", "text"]), inner, max_size=3)),
    max_leaves=6)
texts = st.sampled_from(["", "hi", "a longer text"])
numbers = st.one_of(st.sampled_from([0, 1, 2, 0.0, 0.5, 1.0, 1.5, 2.0, -0.5, 2.5]), st.floats(-1, 3, allow_nan=False))


def mostly(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`good` mostly, now and then any JSON value."""
    return st.sampled_from(range(16)).flatmap(lambda n: json_values if n == 15 else good)


def maybe(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts holding any subset of `fields`, each mostly well-formed (`mostly`): most bodies get far
    enough to be translated, and the translations meet the odd value in every field."""
    return st.fixed_dictionaries({}, optional={name: mostly(value) for name, value in fields.items()})


def needs(required: dict[str, st.SearchStrategy[Any]], optional: st.SearchStrategy[dict[str, Any]]
          ) -> st.SearchStrategy[dict[str, Any]]:
    """A body with the `required` fields (each mostly well-formed) and some `optional` ones."""
    return st.tuples(st.fixed_dictionaries({name: mostly(value) for name, value in required.items()}),
                     optional).map(lambda pair: {**pair[0], **pair[1]})


# -- Messages --------------------------------------------------------------------------------------

text_blocks = st.lists(mostly(maybe(type=st.just("text"), text=texts)), max_size=2)
blocks = mostly(st.one_of(
    maybe(type=st.just("text"), text=texts),
    maybe(type=st.just("image"), source=maybe(type=st.sampled_from(["base64", "url", "file"]), media_type=texts,
                                              data=texts, url=texts)),
    maybe(type=st.just("tool_use"), id=texts, name=texts, input=json_values),
    maybe(type=st.just("tool_result"), tool_use_id=texts, content=st.one_of(texts, text_blocks),
          is_error=st.booleans()),
    maybe(type=st.sampled_from(["thinking", "redacted_thinking"]), thinking=texts, signature=texts),
    maybe(type=st.sampled_from(["video", "document"])),
))
anthropic_messages = st.lists(mostly(needs({"role": st.sampled_from(["user", "assistant"] * 3 + ["system"]),
                                            "content": st.one_of(texts, st.lists(blocks, max_size=3))}, st.just({}))),
                              min_size=1, max_size=3)
messages_bodies = needs({"model": st.sampled_from(["m1"] * 7 + [""]), "max_tokens": st.sampled_from([1, 16, 64, 100]),
                         "messages": anthropic_messages}, maybe(
    system=st.one_of(texts, text_blocks),
    temperature=numbers, top_p=numbers, top_k=st.integers(0, 50),
    stop_sequences=st.lists(texts, max_size=2),
    metadata=maybe(user_id=st.one_of(texts, st.none())),
    tools=st.lists(mostly(maybe(name=texts, type=st.sampled_from(["custom", "bash"]), input_schema=json_values,
                                description=texts)), max_size=2),
    tool_choice=maybe(type=st.sampled_from(["auto", "any", "tool", "none", "maybe"]), name=texts,
                      disable_parallel_tool_use=st.booleans()),
    thinking=maybe(type=st.just("enabled"), budget_tokens=st.integers(0, 2048)),
    stream=st.booleans(),
))


@SETTINGS
@given(body=messages_bodies)
def test_a_messages_body_is_refused_naming_a_field_or_translated_to_a_valid_chat_body(body):
    def translate(checked: dict[str, Any]) -> dict[str, Any]:
        return messages_wire.chat_request(checked, checked.get("stream") is True)

    refused_or_valid(messages_wire.validate, translate, body)


def refused_or_valid(validate: Any, translate: Any, body: Any) -> None:
    """`body` is refused with an error naming a field, or translates to a chat body the chat schema
    accepts unchanged."""
    try:
        chat = translate(validate(body))
    except InvalidRequest as exc:
        assert exc.param
        event("refused")
        return
    event("translated")
    assert CHAT_COMPLETION.parse(orjson.dumps(chat)) == chat


# -- Responses -------------------------------------------------------------------------------------

parts = mostly(st.one_of(
    maybe(type=st.sampled_from(["input_text", "output_text", "text"]), text=texts),
    maybe(type=st.just("refusal"), refusal=texts),
    maybe(type=st.just("input_image"), image_url=texts, detail=texts),
    maybe(type=st.sampled_from(["input_file", "audio"])),
))
items = mostly(st.one_of(
    maybe(type=st.just("message"), role=st.sampled_from(["user", "assistant", "system", "developer", "tool"]),
          content=st.one_of(texts, st.lists(parts, max_size=3))),
    maybe(role=st.sampled_from(["user", "assistant"]), content=st.one_of(texts, st.lists(parts, max_size=2))),
    maybe(type=st.just("function_call"), call_id=texts, name=texts, arguments=texts),
    maybe(type=st.just("function_call_output"), call_id=texts, output=json_values),
    maybe(type=st.sampled_from(["reasoning", "computer_call"]), summary=json_values),
))
history = st.sampled_from([[], [{"role": "user", "content": "before"}, {"role": "assistant", "content": "ok"}]])
responses_bodies = needs({"model": st.sampled_from(["m1"] * 7 + [""]),
                          "input": st.one_of(texts, st.lists(items, max_size=3))}, maybe(
    instructions=texts,
    temperature=numbers, top_p=numbers, seed=st.integers(-5, 5),
    user=texts,
    max_output_tokens=st.sampled_from([1, 16, 64, 100]),
    parallel_tool_calls=st.booleans(),
    stream=st.booleans(),
    store=st.booleans(),
    tools=st.lists(mostly(maybe(type=st.sampled_from(["function", "web_search"]), name=texts,
                                parameters=json_values, description=texts, strict=st.booleans())), max_size=2),
    tool_choice=st.one_of(st.sampled_from(["auto", "none", "required", "sometimes"]),
                          maybe(type=st.sampled_from(["function", "file_search"]), name=texts)),
    text=maybe(format=maybe(type=st.sampled_from(["text", "json_object", "json_schema", "yaml"]), name=texts,
                            schema=json_values, strict=st.booleans(), description=texts)),
))


@SETTINGS
@given(body=responses_bodies, earlier=history)
def test_a_responses_body_is_refused_naming_a_field_or_translated_to_a_valid_chat_body(body, earlier):
    def translate(checked: dict[str, Any]) -> dict[str, Any]:
        return responses_wire.chat_request(checked, earlier, checked.get("stream") is True)[0]

    refused_or_valid(responses_wire.validate, translate, body)


plain_bodies = needs({"model": st.sampled_from(["m1"] * 7 + [""]),
                      "input": st.one_of(texts, st.lists(items, max_size=3))},
                     maybe(stream=st.booleans(), store=st.booleans()))


def _outcome(step, *args):
    try:
        return step(*args)
    except InvalidRequest as exc:
        return ("refused", exc.param, exc.message)


@SETTINGS
@given(body=plain_bodies, earlier=history)
def test_a_plain_responses_body_takes_the_short_way_to_the_same_result(body, earlier):
    """A body of model, input, stream and store alone skips the reads of every other field: each step
    gives what it gives the same body with one more (ignored) field, which goes the long way."""
    longer = {**body, "unknown_extra": None}
    assert responses_wire.plain(body) and not responses_wire.plain(longer)
    assert _outcome(lambda b: responses_wire.validate(b) is b, body) == \
        _outcome(lambda b: responses_wire.validate(b) is b, longer)
    assert _outcome(responses_wire.chat_request, body, earlier, True) == \
        _outcome(responses_wire.chat_request, longer, earlier, True)
    assert responses_wire.response_fields(body) == responses_wire.response_fields(longer)


@SETTINGS
@given(body=plain_bodies)
def test_a_plain_requests_fields_are_written_as_the_long_way_writes_them(body):
    assert responses_wire.fields_json(body) == responses_wire.fields_json({**body, "unknown_extra": None})


@SETTINGS
@given(body=plain_bodies, text=texts, finish=st.sampled_from(["stop", "length", None]),
       usage=st.one_of(st.none(), st.just({}), st.just({"prompt_tokens": 3, "completion_tokens": 5}),
                       st.just({"prompt_tokens": 3, "completion_tokens": 5,
                                "prompt_tokens_details": {"cached_tokens": 2},
                                "completion_tokens_details": {"reasoning_tokens": 1}})),
       calls=st.lists(st.tuples(st.sampled_from(["c1", "c2"]), st.sampled_from(["f", "g"]),
                                st.sampled_from(["", "{}", '{"a": "\\"x\\""}'])), max_size=2))
def test_a_response_object_is_written_as_the_api_documents_it(body, text, finish, usage, calls):
    """Written from byte templates: the members and their order as the API documents them (built here
    from the documentation's field list), the same for a plain body as for one that goes the long way."""
    completion = {"model": "m1", "choices": [{"index": 0, "finish_reason": finish, "message": {
        "role": "assistant", "content": text,
        **({"tool_calls": [{"id": c, "type": "function", "function": {"name": n, "arguments": a}}
                           for c, n, a in calls]} if calls else {})}}],
        **({"usage": usage} if usage is not None else {})}
    written, message = responses_wire.from_chat_completion(completion, "resp_1", 7, body)
    longer, _ = responses_wire.from_chat_completion(completion, "resp_1", 7, {**body, "unknown_extra": None})
    assert written == longer
    status = "incomplete" if finish == "length" else "completed"
    output: list[dict[str, Any]] = []
    if text or not calls:
        output.append({"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
    output += [{"type": "function_call", "id": f"fc_1_{i}", "call_id": c, "name": n, "arguments": a,
                "status": "completed"} for i, (c, n, a) in enumerate(calls)]
    counts = usage or {}
    cached = (counts.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    reasoning = (counts.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)
    expected = {"id": "resp_1", "object": "response", "created_at": 7, "status": status, "model": "m1",
                "output": output, "error": None,
                "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
                **responses_wire.response_fields(body),
                "usage": {"input_tokens": counts.get("prompt_tokens", 0), "input_tokens_details": {"cached_tokens": cached},
                          "output_tokens": counts.get("completion_tokens", 0),
                          "output_tokens_details": {"reasoning_tokens": reasoning},
                          "total_tokens": counts.get("prompt_tokens", 0) + counts.get("completion_tokens", 0)}}
    assert list(orjson.loads(written).items()) == list(expected.items())
    assert message == responses_wire.assistant_message(text, calls)
