"""The director's scheduling hints: exact counters from the tokenizer catalog, adapter holders."""

from __future__ import annotations

from pathlib import Path

from sits.pipeline.scheduling_hints import AdapterHooks, SchedulingHints
from sits.scheduling.types import SchedulingRequest
from sits.state.routing_table import Endpoint, ModelEntry, RoutingTable
from sits.understanding.tokenizers.catalog import TokenizerCatalog, TokenizerSource
from tests.conftest import TOKENIZERS

REQUEST = SchedulingRequest("m", "/chat/completions", False, prompt_tokens_estimate=3)


def entry(name: str, family: str | None = None) -> ModelEntry:
    return ModelEntry(name, (Endpoint(f"{name}-0", name, name, "http", "127.0.0.1", 1, "/v1"),),
                      tokenizer_family=family)


def test_without_sources_the_request_is_unchanged():
    assert SchedulingHints().hinted(entry("m"), "hello", REQUEST) is REQUEST
    assert SchedulingHints().resolve(RoutingTable({}), "m:a") is None


def test_a_model_with_a_known_tokenizer_gets_an_exact_lazy_counter(tmp_path):
    catalog = TokenizerCatalog(tmp_path)
    catalog.load_one(TokenizerSource("llama3", TOKENIZERS / "llama3"))
    hints = SchedulingHints(tokenizers=catalog, table=lambda: RoutingTable({}))
    text = "The quick brown fox jumps over the lazy dog."
    by_family = hints.hinted(entry("served-llama", family="llama3"), text, REQUEST)
    assert by_family.count_prompt_tokens is not None and by_family.count_prompt_tokens() == 10
    by_name = hints.hinted(entry("llama3"), text, REQUEST)  # a family named like the model
    assert by_name.count_prompt_tokens is not None and by_name.count_prompt_tokens() == 10
    assert hints.hinted(entry("qwen"), text, REQUEST) is REQUEST  # unknown tokenizer: the estimate stays


def test_adapter_holders_come_from_the_attached_registry():
    variant = entry("base")
    hints = SchedulingHints(AdapterHooks(lambda table, name: variant if name == "base:a" else None,
                                         lambda model: frozenset({"base-0"}) if model is variant else frozenset(),
                                         {"a": object()}))
    assert hints.resolve(RoutingTable({}), "base:a") is variant
    assert hints.hinted(variant, "x", REQUEST).adapter_endpoints == frozenset({"base-0"})
    assert hints.hinted(entry("other"), "x", REQUEST) is REQUEST


def test_tokenizers_loaded_after_attaching_are_used():
    catalog = TokenizerCatalog(Path("/nonexistent"))
    hints = SchedulingHints(tokenizers=catalog, table=lambda: RoutingTable({}))  # at startup, before the load finishes
    assert hints.hinted(entry("llama3"), "hello", REQUEST) is REQUEST
    catalog.load_one(TokenizerSource("llama3", TOKENIZERS / "llama3"))
    assert hints.hinted(entry("llama3"), "hello", REQUEST).count_prompt_tokens is not None


def test_adapter_lookups_start_with_the_first_registration():
    registered: dict[str, object] = {}
    variant = entry("base")
    hints = SchedulingHints(AdapterHooks(lambda table, name: variant, lambda model: frozenset({"base-0"}), registered))
    assert hints.hinted(variant, "x", REQUEST) is REQUEST  # nothing registered: no lookup at all
    registered["a"] = object()
    assert hints.hinted(variant, "x", REQUEST).adapter_endpoints == frozenset({"base-0"})
