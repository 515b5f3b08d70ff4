"""Reading a chat-completions SSE stream event by event, for the surfaces that translate it.

`ChatStreamReader.feed(bytes)` yields what the events say as they complete: a `str` for an event that
is one more piece of text and nothing else (most of a stream's events: no object built for them),
a `ChatDelta` for any other; `[DONE]` and an in-band error event are reported as `StreamEnd`, so a
surface can end its own stream the right way.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from sits.errors import UpstreamProtocolError
from sits.translate.sse import DONE, MAX_LINE


class ToolDelta(NamedTuple):
    index: int
    id: str | None
    name: str | None
    arguments: str  # the next piece of the JSON arguments


class ChatDelta(NamedTuple):
    text: str = ""
    reasoning: str = ""
    tools: tuple[ToolDelta, ...] = ()
    finish: str | None = None
    usage: dict[str, Any] | None = None
    model: str | None = None


class StreamEnd(NamedTuple):
    """`[DONE]` (error None) or an in-band error event (its message)."""

    error: str | None = None
    code: str | None = None


_NO_DELTA = ChatDelta()


def chunk_delta(event: dict[str, Any]) -> ChatDelta:
    """One chat.completion.chunk as a delta of choice 0 (the surfaces answer with one choice).

    Read optimistically (the shape every chat server writes) and checked by the exceptions a wrong
    shape raises: this runs once per streamed event."""
    usage = event.get("usage")
    model = event.get("model")
    try:
        choices = event.get("choices")
        if not choices:
            return ChatDelta(usage=usage if type(usage) is dict else None, model=model if type(model) is str else None)
        choice = choices[0]
        if choice.get("index", 0) != 0:
            return _NO_DELTA
        delta = choice.get("delta") or _EMPTY
        text = delta.get("content") or ""
        reasoning = delta.get("reasoning_content") or ""
        calls = delta.get("tool_calls")
        tools = tuple(_tool_delta(i, c) for i, c in enumerate(calls)) if calls else ()
        finish = choice.get("finish_reason")
    except (AttributeError, TypeError, KeyError):
        return _NO_DELTA
    return ChatDelta(text if type(text) is str else "", reasoning if type(reasoning) is str else "", tools,
                     None if finish is None else str(finish), usage if type(usage) is dict else None,
                     model if type(model) is str else None)


_EMPTY: dict[str, Any] = {}


def _tool_delta(position: int, call: dict[str, Any]) -> ToolDelta:
    function = call.get("function") or _EMPTY
    index, call_id = call.get("index"), call.get("id")
    name, arguments = function.get("name"), function.get("arguments")
    return ToolDelta(index if type(index) is int else position, call_id if type(call_id) is str else None,
                     name if type(name) is str else None, arguments if type(arguments) is str else "")


class ChatStreamReader:
    """Chat SSE bytes in (cut anywhere), deltas and the end out. Chat streams carry only `data:` lines."""

    __slots__ = ("_partial", "_source")

    def __init__(self, source: str = "upstream") -> None:
        self._partial = b""
        self._source = source

    def feed(self, chunk: bytes) -> list[str | ChatDelta | StreamEnd]:
        data = self._partial + chunk if self._partial else chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE:
            raise UpstreamProtocolError(f"upstream {self._source} sent an SSE line over {MAX_LINE} bytes")
        out: list[str | ChatDelta | StreamEnd] = []
        for line in lines:
            if not line.startswith(b"data:"):
                continue  # blank separators, comments, `event:` lines
            payload = line[5:].strip()
            if payload == DONE:
                out.append(StreamEnd())
                continue
            try:
                parsed = orjson.loads(payload)
            except orjson.JSONDecodeError:
                out.append(StreamEnd(f"an SSE event that is not JSON: {payload[:80]!r}", "upstream_bad_stream"))
                continue
            if type(parsed) is not dict:
                continue
            choices = parsed.get("choices")
            if type(choices) is list and len(choices) == 1 and "usage" not in parsed:  # the common event: text only
                choice = choices[0]
                delta = choice.get("delta") if type(choice) is dict else None
                if type(delta) is dict and len(delta) == 1 and choice.get("finish_reason") is None \
                        and choice.get("index", 0) == 0:
                    text = delta.get("content")
                    if type(text) is str:
                        if text:
                            out.append(text)
                        continue
            error = parsed.get("error")
            if error is not None:
                message = error.get("message", error) if type(error) is dict else error
                code = error.get("code") if type(error) is dict else None
                out.append(StreamEnd(str(message), str(code) if code else "upstream_error"))
                continue
            out.append(chunk_delta(parsed))
        return out
