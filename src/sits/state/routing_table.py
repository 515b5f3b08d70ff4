"""The immutable routing table the data plane reads.

The control plane builds a new table and swaps it in whole; a request keeps
the table it started with, so a change never half-applies to a request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from sits.state.token_price import Price


@dataclass(frozen=True, slots=True)
class EndpointTimeouts:
    connect_s: float = 5.0
    first_byte_s: float = 120.0
    total_s: float = 600.0


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One serving endpoint of a model: an OpenAI-compatible base URL."""

    id: str
    model: str
    upstream_model: str
    scheme: str
    host: str
    port: int
    base_path: str  # e.g. "/v1", no trailing slash
    weight: float = 1.0
    timeouts: EndpointTimeouts = EndpointTimeouts()
    api_key: str | None = field(default=None, repr=False)  # resolved from the env var named in config
    guarded: bool = False  # registered through the control API: connect only to addresses the policy allows
    health_check_path: str | None = None
    # The HTTP API it speaks: "openai"; "anthropic" (translated in the send step); "responses" (OpenAI's,
    # and /v1/responses requests are passed through to it as sent)
    api: str = "openai"
    price: Price | None = None  # this endpoint's own price; None: its model's

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}{self.base_path}"


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """A model as routing sees it; the metadata feeds filters and scorers (capability, SLA, cost...)."""

    name: str
    endpoints: tuple[Endpoint, ...]
    tier: str | None = None
    owned_by: str = "sits"
    description: str = ""
    capabilities: frozenset[str] = frozenset()  # free-form labels; never read as features
    features: frozenset[str] | None = None  # tools, vision, json; None: not declared, assumed able
    context_window: int | None = None
    latency_p95_ms: float | None = None
    cost_per_1k_input: float | None = None
    cost_per_1k_output: float | None = None
    max_concurrency: int | None = None
    tokenizer_family: str | None = None
    version: str | None = None
    fallbacks: tuple[str, ...] = ()  # models to try, in order, when every endpoint of this one fails
    cache: bool = False  # answer from the semantic cache before calling an upstream (opt-in)
    price: Price | None = None  # USD per million tokens by kind (also from cost_per_1k_*); None: free


@dataclass(frozen=True, slots=True)
class AliasSplit:
    """A canary: `weight` of an alias's new requests go to its target, the rest to `stable`.
    `draw` (uniform in [0, 1), seeded by the composition root) decides each request."""

    stable: str
    weight: float
    draw: Callable[[], float] = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class RoutingTable:
    models: Mapping[str, ModelEntry]
    aliases: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    version: int = 1
    splits: Mapping[str, AliasSplit] = field(default_factory=lambda: MappingProxyType({}))  # canaries by alias

    def resolve(self, name: str) -> ModelEntry | None:
        """A model by its name or one of its aliases (a canary alias: its target or its stable model)."""
        return self.models.get(name) or self.aliased(name)

    def aliased(self, name: str) -> ModelEntry | None:
        """The model an alias names (a canary alias: its target or its stable model); None for any other name."""
        target = self.aliases.get(name)
        if target is None:
            return None
        split = self.splits.get(name) if self.splits else None
        if split is not None and split.draw() >= split.weight:
            target = split.stable
        return self.models.get(target)

    def names(self) -> list[str]:
        """Every name a client may ask for: models, then aliases."""
        return [*self.models, *self.aliases]

    def models_in_tier(self, tier: str) -> list[ModelEntry]:
        return [m for m in self.models.values() if m.tier == tier]
