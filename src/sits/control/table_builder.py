"""Build the immutable routing table from registry records."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from urllib.parse import urlsplit

from sits.control.registry_records import EndpointRecord, ModelRecord
from sits.errors import ConfigError
from sits.state.routing_table import Endpoint, ModelEntry, RoutingTable
from sits.state.token_price import Price

_API_SUFFIXES = ("/chat/completions", "/completions", "/embeddings")


def build_routing_table(
    records: Iterable[ModelRecord],
    aliases: Mapping[str, str],
    secrets: Mapping[str, str],
    version: int = 1,
) -> RoutingTable:
    models: dict[str, ModelEntry] = {}
    all_aliases = dict(aliases)
    for record in records:
        endpoints = tuple(_endpoint(record, ep, secrets) for ep in record.endpoints)
        price = record.price or Price.per_thousand(record.cost_per_1k_input, record.cost_per_1k_output)
        models[record.name] = ModelEntry(
            name=record.name,
            endpoints=endpoints,
            tier=record.tier,
            owned_by="sits-local" if record.source == "local" else "sits",
            description=record.description,
            capabilities=frozenset(record.capabilities),
            features=frozenset(record.features) if record.features is not None else None,
            context_window=record.context_window,
            latency_p95_ms=record.latency_p95_ms,
            # Scorers read per-thousand costs: a model priced per million gets them from its price.
            cost_per_1k_input=record.cost_per_1k_input if record.price is None else record.price.input / 1000,
            cost_per_1k_output=record.cost_per_1k_output if record.price is None else record.price.output / 1000,
            max_concurrency=record.max_concurrency,
            tokenizer_family=record.tokenizer_family,
            version=record.version,
            fallbacks=record.fallbacks,
            cache=record.cache,
            price=price,
        )
        for alias in record.aliases:
            all_aliases[alias] = record.name
    valid_aliases = {a: t for a, t in all_aliases.items() if t in models and a not in models}
    return RoutingTable(MappingProxyType(models), MappingProxyType(valid_aliases), version)


def split_endpoint_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, base path); a full API URL is reduced to its base."""
    parts = urlsplit(url)
    base_path = parts.path.rstrip("/")
    for suffix in _API_SUFFIXES:
        if base_path.endswith(suffix):
            base_path = base_path[: -len(suffix)]
            break
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname or "", port, base_path


def _endpoint(record: ModelRecord, ep: EndpointRecord, secrets: Mapping[str, str]) -> Endpoint:
    scheme, host, port, base_path = split_endpoint_url(ep.url)
    api_key = None
    key_env = ep.key_env or record.key_env
    if key_env:
        api_key = secrets.get(key_env)
        if not api_key:
            raise ConfigError(f"model {record.name!r} endpoint {ep.id}: environment variable {key_env} is not set",
                              param="key_env")
    return Endpoint(
        id=ep.id,
        model=record.name,
        upstream_model=ep.upstream_model or record.upstream_model or record.name,
        scheme=scheme,
        host=host,
        port=port,
        base_path=base_path,
        weight=ep.weight,
        timeouts=ep.timeouts,
        api_key=api_key,
        guarded=record.source == "api",
        health_check_path=record.health_check_path,
        api=ep.api,
        price=ep.price,
    )
