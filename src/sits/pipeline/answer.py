"""What `Director.run` hands a door: one protocol for the three kinds of answer.

An upstream exchange (`pipeline/exchange.py`), a cache hit or the static template
(`pipeline/canned_answer.py`) and a fusion workflow's result (`pipeline/fusion/answer.py`) all say
who answered (the `x-sits-*` headers), what the request observer records (model, source, route,
attempts, usage when known) and give the body either whole (`read()`: a chat/completions JSON
body) or as SSE chat-completion events (`chunks()`), so the HTTP, HTTP/2 and gRPC doors, and the
surfaces translated from chat completions, consume one shape.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final, Protocol

from sits.state.semantic_cache import CacheKey

JSON = b"application/json"


class Answer(Protocol):
    # Read-only to the doors: each kind of answer keeps these as plain attributes or properties.
    @property
    def model(self) -> str:
        """The model that answered (x-sits-model)."""
        ...

    @property
    def source(self) -> str:
        """What the observer records as the endpoint: an endpoint id, "cache", "static-template", "workflow"."""
        ...

    @property
    def route(self) -> str:
        """x-sits-route."""
        ...

    @property
    def attempts(self) -> str:
        """x-sits-attempts ("" when no upstream was tried)."""
        ...

    @property
    def intent(self) -> str:
        """x-sits-intent, when the request was understood (model "auto")."""
        ...

    @property
    def first_byte_at(self) -> float | None:
        """When the first byte came from upstream; None for an answer the gateway made."""
        ...

    @property
    def cache_key(self) -> CacheKey | None:
        """Set when the answer may be stored for the cache steps."""
        ...

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The `x-sits-*` response headers."""
        ...

    def usage(self, body: bytes, parsed: object = None) -> tuple[int, int] | None:
        """(prompt, completion) tokens to record, from the JSON body or the stream's usage event
        (empty when the stream had none); None when unknown. `parsed`: the body already parsed, when the
        caller parsed it anyway (the translated surfaces), read instead of the bytes."""
        ...

    @property
    def content_type(self) -> bytes:
        """Of `read()`'s body, known once it returned."""
        ...

    async def read(self) -> bytes:
        """The whole answer: a JSON body (chat or text completion, or embeddings)."""
        ...

    def chunks(self, include_usage: bool = False) -> AsyncIterator[bytes]:
        """The answer as SSE events ending with `data: [DONE]`, in byte chunks of one or more events.
        `include_usage`: an answer the gateway makes adds the usage event (an upstream follows the
        forwarded body's `stream_options`)."""
        ...

    def push(self, deliver: Callable[[bytes], bool], include_usage: bool = False) -> Awaitable[None]:
        """`chunks()` pushed into `deliver` as they come (from the upstream's read callback: no task
        wakes up per event); `deliver` returns True when its consumer is full, and reading then pauses
        until `resume_reading()`. Returns when the stream ended; raises what `chunks()` would."""
        ...

    def resume_reading(self) -> None:
        """The consumer of `push()` has room again."""
        ...

    def close(self, ok: bool = False) -> None:
        """Give back what the answer holds (the upstream connection, the admission slot); idempotent."""
        ...


_PROMPT_TOKENS: Final = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
_COMPLETION_TOKENS: Final = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
# Compact JSON in the order every OpenAI-compatible server here writes, read where `"usage":` is.
_PROMPT_KEY: Final = b'"usage":{"prompt_tokens":'
_COMPLETION_KEY: Final = b',"completion_tokens":'
# The same order with any spacing: one search instead of two.
_BOTH_TOKENS: Final = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)\s*,\s*"completion_tokens"\s*:\s*(\d+)')


def usage_of(payload: bytes) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) from a JSON answer's `usage` object, if it has one.

    Matched at the last `"usage":` in the compact form most servers write, else searched for after it;
    never by parsing the whole answer (the counts are plain integers in every OpenAI-compatible server's
    usage)."""
    at = payload.rfind(b'"usage":')
    if at < 0:
        return None
    compact = _compact_counts(payload, at)
    if compact is not None:
        return compact
    both = _BOTH_TOKENS.search(payload, at)
    if both is not None:
        return int(both[1]), int(both[2])
    prompt = _PROMPT_TOKENS.search(payload, at)
    completion = _COMPLETION_TOKENS.search(payload, at)
    if prompt is None and completion is None:
        return None
    return (int(prompt.group(1)) if prompt else 0, int(completion.group(1)) if completion else 0)


def counts_of(completion: object) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) of a parsed chat completion's `usage`, as `usage_of` reads
    them from its bytes; None when it has no usage."""
    if not isinstance(completion, dict):
        return None
    usage = completion.get("usage")
    if not isinstance(usage, dict):
        return None
    prompt, generated = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if prompt is None and generated is None:
        return None
    return (prompt if type(prompt) is int else 0), (generated if type(generated) is int else 0)


def _compact_counts(payload: bytes, at: int) -> tuple[int, int] | None:
    """The counts of a compact usage at `at` (`"usage":{"prompt_tokens":N,"completion_tokens":M` then `,`
    or `}`), read byte by byte: compiled, two slices and a loop per digit, where a regex match of the same
    (`\\d+` and all) costs several thousand instructions."""
    start = at + len(_PROMPT_KEY)
    if payload[at:start] != _PROMPT_KEY:
        return None
    prompt, at = _digits(payload, start)
    if at == start or payload[at:at + len(_COMPLETION_KEY)] != _COMPLETION_KEY:
        return None
    start = at + len(_COMPLETION_KEY)
    completion, at = _digits(payload, start)
    if at == start or at >= len(payload) or (payload[at] != 44 and payload[at] != 125):  # `,` or `}`
        return None
    return prompt, completion


def _digits(payload: bytes, at: int) -> tuple[int, int]:
    """The ASCII digits of `payload` from `at` on, as an int, and where they end."""
    value = 0
    size = len(payload)
    while at < size:
        digit = payload[at]
        if digit < 48 or digit > 57:
            break
        value = value * 10 + digit - 48
        at += 1
    return value, at


def stream_usage_of(tail: bytes) -> tuple[int, int] | None:
    """Usage from the last events of a stream (sent when the client asked for include_usage)."""
    return usage_of(tail) if tail.find(b'"usage":{') >= 0 else None  # find(): see openai_routes._relay_stream
