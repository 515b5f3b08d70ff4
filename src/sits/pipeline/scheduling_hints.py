"""What the director adds to a request on its way: adapter variants, exact token counts, and
token-level translation when a request moves to a model of another tokenizer family.

- `model: "base:adapter"` resolves to the base model's endpoints with the upstream model set to
  the adapter's name (how vLLM serves LoRA adapters), endpoints holding the adapter first; the
  scheduling request names those endpoints for `adapter-affinity-scorer`.
- When the target model's tokenizer is known, the scheduling request carries a lazy exact
  counter for the prompt (the context-window filter calls it only near a window's edge).
- When an attempt goes to a model of another family than the one asked for (a fallback), the
  body's `logit_bias`, `stop_token_ids` and `max_tokens` move to the target's tokens
  (`understanding/tokenizers/translation.py`); a body without them is passed on untouched.

Both sources are attached at startup by the composition root; without them nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import orjson

from sits.scheduling.types import SchedulingRequest
from sits.state.routing_table import ModelEntry, RoutingTable
from sits.understanding.tokenizers.catalog import TokenizerCatalog
from sits.understanding.tokenizers.counter import TokenCounter
from sits.understanding.tokenizers.translation import translate_request

# Body fields that name or count tokens; a body without any of them needs no translation.
_TOKEN_FIELDS = (b'"logit_bias"', b'"stop_token_ids"', b'"max_tokens"', b'"max_completion_tokens"')
_SAMPLE_CHARS = 4000  # enough prompt text for a stable token ratio

# (table, requested name) -> the variant entry, or None if the name is no variant of a model
VariantResolver = Callable[[RoutingTable, str], ModelEntry | None]
# variant entry -> ids of the endpoints that already hold its adapter (empty for any other entry)
LoadedOn = Callable[[ModelEntry], frozenset[str]]


class AdapterHooks(NamedTuple):
    """The adapter registry's answers: a `base:adapter` model's variant, where it is loaded, and a live
    read-only view of what is registered (lookups start with the first registration)."""

    resolve: VariantResolver
    loaded_on: LoadedOn
    registered: Mapping[str, object]


class SchedulingHints:
    def __init__(self, adapters: AdapterHooks | None = None, tokenizers: TokenizerCatalog | None = None,
                 table: Callable[[], RoutingTable] | None = None) -> None:
        """`tokenizers` may still be loading: families loaded later are used from then on."""
        self._resolve = adapters.resolve if adapters is not None else None
        self._loaded_on = adapters.loaded_on if adapters is not None else None
        # Live read-only views of what is registered and loaded: tested for emptiness on every request,
        # a C-level truth test rather than a call into the registry or the catalog.
        self._registered: Mapping[str, object] = adapters.registered if adapters is not None else {}
        self._tokenizers = tokenizers
        self._families: Mapping[str, object] = tokenizers.bridge.maps if tokenizers is not None else {}
        self._table = table

    def resolve(self, table: RoutingTable, name: str) -> ModelEntry | None:
        return self._resolve(table, name) if self._resolve is not None else None

    def counter(self, model: ModelEntry) -> TokenCounter | None:
        """The model's tokenizer, when one is loaded for its family."""
        return self._tokenizers.counter_for(model.name, model.tokenizer_family) if self._tokenizers else None

    def hinted(self, model: ModelEntry, prompt_text: str, request: SchedulingRequest) -> SchedulingRequest:
        if not self._families and not self._registered:  # a truth test, not a call: it runs on every request
            return request  # the common case: nothing registered, nothing loaded (no per-request lookups)
        loaded = self._loaded_on(model) if self._loaded_on is not None else frozenset()
        counter = (self._tokenizers.counter_for(model.name, model.tokenizer_family)
                   if self._tokenizers is not None else None)
        if not loaded and counter is None:
            return request
        count = None
        if counter is not None:
            def count() -> int:
                return counter.count(prompt_text)
        return request._replace(adapter_endpoints=loaded, count_prompt_tokens=count)

    def translated(self, requested: str, target: str, prompt_text: str, body: bytes) -> bytes:
        """`body` for model `target` when the client asked for `requested` (see the module docstring)."""
        catalog, table = self._tokenizers, self._table
        if catalog is None or table is None or not any(f in body for f in _TOKEN_FIELDS):
            return body
        current = table()
        source_entry, target_entry = current.resolve(requested), current.models.get(target)
        if source_entry is None or target_entry is None:
            return body
        source = catalog.family_for(source_entry.name, source_entry.tokenizer_family)
        destination = catalog.family_for(target_entry.name, target_entry.tokenizer_family)
        if source is None or destination is None or source == destination:
            return body
        payload = orjson.loads(body)
        moved = translate_request(catalog.bridge, source, destination, payload, catalog.counters,
                                  sample=prompt_text[:_SAMPLE_CHARS])
        return orjson.dumps(moved.body)
