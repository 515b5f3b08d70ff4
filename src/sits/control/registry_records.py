"""The registry's canonical entries: one record per model, with its endpoints.

Records come from two sources: the static config (YAML, `--backend`, the embedded
default) and the control API. They are pure values; the registry replaces them whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import TypeAdapter

from sits.control.config import ModelConfig
from sits.state.routing_table import EndpointTimeouts
from sits.state.token_price import Price

Source = Literal["config", "local", "api"]  # local: an embedded model served by a worker process


@dataclass(frozen=True, slots=True)
class EndpointRecord:
    id: str
    url: str
    weight: float = 1.0
    upstream_model: str | None = None
    key_env: str | None = None
    timeouts: EndpointTimeouts = EndpointTimeouts()
    api: str = "openai"  # the HTTP API it speaks: "openai", "anthropic" or "responses"
    price: Price | None = None  # None: the model's


@dataclass(frozen=True, slots=True)
class ModelRecord:
    name: str
    endpoints: tuple[EndpointRecord, ...]
    source: Source = "api"
    tier: str | None = None
    description: str = ""
    capabilities: tuple[str, ...] = ()
    features: tuple[str, ...] | None = None  # None: not declared
    latency_p95_ms: float | None = None
    health_check_path: str | None = None
    cost_per_1k_input: float | None = None
    cost_per_1k_output: float | None = None
    context_window: int | None = None
    tokenizer_family: str | None = None
    max_concurrency: int | None = None
    upstream_model: str | None = None
    key_env: str | None = None
    tags: tuple[str, ...] = ()
    version: str | None = None
    aliases: tuple[str, ...] = ()
    fallbacks: tuple[str, ...] = ()
    cache: bool = False
    price: Price | None = None  # None: cost_per_1k_input/output, if set
    next_endpoint_index: int = field(default=0)

    def endpoint_ids(self) -> set[str]:
        return {e.id for e in self.endpoints}


def endpoint_id(model: str, index: int) -> str:
    """Globally unique, URL-safe: /v1/models/{model}/endpoints/ep-{index} addresses it."""
    return f"{model}/ep-{index}"


_RECORD_JSON = TypeAdapter(ModelRecord)


def record_to_json(record: ModelRecord) -> bytes:
    return _RECORD_JSON.dump_json(record)


def record_from_json(data: bytes) -> ModelRecord:
    return _RECORD_JSON.validate_json(data)


def records_from_config(models: Sequence[ModelConfig], local_urls: dict[str, str]) -> list[ModelRecord]:
    """The configured models as registry records; `local_urls` maps each local model's name to the base
    URL its worker serves on."""
    records = []
    for m in models:
        if m.local is not None:
            endpoints: tuple[EndpointRecord, ...] = (
                EndpointRecord(id=endpoint_id(m.name, 0), url=local_urls[m.name], upstream_model=m.name),
            )
        else:
            endpoints = tuple(
                EndpointRecord(
                    id=endpoint_id(m.name, j), url=ep.url, weight=ep.weight, upstream_model=ep.upstream_model,
                    key_env=ep.api_key_env,
                    timeouts=EndpointTimeouts(ep.timeouts.connect_s, ep.timeouts.first_byte_s, ep.timeouts.total_s),
                    api=ep.api,
                    price=ep.price.price() if ep.price is not None else None,
                )
                for j, ep in enumerate(m.endpoints)
            )
        records.append(ModelRecord(
            name=m.name, endpoints=endpoints, source="local" if m.local is not None else "config", tier=m.tier,
            description=m.description, aliases=tuple(m.aliases), fallbacks=tuple(m.fallbacks),
            context_window=m.context_window, capabilities=tuple(m.capabilities),
            features=tuple(m.features) if m.features is not None else None,
            cost_per_1k_input=m.cost_per_1k_input, cost_per_1k_output=m.cost_per_1k_output,
            latency_p95_ms=m.latency_p95_ms, max_concurrency=m.max_concurrency, cache=m.cache,
            price=m.price.price() if m.price is not None else None,
            next_endpoint_index=len(endpoints),
        ))
    return records
