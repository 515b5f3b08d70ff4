"""The gRPC door's codecs and status mapping, table-driven; the end-to-end behaviour is in tests/api/test_grpc.py."""

from __future__ import annotations

import grpc
import lz4.frame
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sits.api.grpc import chat_pb2 as pb
from sits.api.grpc import lz4_messages
from sits.api.grpc.request_codec import request_body
from sits.api.grpc.response_codec import SseEvents, chunk_from_event, completion_from_body
from sits.api.grpc.status_codes import grpc_status
from sits.errors import (
    ContextTooLong,
    Forbidden,
    InvalidRequest,
    ModelNotFound,
    Overloaded,
    PayloadTooLarge,
    SitsError,
    Unauthorized,
    UnprocessableRequest,
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeout,
)

HI = pb.ChatMessage(role="user", content="hi")


def body_of(request: pb.ChatCompletionRequest, stream: bool = False) -> dict:
    return orjson.loads(request_body(request, stream))


def test_only_fields_the_client_set_reach_the_body():
    assert body_of(pb.ChatCompletionRequest(model="m", messages=[HI])) == {
        "model": "m", "messages": [{"role": "user", "content": "hi"}]}
    zero = body_of(pb.ChatCompletionRequest(model="m", messages=[HI], temperature=0.0, seed=0, user=""))
    assert (zero["temperature"], zero["seed"], zero["user"]) == (0.0, 0, "")  # set to zero is still set


def test_extra_json_is_merged_and_typed_fields_keep_their_json_types():
    body = body_of(pb.ChatCompletionRequest(
        model="m", messages=[pb.ChatMessage(role="tool", content="42", extra_json='{"tool_call_id": "c1"}')],
        max_tokens=5, top_p=0.5, stop=["a", "b"], extra_json='{"response_format": {"type": "json_object"}}'),
        stream=True)
    assert body == {"model": "m", "messages": [{"role": "tool", "content": "42", "tool_call_id": "c1"}],
                    "max_tokens": 5, "top_p": 0.5, "stop": ["a", "b"],
                    "response_format": {"type": "json_object"}, "stream": True}


def test_include_usage_joins_stream_options_from_extra_json_and_only_for_streams():
    request = pb.ChatCompletionRequest(model="m", messages=[HI], include_usage=True,
                                       extra_json='{"stream_options": {"continuous_usage_stats": true}}')
    assert body_of(request, stream=True)["stream_options"] == {"continuous_usage_stats": True, "include_usage": True}
    assert body_of(request)["stream_options"] == {"continuous_usage_stats": True}


@pytest.mark.parametrize(("request_message", "param"), [
    (pb.ChatCompletionRequest(model="m", extra_json="[1]"), "extra_json"),
    (pb.ChatCompletionRequest(model="m", extra_json='{"model": "x"}'), "extra_json.model"),
    (pb.ChatCompletionRequest(model="m", messages=[pb.ChatMessage(role="user", extra_json="{")]),
     "messages[0].extra_json"),
    (pb.ChatCompletionRequest(model="m", include_usage=True, extra_json='{"stream_options": 3}'),
     "extra_json.stream_options"),
])
def test_bad_grpc_only_fields_name_themselves(request_message, param):
    with pytest.raises(InvalidRequest) as info:
        request_body(request_message, stream=True)
    assert info.value.param == param


def test_completion_keeps_every_key_the_model_server_sent():
    body = orjson.dumps({
        "id": "c", "object": "chat.completion", "created": 7, "model": "m", "service_tier": "default",
        "choices": [{"index": 0, "logprobs": None, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": None, "refusal": None,
                                 "tool_calls": [{"id": "t", "type": "function"}]}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                  "prompt_tokens_details": {"cached_tokens": 1}},
    })
    completion = completion_from_body(body, "ep")
    assert (completion.id, completion.created, completion.model) == ("c", 7, "m")
    assert orjson.loads(completion.extra_json) == {"service_tier": "default"}
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.extra_json == ""  # null logprobs left out
    assert not choice.message.HasField("content")
    assert orjson.loads(choice.message.extra_json) == {"tool_calls": [{"id": "t", "type": "function"}]}
    assert orjson.loads(completion.usage.extra_json) == {"prompt_tokens_details": {"cached_tokens": 1}}


