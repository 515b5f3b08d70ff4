"""What the director adds to a request before scheduling: adapter variants and exact token counts.

- `model: "base:adapter"` resolves to the base model's endpoints with the upstream model set to
  the adapter's name (how vLLM serves LoRA adapters), endpoints holding the adapter first; the
  scheduling request names those endpoints for `adapter-affinity-scorer`.
- When the target model's tokenizer is known, the scheduling request carries a lazy exact
  counter for the prompt (the context-window filter calls it only near a window's edge).

Both sources are attached at startup by the composition root; without them nothing changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from sits.scheduling.types import SchedulingRequest
from sits.state.routing_table import ModelEntry, RoutingTable
from sits.understanding.tokenizers.catalog import TokenizerCatalog

# (table, requested name) -> the variant entry, or None if the name is no variant of a model
VariantResolver = Callable[[RoutingTable, str], ModelEntry | None]
# variant entry -> ids of the endpoints that already hold its adapter (empty for any other entry)
LoadedOn = Callable[[ModelEntry], frozenset[str]]


class SchedulingHints:
    def __init__(self) -> None:
        self._resolve: VariantResolver | None = None
        self._loaded_on: LoadedOn | None = None
        self._tokenizers: TokenizerCatalog | None = None

    def attach_adapters(self, resolve: VariantResolver, loaded_on: LoadedOn) -> None:
        self._resolve = resolve
        self._loaded_on = loaded_on

    def attach_tokenizers(self, catalog: TokenizerCatalog) -> None:
        self._tokenizers = catalog

    def resolve(self, table: RoutingTable, name: str) -> ModelEntry | None:
        return self._resolve(table, name) if self._resolve is not None else None

    def hinted(self, model: ModelEntry, prompt_text: str, request: SchedulingRequest) -> SchedulingRequest:
        loaded = self._loaded_on(model) if self._loaded_on is not None else frozenset()
        counter = (self._tokenizers.counter_for(model.name, model.tokenizer_family)
                   if self._tokenizers is not None else None)
        if not loaded and counter is None:
            return request
        count = None
        if counter is not None:
            def count() -> int:
                return counter.count(prompt_text)
        return dataclasses.replace(request, adapter_endpoints=loaded, count_prompt_tokens=count)
