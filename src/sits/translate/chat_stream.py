"""Reading a chat-completions SSE stream event by event, for the surfaces that translate it.

`ChatStreamReader.feed(bytes)` yields `ChatDelta`s as the events complete; `[DONE]` and an in-band
error event are reported as such, so a surface can end its own stream the right way.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from sits.translate.sse import DONE, SseSplitter


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


def chunk_delta(event: dict[str, Any]) -> ChatDelta:
    """One chat.completion.chunk as a delta of choice 0 (the surfaces answer with one choice)."""
    text, reasoning, finish, tools = "", "", None, ()
    for choice in event.get("choices") or ():
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            text = content if isinstance(content, str) else ""
            thought = delta.get("reasoning_content")
            reasoning = thought if isinstance(thought, str) else ""
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                tools = tuple(_tool_delta(i, c) for i, c in enumerate(calls) if isinstance(c, dict))
        if choice.get("finish_reason") is not None:
            finish = str(choice["finish_reason"])
    usage = event.get("usage")
    model = event.get("model")
    return ChatDelta(text, reasoning, tools, finish, usage if isinstance(usage, dict) else None,
                     model if isinstance(model, str) else None)


def _tool_delta(position: int, call: dict[str, Any]) -> ToolDelta:
    function = call.get("function") if isinstance(call.get("function"), dict) else {}
    index = call.get("index")
    arguments = function.get("arguments")
    return ToolDelta(index if isinstance(index, int) else position,
                     call.get("id") if isinstance(call.get("id"), str) else None,
                     function.get("name") if isinstance(function.get("name"), str) else None,
                     arguments if isinstance(arguments, str) else "")


class ChatStreamReader:
    __slots__ = ("_splitter",)

    def __init__(self, source: str = "upstream") -> None:
        self._splitter = SseSplitter(source)

    def feed(self, chunk: bytes) -> list[ChatDelta | StreamEnd]:
        out: list[ChatDelta | StreamEnd] = []
        for event in self._splitter.feed(chunk):
            data = event.data.strip()
            if not data:
                continue
            if data == DONE:
                out.append(StreamEnd())
                continue
            try:
                parsed = orjson.loads(data)
            except orjson.JSONDecodeError:
                out.append(StreamEnd(f"an SSE event that is not JSON: {data[:80]!r}", "upstream_bad_stream"))
                continue
            if not isinstance(parsed, dict):
                continue
            if parsed.get("error") is not None:
                error = parsed["error"]
                message = error.get("message", error) if isinstance(error, dict) else error
                code = error.get("code") if isinstance(error, dict) else None
                out.append(StreamEnd(str(message), str(code) if code else "upstream_error"))
                continue
            out.append(chunk_delta(parsed))
        return out
