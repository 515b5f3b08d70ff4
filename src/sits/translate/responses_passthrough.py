"""A `/v1/responses` request passed through to an upstream that speaks the Responses API itself
(`api: responses`): the body it is sent, and what SITS reads from the answer, relayed unchanged, to
store it (docs/responses-and-messages.md).

- `upstream_body(raw, body, history)`: the client's bytes as sent; when SITS continues a conversation it
  stored, `previous_response_id` expanded into input items (the earlier turns, then this input).
- `said(response)`: a response object's output as the assistant chat message a later turn sends back.
- `ResponsesTap`: watches a relayed Responses stream for the response it closes with.
- `failed_event(...)`: the `response.failed` event that ends a passed-through stream that broke.
"""

from __future__ import annotations

from typing import Any

import orjson

from sits.translate.responses import assistant_message, input_items
from sits.translate.sse import SseSplitter, one_event, refuse_malformed

# The events that close a stream: True when they carry the response to store.
_CLOSING = {"response.completed": True, "response.incomplete": True, "response.failed": False, "error": False}
_TYPES = [(b'"type":"%b"' % kind.encode(), kind) for kind in _CLOSING]
_OPENING = ("response.created", "response.in_progress")  # where the response id is first said


def upstream_body(raw: bytes, body: dict[str, Any], history: list[dict[str, Any]] | None) -> bytes:
    """What the upstream is sent: `raw` (the client's bytes) unless SITS expands `previous_response_id`
    from the conversation it stored (`history`, chat messages)."""
    if history is None:
        return raw
    expanded = {k: v for k, v in body.items() if k != "previous_response_id"}
    expanded["input"] = [*chat_items(history), *input_items(body)]
    return orjson.dumps(expanded)


def chat_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages (a stored conversation) as Responses input items."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role, content = message.get("role"), message.get("content")
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": message.get("tool_call_id", ""),
                          "output": content if isinstance(content, str) else orjson.dumps(content).decode()})
            continue
        if role == "assistant":
            if content:
                items.append({"type": "message", "role": "assistant", "content": _text(content)})
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                items.append({"type": "function_call", "call_id": call.get("id", ""),
                              "name": function.get("name", ""), "arguments": function.get("arguments", "")})
            continue
        if isinstance(content, list) and any(p.get("type") == "image_url" for p in content):
            parts = [{"type": "input_image", "image_url": p["image_url"]["url"]} if p.get("type") == "image_url"
                     else {"type": "input_text", "text": p.get("text", "")} for p in content]
            items.append({"type": "message", "role": role, "content": parts})
        else:
            items.append({"type": "message", "role": role, "content": _text(content)})
    return items


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def said(response: dict[str, Any]) -> dict[str, Any]:
    """The response's output (messages' text, function calls) as one assistant chat message."""
    text: list[str] = []
    calls: list[tuple[str, str, str]] = []
    for item in response.get("output") or ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            text.extend(p.get("text", "") for p in item.get("content") or () if isinstance(p, dict)
                        and p.get("type") == "output_text")
        elif item.get("type") == "function_call":
            calls.append((str(item.get("call_id", "")), str(item.get("name", "")), str(item.get("arguments", ""))))
    return assistant_message("".join(text), calls)


