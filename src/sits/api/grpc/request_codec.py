"""ChatCompletionRequest (protobuf) -> the JSON body POST /v1/chat/completions would have received.

The gRPC door builds the same body and validates it with the same schema as the HTTP door, so a bad
field gets the same message (`invalid value for 'temperature': ...`). Typed fields cover the common
parameters; `extra_json` carries every other one unchanged, so nothing a client sends is dropped.
"""

from __future__ import annotations

from typing import Any

import orjson

from sits.api.grpc import chat_pb2 as pb
from sits.errors import InvalidRequest

# Typed optional scalars: present in the body only when the client set them.
_OPTIONAL_FIELDS = ("max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "seed",
                    "presence_penalty", "frequency_penalty", "user")


def request_body(request: pb.ChatCompletionRequest, stream: bool) -> bytes:
    """The OpenAI JSON body for `request`; raises InvalidRequest naming the offending field."""
    body: dict[str, Any] = _extra(request.extra_json, "extra_json")
    if "stream" in body:
        raise InvalidRequest("'stream' is chosen by the RPC (Create or CreateStream), not by extra_json",
                             param="extra_json.stream")
    typed: dict[str, Any] = {}
    if request.model:
        typed["model"] = request.model
    if request.messages:
        typed["messages"] = [_message(m, i) for i, m in enumerate(request.messages)]
    for name in _OPTIONAL_FIELDS:
        if request.HasField(name):
            typed[name] = getattr(request, name)
    if request.stop:
        typed["stop"] = list(request.stop)
    if stream and request.include_usage:  # a unary answer always has its usage
        options = body.pop("stream_options", None) or {}
        if not isinstance(options, dict):
            raise InvalidRequest("'extra_json.stream_options' must be a JSON object",
                                 param="extra_json.stream_options")
        typed["stream_options"] = {**options, "include_usage": True}
    _no_overlap(body, typed, "extra_json")
    body.update(typed)
    if stream:
        body["stream"] = True
    return orjson.dumps(body)


def _message(message: pb.ChatMessage, index: int) -> dict[str, Any]:
    where = f"messages[{index}].extra_json"
    out: dict[str, Any] = _extra(message.extra_json, where)
    typed: dict[str, Any] = {}
    if message.role:
        typed["role"] = message.role
    if message.HasField("content"):
        typed["content"] = message.content
    if message.HasField("name"):
        typed["name"] = message.name
    _no_overlap(out, typed, where)
    out.update(typed)
    return out


def _extra(raw: str, where: str) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"'{where}' is not valid JSON: {exc}", param=where, code="invalid_json") from None
    if not isinstance(value, dict):
        raise InvalidRequest(f"'{where}' must be a JSON object", param=where, code="invalid_json")
    return value


def _no_overlap(extra: dict[str, Any], typed: dict[str, Any], where: str) -> None:
    for key in typed:
        if key in extra:
            raise InvalidRequest(f"'{key}' is set both as a field and in '{where}'; give it once",
                                 param=f"{where}.{key}")
