"""Build the immutable routing table from validated config."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from urllib.parse import urlsplit

from sits.control.config import EndpointConfig, GatewayConfig
from sits.errors import ConfigError
from sits.state.routing_table import Endpoint, EndpointTimeouts, ModelEntry, RoutingTable

_API_SUFFIXES = ("/chat/completions", "/completions", "/embeddings")


def build_routing_table(
    config: GatewayConfig,
    secrets: Mapping[str, str],
    local_urls: Mapping[str, str],
    version: int = 1,
) -> RoutingTable:
    """`local_urls` maps each local model's name to the base URL its worker serves on."""
    models: dict[str, ModelEntry] = {}
    for i, m in enumerate(config.models):
        if m.local is not None:
            sources = [EndpointConfig(url=local_urls[m.name], upstream_model=m.name)]
            owned_by = "sits-local"
        else:
            sources = m.endpoints
            owned_by = "sits"
        endpoints = tuple(
            _endpoint(m.name, j, ep, secrets, f"models[{i}].endpoints[{j}]") for j, ep in enumerate(sources)
        )
        models[m.name] = ModelEntry(m.name, endpoints, m.tier, owned_by, m.description)
    return RoutingTable(MappingProxyType(models), MappingProxyType(config.all_aliases()), version)


def _endpoint(model: str, index: int, ep: EndpointConfig, secrets: Mapping[str, str], where: str) -> Endpoint:
    parts = urlsplit(ep.url)
    scheme = parts.scheme
    base_path = parts.path.rstrip("/")
    for suffix in _API_SUFFIXES:  # accept a full API URL as well as a base URL
        if base_path.endswith(suffix):
            base_path = base_path[: -len(suffix)]
            break
    api_key = None
    if ep.api_key_env:
        api_key = secrets.get(ep.api_key_env)
        if not api_key:
            raise ConfigError(f"{where}.api_key_env: environment variable {ep.api_key_env} is not set")
    t = ep.timeouts
    return Endpoint(
        id=f"{model}#{index}",
        model=model,
        upstream_model=ep.upstream_model or model,
        scheme=scheme,
        host=parts.hostname or "",
        port=parts.port or (443 if scheme == "https" else 80),
        base_path=base_path,
        weight=ep.weight,
        timeouts=EndpointTimeouts(t.connect_s, t.first_byte_s, t.total_s),
        api_key=api_key,
    )