class ResponsesTap:
    """Feed the relayed stream's chunks (they are relayed unchanged); `feed` says True once the stream
    closed. Then `response` is the closing event's response object when it completed (or ended
    incomplete), or `error` says why it failed. `response_id` is known from the first event.

    The tap is the stream's SSE check (the exchange's guard passes its chunks on unchecked): `feed`
    raises UpstreamProtocolError at a malformed line, as the guard would (`sse.refuse_malformed`)."""

    __slots__ = ("_splitter", "_opening", "_response_id", "response", "error", "ended")

    def __init__(self, source: str = "upstream") -> None:
        self._splitter = SseSplitter(source, strict=True)
        self._opening: bytes | None = None  # the data of the event that first said the response (parsed if asked)
        self._response_id: str | None = None
        self.response: dict[str, Any] | None = None
        self.error: str | None = None
        self.ended = False

    @property
    def response_id(self) -> str | None:
        """The response's id, from the event that opened it: read when asked (a stream that closes well
        never needs it, and parsing the opening costs as much as relaying several events)."""
        if self._response_id is None and self._opening is not None:
            try:
                payload = orjson.loads(self._opening)
            except orjson.JSONDecodeError:
                return None
            self._response_id = _id_of(payload.get("response") if isinstance(payload, dict) else None)
        return self._response_id

    def feed(self, chunk: bytes) -> bool:
        if self.ended:
            return False
        if self._opening is not None and self._splitter.between_events():
            if _quiet(chunk):
                return False  # nothing for the tap (most of a stream)
            if chunk.endswith(b"\n\n") and chunk.find(b"response.completed") < 0 \
                    and chunk.find(b"response.incomplete") < 0 and chunk.find(b"response.failed") < 0 \
                    and chunk.find(b"error") < 0:
                refuse_malformed(chunk, self._splitter.source)
                return False  # whole events, none of them closing (_CLOSING): a read of several
        for event in self._splitter.feed(chunk):
            if self._event(event.name, event.data):
                return True
        return False

    def end(self) -> bool:
        """The upstream's bytes ended: a last event without its blank line still counts."""
        return any(self._event(event.name, event.data) for event in self._splitter.end()) if not self.ended else False

    def _event(self, name: str, data: bytes) -> bool:
        if not name:  # no `event:` line: the type is in the data
            name = next((kind for marker, kind in _TYPES if marker in data), "")
            if not name and self._opening is None and b'"response.created"' in data:
                name = "response.created"
        closing = _CLOSING.get(name)
        if closing is None:
            if self._opening is None and name in _OPENING:
                self._opening = data
            return False
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            return False
        response = payload.get("response") if isinstance(payload, dict) else None
        if self._response_id is None:
            self._response_id = _id_of(response)
        self.ended = True
        if closing and isinstance(response, dict):
            self.response = response
        else:
            self.error = _error_message(payload, response)
        return True


def _id_of(response: Any) -> str | None:
    """A response object's id, if it is one with a string id."""
    if isinstance(response, dict):
        found = response.get("id")
        if isinstance(found, str):
            return found
    return None


def _quiet(chunk: bytes) -> bool:
    """Whether `chunk` is one whole event that cannot close the stream, as a Responses-API server writes
    each token: a name line `event: response.*` whose name starts with no closing event's, and one JSON
    data line. (A name is read stripped: one that starts with a closing name is not quiet, whatever
    follows.) Prefix tests compiled to direct calls, no search."""
    return chunk.startswith(b"event: response.") and one_event(chunk) \
        and not chunk.startswith(b"event: response.completed") and not chunk.startswith(b"event: response.incomplete") \
        and not chunk.startswith(b"event: response.failed")


class PassthroughStream:
    """A Responses-API upstream's stream as a stream relay carries it (api/translated_stream_relay.py):
    every chunk goes on unchanged, and the tap reads it for the response it closes with."""

    __slots__ = ("tap",)

    def __init__(self, source: str = "upstream") -> None:
        self.tap = ResponsesTap(source)

    @property
    def ended(self) -> bool:
        return self.tap.ended

    @property
    def error(self) -> str | None:
        return self.tap.error

    @property
    def usage(self) -> dict[str, Any] | None:
        return None  # its usage is the Responses stream's own, read from the bytes (`raw_usage`)

    def feed(self, chunk: bytes) -> list[bytes]:
        self.tap.feed(chunk)
        return [chunk]

    def fail(self, message: str, code: str) -> list[bytes]:
        """The stream broke before it closed: `response.failed` (nothing once the upstream closed it)."""
        return [] if self.tap.ended else [failed_event(self.tap.response_id, message, code)]


def _error_message(payload: Any, response: Any) -> str:
    error = response.get("error") if isinstance(response, dict) else None
    if error is None and isinstance(payload, dict):
        error = payload.get("error", payload)
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error or "the upstream's stream failed")


def failed_event(response_id: str | None, message: str, code: str) -> bytes:
    response: dict[str, Any] = {"id": response_id, "object": "response", "status": "failed", "output": [],
                "error": {"code": code, "message": message}}
    return b"event: response.failed\ndata: " + orjson.dumps({"type": "response.failed", "response": response}) + b"\n\n"
