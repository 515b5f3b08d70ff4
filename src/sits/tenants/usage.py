"""What one request used: its tokens by kind (`Usage`) and its row of the spend log (`SpendRecord`).

Native classes, compiled with the request path (docs/hot-path.md): the key gate makes one of each per
request and reads their fields (settlement, price, metrics), each a struct read compiled, where a named
tuple's field is a descriptor call and its constructor a call into CPython. Immutable by convention, equal
by value.
"""

from __future__ import annotations

from typing import final


@final
class Usage:
    """Tokens of one answer by kind, from the upstream's `usage` (or counted when it sent none)."""

    __slots__ = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens")

    def __init__(self, input_tokens: int = 0, cached_input_tokens: int = 0, output_tokens: int = 0,
                 reasoning_tokens: int = 0) -> None:
        self.input_tokens = input_tokens
        self.cached_input_tokens = cached_input_tokens  # part of input_tokens
        self.output_tokens = output_tokens
        self.reasoning_tokens = reasoning_tokens  # part of output_tokens

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Usage):
            return NotImplemented
        return (self.input_tokens == other.input_tokens and self.cached_input_tokens == other.cached_input_tokens
                and self.output_tokens == other.output_tokens and self.reasoning_tokens == other.reasoning_tokens)

    def __hash__(self) -> int:
        return hash((self.input_tokens, self.cached_input_tokens, self.output_tokens, self.reasoning_tokens))

    def __repr__(self) -> str:
        return (f"Usage(input_tokens={self.input_tokens}, cached_input_tokens={self.cached_input_tokens}, "
                f"output_tokens={self.output_tokens}, reasoning_tokens={self.reasoning_tokens})")


@final
class SpendRecord:
    """One row of the spend log: one request, whatever answered it."""

    __slots__ = ("request_id", "at", "key_id", "team_id", "user", "model", "endpoint", "usage", "cost_usd",
                 "latency_ms", "status", "cache_hit", "fallback")

    def __init__(self, request_id: str, at: float, key_id: str | None, team_id: str | None, user: str | None,
                 model: str, endpoint: str, usage: Usage, cost_usd: float, latency_ms: float, status: int,
                 cache_hit: bool = False, fallback: bool = False) -> None:
        self.request_id = request_id
        self.at = at  # unix seconds when the request ended
        self.key_id = key_id
        self.team_id = team_id
        self.user = user  # the client's end-user id (`user` field or `x-sits-user`)
        self.model = model
        self.endpoint = endpoint  # endpoint id, "cache", "static-template" or "workflow"
        self.usage = usage
        self.cost_usd = cost_usd
        self.latency_ms = latency_ms
        self.status = status
        self.cache_hit = cache_hit
        self.fallback = fallback

    def _fields(self) -> tuple[object, ...]:
        return (self.request_id, self.at, self.key_id, self.team_id, self.user, self.model, self.endpoint, self.usage,
                self.cost_usd, self.latency_ms, self.status, self.cache_hit, self.fallback)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SpendRecord):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (f"SpendRecord(request_id={self.request_id!r}, at={self.at!r}, key_id={self.key_id!r}, "
                f"team_id={self.team_id!r}, user={self.user!r}, model={self.model!r}, endpoint={self.endpoint!r}, "
                f"usage={self.usage!r}, cost_usd={self.cost_usd!r}, latency_ms={self.latency_ms!r}, "
                f"status={self.status!r}, cache_hit={self.cache_hit!r}, fallback={self.fallback!r})")
