"""Cached answers in and out: build a `CachedCompletion` from a successful upstream answer
(JSON body or relayed SSE stream), and render one back as an OpenAI JSON body or SSE replay.

What may be stored is decided here, once: a single choice of plain text that ended with
finish_reason "stop" or "length" and, for streams, with `data: [DONE]`. Error bodies, error
events, cut streams, tool calls, refusals and several choices give None and are never stored.

Every rendered answer says where it came from: a top-level `sits_cache` field
({"match": "exact"|"semantic", "similarity": float}) that OpenAI clients ignore, and the
`x-sits-cache` header value from `cache_header`.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

from sits.state.semantic_cache import CachedCompletion, CacheHit

STORABLE_FINISH = frozenset({"stop", "length"})
_REPLAY_CHARS = 256  # content per replayed chunk: many small events cost more than they show
_KINDS: dict[str, Literal["chat", "text"]] = {"/chat/completions": "chat", "/completions": "text"}
_JSON_OBJECT = {"chat": "chat.completion", "text": "text_completion"}
_CHUNK_OBJECT = {"chat": "chat.completion.chunk", "text": "text_completion"}


def kind_of(api: str) -> Literal["chat", "text"] | None:
    return _KINDS.get(api)


def cache_header(hit: CacheHit) -> tuple[bytes, bytes]:
    return b"x-sits-cache", f"hit; match={hit.match}; similarity={hit.similarity:.4f}".encode()


def render_completion(hit: CacheHit, request_id: str) -> bytes:
    """The cached answer as a complete `chat.completion` / `text_completion` body."""
    c = hit.completion
    if c.kind == "chat":
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": c.content},
                                  "logprobs": None, "finish_reason": c.finish_reason}
    else:
        choice = {"index": 0, "text": c.content, "logprobs": None, "finish_reason": c.finish_reason}
    body = _envelope(hit, request_id, _JSON_OBJECT[c.kind])
    body["choices"] = [choice]
    usage = _usage(c)
    if usage is not None:
        body["usage"] = usage
    return orjson.dumps(body)


def render_sse(hit: CacheHit, request_id: str, *, include_usage: bool = False) -> list[bytes]:
    """The cached answer as SSE events: role, content in pieces, finish, [usage], [DONE]."""
    c = hit.completion
    pieces = [c.content[i : i + _REPLAY_CHARS] for i in range(0, len(c.content), _REPLAY_CHARS)]
    if c.kind == "chat":
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": p} for p in pieces]
        choices = [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None} for d in deltas]
        choices.append({"index": 0, "delta": {}, "logprobs": None, "finish_reason": c.finish_reason})
    else:
        choices = [{"index": 0, "text": p, "logprobs": None, "finish_reason": None} for p in pieces]
        choices.append({"index": 0, "text": "", "logprobs": None, "finish_reason": c.finish_reason})
    events = []
    for choice in choices:
        chunk = _envelope(hit, request_id, _CHUNK_OBJECT[c.kind])
        chunk["choices"] = [choice]
        events.append(_event(chunk))
    usage = _usage(c)
    if include_usage and usage is not None:
        chunk = _envelope(hit, request_id, _CHUNK_OBJECT[c.kind])
        chunk["choices"], chunk["usage"] = [], usage
        events.append(_event(chunk))
    events.append(b"data: [DONE]\n\n")
    return events


def completion_from_json(api: str, body: bytes) -> CachedCompletion | None:
    """A storable answer from a non-streaming response body, or None."""
    kind = kind_of(api)
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if kind is None or not isinstance(data, dict) or data.get("error"):
        return None
    choices = data.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    if kind == "chat":
        message = choice.get("message")
        if not isinstance(message, dict) or message.get("tool_calls") or message.get("function_call") \
                or message.get("refusal"):
            return None
        content = message.get("content")
    else:
        content = choice.get("text")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return _completion(kind, data.get("model"), content, choice.get("finish_reason"), data.get("created"),
                       usage, data.get("system_fingerprint"))


class CompletionAccumulator:
    """Rebuilds the answer from the upstream SSE bytes as they are relayed.

    Feed every chunk; `result()` is the storable answer once the stream ended with [DONE],
    or None. Anything unexpected (error event, tool call, second choice, too long) poisons it.
    """

    __slots__ = ("_kind", "_max_chars", "_buffer", "_parts", "_chars", "_finish", "_model", "_created",
                 "_fingerprint", "_usage", "_done", "_poisoned")

    def __init__(self, api: str, max_chars: int = 1_000_000) -> None:
        kind = kind_of(api)
        self._kind: Literal["chat", "text"] = kind or "chat"
        self._max_chars = max_chars
        self._buffer = b""
        self._parts: list[str] = []
        self._chars = 0
        self._finish: Any = None
        self._model: Any = None
        self._created: Any = None
        self._fingerprint: Any = None
        self._usage: dict[str, Any] = {}
        self._done = False
        self._poisoned = kind is None

    def feed(self, chunk: bytes) -> None:
        if self._poisoned:
            return
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        if len(self._buffer) > self._max_chars:
            self._poisoned = True
            return
        for line in lines:
            line = line.rstrip(b"\r")
            if line.startswith(b"event:") and line[6:].strip() == b"error":
                self._poisoned = True
            elif line.startswith(b"data:"):
                self._data(line[5:].strip())

    def result(self) -> CachedCompletion | None:
        if self._poisoned or not self._done:
            return None
        return _completion(self._kind, self._model, "".join(self._parts), self._finish, self._created,
                           self._usage, self._fingerprint)

    def _data(self, payload: bytes) -> None:
        if payload == b"[DONE]":
            self._done = True
            return
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self._poisoned = True
            return
        if self._done or not isinstance(event, dict) or event.get("error"):
            self._poisoned = True
            return
        self._model = self._model or event.get("model")
        self._created = self._created or event.get("created")
        self._fingerprint = self._fingerprint or event.get("system_fingerprint")
        if isinstance(event.get("usage"), dict):
            self._usage = event["usage"]
        for choice in event.get("choices") or ():
            self._choice(choice)

    def _choice(self, choice: Any) -> None:
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            self._poisoned = True
            return
        if self._kind == "chat":
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict) or delta.get("tool_calls") or delta.get("function_call") or delta.get("refusal"):
                self._poisoned = True
                return
            text = delta.get("content")
        else:
            text = choice.get("text")
        if isinstance(text, str) and text:
            self._parts.append(text)
            self._chars += len(text)
            if self._chars > self._max_chars:
                self._poisoned = True
        if choice.get("finish_reason") is not None:
            self._finish = choice["finish_reason"]


def _completion(kind: Literal["chat", "text"], model: Any, content: Any, finish: Any, created: Any,
                usage: dict[str, Any], fingerprint: Any) -> CachedCompletion | None:
    if not isinstance(model, str) or not isinstance(content, str) or finish not in STORABLE_FINISH:
        return None
    return CachedCompletion(
        kind=kind, model=model, content=content, finish_reason=finish,
        created=created if isinstance(created, int) else 0,
        prompt_tokens=_count(usage.get("prompt_tokens")), completion_tokens=_count(usage.get("completion_tokens")),
        system_fingerprint=fingerprint if isinstance(fingerprint, str) else None,
    )


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _envelope(hit: CacheHit, request_id: str, obj: str) -> dict[str, Any]:
    c = hit.completion
    prefix = "chatcmpl" if c.kind == "chat" else "cmpl"
    return {"id": f"{prefix}-cache-{request_id}", "object": obj, "created": c.created, "model": c.model,
            "system_fingerprint": c.system_fingerprint,
            "sits_cache": {"match": hit.match, "similarity": round(hit.similarity, 4)}}


def _usage(c: CachedCompletion) -> dict[str, int] | None:
    if c.prompt_tokens is None or c.completion_tokens is None:
        return None
    return {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
            "total_tokens": c.prompt_tokens + c.completion_tokens}


def _event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"