def test_content_parts_in_a_delta_are_kept_not_dropped():
    chunk = chunk_from_event({"id": "c", "created": 1.0, "choices": [
        {"index": 1, "delta": {"content": [{"type": "text", "text": "x"}]}, "finish_reason": None}]})
    assert chunk.created == 1 and chunk.choices[0].index == 1
    assert not chunk.choices[0].delta.HasField("content")
    assert orjson.loads(chunk.choices[0].delta.extra_json) == {"content": [{"type": "text", "text": "x"}]}


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"error": {"message": "x"}}', b'{"created": 1e400}'])
def test_a_body_that_is_not_a_completion_is_a_protocol_error(body):
    with pytest.raises(UpstreamProtocolError):
        completion_from_body(body, "ep")


STREAM = b"".join([b'data: {"id":"a"}\n\n', b": keep-alive\n\n", b'event: x\ndata: {"id":"b"}\r\n\r\n',
                   b"data: [DONE]\n\n"])


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_sse_events_are_the_same_however_the_bytes_are_cut(cuts):
    events, found, start = SseEvents("ep"), [], 0
    for cut in sorted(cuts) + [len(STREAM)]:
        found += events.feed(STREAM[start:cut])
        start = cut
    assert found == [b'{"id":"a"}', b'{"id":"b"}', b"[DONE]"]


@pytest.mark.parametrize(("error", "code"), [
    (InvalidRequest("x", param="p"), grpc.StatusCode.INVALID_ARGUMENT),
    (UnprocessableRequest("x"), grpc.StatusCode.INVALID_ARGUMENT),
    (ContextTooLong("x"), grpc.StatusCode.INVALID_ARGUMENT),
    (Unauthorized("x"), grpc.StatusCode.UNAUTHENTICATED),
    (Forbidden("x"), grpc.StatusCode.PERMISSION_DENIED),
    (ModelNotFound("x"), grpc.StatusCode.NOT_FOUND),
    (PayloadTooLarge("x"), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Overloaded("x", http_status=429, code="shed"), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Overloaded("x"), grpc.StatusCode.UNAVAILABLE),
    (UpstreamError("x"), grpc.StatusCode.UNAVAILABLE),
    (UpstreamConnectError("x"), grpc.StatusCode.UNAVAILABLE),
    (UpstreamStatusError("x", upstream_status=500, body=b"boom"), grpc.StatusCode.UNAVAILABLE),
    (UpstreamStatusError("x", upstream_status=429, body=b"busy"), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (UpstreamStatusError("x", upstream_status=404, body=b'{"error": {"message": "m"}}'), grpc.StatusCode.NOT_FOUND),
    (UpstreamProtocolError("x"), grpc.StatusCode.INTERNAL),
    (UpstreamTimeout("x"), grpc.StatusCode.DEADLINE_EXCEEDED),
    (SitsError("x"), grpc.StatusCode.INTERNAL),
])
def test_every_error_class_has_a_grpc_status(error, code):
    status = grpc_status(error)
    assert status.code == code
    metadata = dict(status.trailing_metadata)
    assert metadata["sits-http-status"].isdigit()
    assert all(v.isascii() and v.isprintable() for v in metadata.values())


def test_status_message_and_metadata_are_the_http_error_objects():
    status = grpc_status(Overloaded("no endpoint of model 'm' is available", headers=(("retry-after", "1"),)))
    assert status.message == "no endpoint of model 'm' is available"
    assert dict(status.trailing_metadata) == {"sits-http-status": "503", "sits-error-type": "overloaded_error",
                                              "sits-error-code": "overloaded", "retry-after": "1"}


def test_lz4_frames_round_trip_and_bad_ones_name_the_field():
    data = b"prompt text " * 1000
    assert lz4_messages.decompress(lz4_messages.compress(data), len(data), "f") == data
    with pytest.raises(PayloadTooLarge):
        lz4_messages.decompress(lz4_messages.compress(data), len(data) - 1, "f")
    with pytest.raises(InvalidRequest, match="truncated"):
        lz4_messages.decompress(lz4.frame.compress(data)[:-10], len(data), "f")
    with pytest.raises(InvalidRequest) as info:
        lz4_messages.decompress(b"garbage", 100, "lz4_request")
    assert info.value.param == "lz4_request"
