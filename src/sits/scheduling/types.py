"""The values scheduling works on: a request's needs and per-request endpoint views."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

# Features a request may need and a model may declare (`features:`), as opposed to a model's
# free-form `capabilities` labels, which routing never reads as features.
TOOLS = "tools"
VISION = "vision"
JSON_OUTPUT = "json"
FEATURES = (TOOLS, VISION, JSON_OUTPUT)


class SchedulingRequest(NamedTuple):
    """What scheduling needs to know about one request; built once by the director.

    Named tuples (immutable, compared by value) rather than frozen dataclasses, here and for
    `EndpointView`: one request and a view per endpoint are built for every decision, and a frozen
    dataclass's __init__ (one object.__setattr__ per field) costs several times a tuple's."""

    model: str
    api: str
    stream: bool
    prompt_tokens_estimate: int = 0
    max_tokens: int = 0  # 0: the client did not say
    needs: frozenset[str] = frozenset()  # features, e.g. {"tools", "vision"}
    sla_ms: float | None = None  # the request's own latency bound, if it carries one
    tier: str | None = None
    prefix_hash: int | None = None  # stable hash of the prompt's leading text, for prefix affinity
    adapter_endpoints: frozenset[str] = frozenset()  # endpoints that have the requested LoRA adapter loaded
    # The exact prompt token count for this model's tokenizer, computed only if called (pure, no I/O).
    count_prompt_tokens: Callable[[], int] | None = None


class EndpointView(NamedTuple):
    """A frozen per-request view of one endpoint: identity plus the live signals that matter.

    Latencies are seconds; `kv_cache_usage` and `memory_usage` are fractions 0..1 or None
    when the engine does not report them (unknown never filters an endpoint out).
    """

    id: str
    model: str
    weight: float
    healthy: bool
    in_flight: int
    latency_ewma_s: float
    latency_p95_s: float = 0.0
    latency_peak_ewma_s: float = 0.0
    ttft_s: float = 0.0
    error_rate: float = 0.0
    qps: float = 0.0
    queue_depth: int = 0  # requests waiting inside the engine (from its /metrics)
    kv_cache_usage: float | None = None
    memory_usage: float | None = None
    dynamic_weight: float = 1.0
    features: frozenset[str] | None = None  # None: not declared, assumed capable
    context_window: int | None = None
    tier: str | None = None
    cost_per_1k_tokens: float = 0.0
    sla_ms: float | None = None  # the model's latency SLA
