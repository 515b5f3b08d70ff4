"""OpenAI answers (JSON body, SSE events) -> protobuf messages.

Typed fields take the common keys; every other key with a value goes to that level's `extra_json`,
so nothing the model server said is lost. JSON nulls are left out (null and absent mean the same
in the OpenAI API), and `object` is implied by the message type.
"""

from __future__ import annotations

from typing import Any

import orjson

from sits.api.grpc import chat_pb2 as pb
from sits.errors import UpstreamProtocolError

_TOP_KEYS = frozenset({"id", "object", "created", "model", "choices", "usage", "system_fingerprint"})
_CHOICE_KEYS = frozenset({"index", "message", "delta", "finish_reason"})
_MESSAGE_KEYS = frozenset({"role", "content"})
_USAGE_KEYS = frozenset({"prompt_tokens", "completion_tokens", "total_tokens"})
_MAX_SSE_LINE = 4 * 1024 * 1024


def completion_from_body(body: bytes, source: str) -> pb.ChatCompletion:
    """A `chat.completion` JSON body as a ChatCompletion; a body that is not one is a protocol error."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        shown = body[:80].decode("utf-8", "replace")
        raise UpstreamProtocolError(f"upstream {source} answered with a body that is not a chat.completion: {shown!r}")
    out = pb.ChatCompletion(id=_str(data.get("id")), created=_int(data.get("created")), model=_str(data.get("model")),
                            system_fingerprint=_str(data.get("system_fingerprint")), extra_json=_rest(data, _TOP_KEYS))
    for raw in data["choices"]:
        if isinstance(raw, dict):
            choice = out.choices.add(index=_int(raw.get("index")), finish_reason=_str(raw.get("finish_reason")),
                                     extra_json=_rest(raw, _CHOICE_KEYS))
            message = raw.get("message")
            if isinstance(message, dict):
                _fill_message(choice.message, message)
    _fill_usage(out, data.get("usage"))
    return out


def chunk_from_event(data: dict[str, Any]) -> pb.ChatCompletionChunk:
    """One parsed `chat.completion.chunk` event as a ChatCompletionChunk."""
    out = pb.ChatCompletionChunk(id=_str(data.get("id")), created=_int(data.get("created")),
                                 model=_str(data.get("model")), system_fingerprint=_str(data.get("system_fingerprint")),
                                 extra_json=_rest(data, _TOP_KEYS))
    choices = data.get("choices")
    if isinstance(choices, list):
        for raw in choices:
            if isinstance(raw, dict):
                choice = out.choices.add(index=_int(raw.get("index")), finish_reason=_str(raw.get("finish_reason")),
                                         extra_json=_rest(raw, _CHOICE_KEYS))
                delta = raw.get("delta")
                if isinstance(delta, dict):
                    _fill_message(choice.delta, delta)
    _fill_usage(out, data.get("usage"))
    return out


class SseEvents:
    """Splits relayed SSE bytes into `data:` payloads; chunks may cut events anywhere."""

    __slots__ = ("_partial", "_source")

    def __init__(self, source: str) -> None:
        self._partial = b""
        self._source = source

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self._partial + chunk if self._partial else chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > _MAX_SSE_LINE:
            raise UpstreamProtocolError(f"upstream {self._source} sent an SSE line over {_MAX_SSE_LINE} bytes")
        return [line[5:].strip() for line in lines if line.startswith(b"data:")]


def _fill_message(target: pb.AssistantMessage | pb.Delta, raw: dict[str, Any]) -> None:
    role, content = raw.get("role"), raw.get("content")
    if isinstance(role, str):
        target.role = role
    if isinstance(content, str):
        target.content = content
    rest = {k: v for k, v in raw.items() if v is not None and (k not in _MESSAGE_KEYS or not isinstance(v, str))}
    if rest:  # includes a non-text `content` (parts), kept rather than dropped
        target.extra_json = orjson.dumps(rest).decode()


def _fill_usage(target: pb.ChatCompletion | pb.ChatCompletionChunk, usage: Any) -> None:
    if isinstance(usage, dict):
        target.usage.prompt_tokens = _int(usage.get("prompt_tokens"))
        target.usage.completion_tokens = _int(usage.get("completion_tokens"))
        target.usage.total_tokens = _int(usage.get("total_tokens"))
        target.usage.extra_json = _rest(usage, _USAGE_KEYS)


def _rest(raw: dict[str, Any], known: frozenset[str]) -> str:
    rest = {k: v for k, v in raw.items() if k not in known and v is not None}
    return orjson.dumps(rest).decode() if rest else ""


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and -2**63 <= value < 2**63:
        return int(value)
    return 0
