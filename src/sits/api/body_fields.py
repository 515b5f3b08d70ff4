"""What the gateway reads of a validated body on every request: the prompt's text, what the request
needs of a model, its completion budget, the `x-sits-sla-ms` header, the stream's usage option.

Kept apart from `schemas.py` (the pydantic schemas, built once) because these run per request and are
compiled (docs/hot-path.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sits.errors import UnprocessableRequest


def chat_prompt_text(body: Mapping[str, Any]) -> str:
    parts = []
    for m in body["messages"]:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif content:
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "\n".join(parts)


NO_NEEDS: Final[frozenset[str]] = frozenset()
_JSON_FORMATS: Final = ("json_object", "json_schema")
_IMAGE_PARTS: Final = ("image_url", "input_image")


def chat_needs(body: Mapping[str, Any]) -> frozenset[str]:
    """`tools` (tools or functions given), `json` (a JSON response_format), `vision` (an image part)."""
    needs: list[str] = []
    if body.get("tools") or body.get("functions"):
        needs.append("tools")
    response_format = body.get("response_format")
    if response_format and response_format.get("type") in _JSON_FORMATS:
        needs.append("json")
    for m in body["messages"]:
        content = m.get("content")
        if content and not isinstance(content, str) and any(
                isinstance(p, dict) and p.get("type") in _IMAGE_PARTS for p in content):
            needs.append("vision")
            break
    return frozenset(needs) if needs else NO_NEEDS


def max_tokens_of(body: Mapping[str, Any]) -> int:
    """The completion budget the client asked for (0: none), for the context-window filter."""
    asked = body.get("max_completion_tokens") or body.get("max_tokens")
    return asked if type(asked) is int else 0


SLA_HEADER: Final = "x-sits-sla-ms"
_MAX_SLA_MS: Final = 3_600_000.0


def sla_ms_of(headers: Mapping[str, str]) -> float | None:
    """The request's own latency bound (`x-sits-sla-ms`), for the SLA filter; 422 if malformed."""
    text = headers.get(SLA_HEADER)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 < value <= _MAX_SLA_MS:  # NaN fails this too
        raise UnprocessableRequest(f"{SLA_HEADER} must be a number of milliseconds in (0, {_MAX_SLA_MS:g}], "
                                   f"got {text[:40]!r}", param=SLA_HEADER)
    return value


def completion_prompt_text(body: Mapping[str, Any]) -> str:
    prompt = body["prompt"]
    if isinstance(prompt, str):
        return prompt
    return "\n".join(p for p in prompt if isinstance(p, str))


def include_usage(body: Mapping[str, Any]) -> bool:
    """`stream_options.include_usage` of a validated body."""
    options = body.get("stream_options")
    return bool(options and options.get("include_usage"))


def asking_usage(raw: bytes) -> bytes:
    """A chat body without `stream_options` that asks for the stream's usage event: written into the
    client's bytes (not parsed and dumped again), so a keyed stream is settled on the usage its
    upstream counted. The relay takes that event out again (`ChatStreamRelay`, `strip_usage`)."""
    return raw.replace(b"{", b'{"stream_options":{"include_usage":true},', 1)  # the body's own opening brace
