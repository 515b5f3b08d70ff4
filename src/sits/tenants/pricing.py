"""What a request cost: token usage by kind, read from the upstream's answer, times the price in force.

Prices come from the routing table (a model's `price:`, an endpoint's own, or the per-thousand
`cost_per_1k_*` fields): an endpoint's price wins over its model's. Cached input tokens and reasoning
tokens are priced as such when the upstream reports them (`prompt_tokens_details.cached_tokens`,
`completion_tokens_details.reasoning_tokens`). Answers from the semantic cache or the static template
cost nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from sits.state.routing_table import ModelEntry, RoutingTable
from sits.tenants.records import Price
from sits.tenants.usage import Usage

FREE_SOURCES: Final = frozenset({"cache", "static-template"})  # answered without calling a model
_PER_TOKEN: Final = 1e-6  # prices are per million tokens

_PROMPT: Final = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
_COMPLETION: Final = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_CACHED: Final = re.compile(rb'"cached_tokens"\s*:\s*(\d+)')
_REASONING: Final = re.compile(rb'"reasoning_tokens"\s*:\s*(\d+)')


def cost_usd(price: Price | None, usage: Usage) -> float:
    """USD for `usage` at `price`; cached tokens are part of input, reasoning tokens part of output."""
    if price is None:
        return 0.0
    cached = min(usage.cached_input_tokens, usage.input_tokens)
    reasoning = min(usage.reasoning_tokens, usage.output_tokens)
    cached_rate = price.input if price.cached_input is None else price.cached_input
    reasoning_rate = price.output if price.reasoning is None else price.reasoning
    return ((usage.input_tokens - cached) * price.input + cached * cached_rate
            + (usage.output_tokens - reasoning) * price.output + reasoning * reasoning_rate) * _PER_TOKEN


def usage_from(payload: bytes, counts: tuple[int, int] | None = None) -> Usage | None:
    """Usage by kind from a JSON answer (or the last events of a stream), if it has a `usage` object;
    `counts`: its (prompt, completion) tokens when already read, used as they are when the usage has no
    token details."""
    # No `_details"` at or after the usage: no token details in it, the counts given are the usage. Told
    # without the usage's place when there is no `_details"` at all (the common case: one search). (No
    # slice arguments to parse, and no `in`, which first tries a bytes needle as an integer.)
    if counts is not None:
        details = payload.rfind(b'_details"')
        at = payload.rfind(b'"usage":') if details >= 0 else -1
        if details < at or details < 0:
            return Usage(counts[0], 0, counts[1], 0)
    else:
        at = payload.rfind(b'"usage":')
    if at < 0:
        return None
    prompt, completion = _PROMPT.search(payload, at), _COMPLETION.search(payload, at)
    if prompt is None and completion is None:
        return None
    cached, reasoning = _CACHED.search(payload, at), _REASONING.search(payload, at)
    return Usage(int(prompt[1]) if prompt else 0, int(cached[1]) if cached else 0,
                 int(completion[1]) if completion else 0, int(reasoning[1]) if reasoning else 0)


class PriceBook:
    """Prices by endpoint id and by model for one routing table, rebuilt when the table changes."""

    __slots__ = ("_table", "_by_endpoint", "_by_model", "_highest")

    def __init__(self) -> None:
        self._table: RoutingTable | None = None
        self._by_endpoint: dict[str, Price | None] = {}
        self._by_model: dict[str, Price | None] = {}
        self._highest: Price | None = None

    def _refresh(self, table: RoutingTable) -> None:
        if table is self._table:
            return
        by_endpoint: dict[str, Price | None] = {}
        by_model: dict[str, Price | None] = {}
        for entry in table.models.values():
            by_model[entry.name] = _dearest_of(entry)
            for endpoint in entry.endpoints:
                by_endpoint[endpoint.id] = endpoint.price or entry.price
        for alias in table.aliases:
            target = table.aliases[alias]
            by_model[alias] = by_model.get(target)
        self._by_endpoint, self._by_model = by_endpoint, by_model
        self._highest = _dearest(p for p in by_model.values() if p is not None)
        self._table = table

    def served(self, table: RoutingTable, endpoint: str) -> Price | None:
        """The price of an answer that `endpoint` gave; None for the cache, the static template or a
        workflow (whose steps are priced where they run)."""
        self._refresh(table)
        return self._by_endpoint.get(endpoint)

    def cost(self, table: RoutingTable, endpoint: str, usage: Usage) -> float:
        """What `usage` cost on `endpoint` (0 where it has no price)."""
        if table is not self._table:
            self._refresh(table)
        price = self._by_endpoint.get(endpoint)
        if price is None:
            return 0.0
        if not usage.cached_input_tokens and not usage.reasoning_tokens:  # the common case, in one step
            return (usage.input_tokens * price.input + usage.output_tokens * price.output) * _PER_TOKEN
        return cost_usd(price, usage)

    def estimate(self, table: RoutingTable, model: str) -> Price | None:
        """The price to reserve against before the endpoint is known: the dearest of the model's
        endpoints; for `auto` or an unknown name, the dearest in the table."""
        self._refresh(table)
        if model in self._by_model:
            return self._by_model[model]
        return self._highest


def _dearest_of(entry: ModelEntry) -> Price | None:
    return _dearest([e.price for e in entry.endpoints if e.price is not None] +
                    ([entry.price] if entry.price is not None else []))


def _dearest(prices: Iterable[Price]) -> Price | None:
    """Per kind, the highest effective rate among `prices` (a reservation must not run short)."""
    best: Price | None = None
    for p in prices:
        if best is None:
            best = p
        else:
            best = Price(max(best.input, p.input), max(_cached(best), _cached(p)),
                         max(best.output, p.output), max(_reasoning(best), _reasoning(p)))
    return best


def _cached(price: Price) -> float:
    return price.input if price.cached_input is None else price.cached_input


def _reasoning(price: Price) -> float:
    return price.output if price.reasoning is None else price.reasoning
