"""Resuming a chat stream that broke after part of the answer reached the client.

The relay keeps references to the chunks it sent (no parsing on the hot path); only when a
stream breaks are they parsed back into the partial answer. That text becomes an assistant
prefix for another endpoint or fallback model (`understanding/tokenizers/continuation.py`:
`continue_final_message`, the remaining token budget counted in the target's tokens when its
tokenizer is known), and the client's stream goes on where it stopped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import orjson

from sits.understanding.tokenizers.continuation import continuation_request
from sits.understanding.tokenizers.counter import TokenCounter

CHAT_API = "/chat/completions"


class CharEstimate:
    """A token estimate (4 characters a token) for targets whose tokenizer SITS does not know."""

    family = "estimate"

    def encode(self, text: str) -> list[int]:
        return [0] * ((len(text) + 3) // 4)

    def count(self, text: str) -> int:
        return (len(text) + 3) // 4


def partial_answer(chunks: Iterable[bytes]) -> str:
    """The assistant text that the relayed SSE chunks carried (choice 0's content deltas)."""
    return _delta_text(chunks, _CONTENT)


def generated_text(chunks: Iterable[bytes]) -> str:
    """Everything the relayed SSE chunks generated: content, reasoning and tool-call arguments (what
    a stream without a usage event is counted from). The JSON strings of those keys are found by one
    regex over the bytes (quotes inside a JSON string are escaped, so `"content":"` only starts one)
    and decoded together: a few times cheaper than parsing each event."""
    data = b"".join(chunks)
    pieces = _GENERATED_STRINGS.findall(data)
    if not pieces:
        return ""
    try:
        return orjson.loads(b'"' + b"".join(pieces) + b'"')  # type: ignore[no-any-return]
    except orjson.JSONDecodeError:  # an escape cut in two by a server's own writing: event by event
        return _delta_text((data,), _GENERATED)


_GENERATED_STRINGS = re.compile(rb'"(?:content|reasoning_content|reasoning|arguments)"\s*:\s*"([^"\\]*(?:\\.[^"\\]*)*)"')


_CONTENT = ("content",)
_GENERATED = ("content", "reasoning_content", "reasoning")


def _delta_text(chunks: Iterable[bytes], fields: tuple[str, ...]) -> str:
    text: list[str] = []
    tail = b""
    for chunk in chunks:
        events = (tail + chunk).split(b"\n\n")
        tail = events.pop()  # an event cut across two chunks waits for its end
        for event in events:
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    _collect(line[5:].strip(), text, fields)
    return "".join(text)


def _collect(data: bytes, into: list[str], fields: tuple[str, ...]) -> None:
    if not data.startswith(b"{"):
        return  # [DONE] or garbage: nothing to keep
    try:
        event = orjson.loads(data)
        choices = event.get("choices") or []
    except (orjson.JSONDecodeError, AttributeError):
        return
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                continue
            for field in fields:
                piece = delta.get(field)
                if isinstance(piece, str):
                    into.append(piece)
            if fields is _GENERATED:
                for call in delta.get("tool_calls") or ():
                    arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
                    if isinstance(arguments, str):
                        into.append(arguments)


def resume_body(body: bytes, partial: str, model: str, counter: TokenCounter | None) -> bytes | None:
    """The chat request that continues `partial` on `model`, or None when it cannot be continued
    (several choices asked for, or nothing was generated yet: then a plain retry is right)."""
    payload: dict[str, Any] = orjson.loads(body)
    if not partial or (payload.get("n") or 1) != 1:
        return None
    continuation = continuation_request(payload, partial, model, counter or CharEstimate())
    budget = payload.get("max_completion_tokens") or payload.get("max_tokens")
    if isinstance(budget, int) and continuation.generated_tokens >= budget:
        return None  # the budget is spent: the answer was complete but for its end
    return orjson.dumps(continuation.body)
