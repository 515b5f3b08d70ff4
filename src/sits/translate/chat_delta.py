"""One chat-completions stream event as what it says for choice 0 (`ChatDelta`), or the stream's end
(`StreamEnd`): the types the chat reader (`translate/chat_stream.py`) gives the surfaces, and the parse of
an event that is read whole. `text_piece` writes a decoded text as a piece (its JSON-escaped content)."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from sits.tuples import new_tuple


class ToolDelta(NamedTuple):
    index: int  # type: ignore[assignment]  # the wire's name; a tool delta is never searched as a tuple
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
    stop: str | None = None  # with `finish`: the stop string matched, where the server says (see `matched_stop`)


class StreamEnd(NamedTuple):
    """`[DONE]` (error None) or an in-band error event (its message)."""

    error: str | None = None
    code: str | None = None


_NO_DELTA = ChatDelta()
_EMPTY: dict[str, Any] = {}


def text_piece(text: str) -> bytes:
    """A decoded text as a piece (its JSON-escaped content)."""
    return orjson.dumps(text)[1:-1]


def chunk_delta(event: dict[str, Any]) -> ChatDelta:
    """One chat.completion.chunk as a delta of choice 0 (the surfaces answer with one choice).

    Read optimistically (the shape every chat server writes) and checked by the exceptions a wrong
    shape raises. `choice` and `delta` are declared dicts so that the compiled reads are dict operations,
    not method calls; one that is not a dict is a TypeError there (an AttributeError from source)."""
    usage = event.get("usage")
    model = event.get("model")
    try:
        choices = event.get("choices")
        if not choices:
            return new_tuple(ChatDelta, ("", "", (), None, usage if type(usage) is dict else None,
                                         model if type(model) is str else None, None))
        choice: dict[str, Any] = choices[0]
        if choice.get("index", 0) != 0:
            return _NO_DELTA
        delta: dict[str, Any] = choice.get("delta") or _EMPTY
        text = delta.get("content") or ""
        reasoning = delta.get("reasoning_content") or ""
        calls = delta.get("tool_calls")
        tools = tuple(_tool_delta(i, c) for i, c in enumerate(calls)) if calls else ()
        finish = choice.get("finish_reason")
        stop = matched_stop(choice) if finish is not None else None
    except (AttributeError, TypeError, KeyError):
        return _NO_DELTA
    return new_tuple(ChatDelta, (text if type(text) is str else "", reasoning if type(reasoning) is str else "",
                                  tools, None if finish is None else str(finish),
                                  usage if type(usage) is dict else None, model if type(model) is str else None, stop))


def matched_stop(choice: dict[str, Any]) -> str | None:
    """The stop string a finished choice stopped on, where the server names it: vLLM's `stop_reason`,
    SGLang's `matched_stop` (SITS's Anthropic-API upstreams write `stop_reason` too). llama-server
    does not say; a token id (an int) is no stop string."""
    stop = choice.get("stop_reason")
    if stop is None:
        stop = choice.get("matched_stop")
    return stop if type(stop) is str else None


def _tool_delta(position: int, call: dict[str, Any]) -> ToolDelta:
    function = call.get("function") or _EMPTY
    index, call_id = call.get("index"), call.get("id")
    name, arguments = function.get("name"), function.get("arguments")
    return ToolDelta(index if type(index) is int else position, call_id if type(call_id) is str else None,
                     name if type(name) is str else None, arguments if type(arguments) is str else "")


def only_text(parsed: dict[str, Any]) -> str | None:
    """The text of an event that says a piece of text and nothing else, else None."""
    choices = parsed.get("choices")
    if type(choices) is not list or len(choices) != 1 or parsed.get("usage") is not None:
        return None
    first = choices[0]
    if type(first) is not dict:
        return None
    choice: dict[str, Any] = first  # a dict: its reads compile to dict operations
    found = choice.get("delta")
    if type(found) is not dict or len(found) != 1 or choice.get("finish_reason") is not None \
            or choice.get("index", 0) != 0:
        return None
    delta: dict[str, Any] = found
    text = delta.get("content")
    return text if type(text) is str else None
