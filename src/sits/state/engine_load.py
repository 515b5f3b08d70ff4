"""What an inference engine says about its own load, from its Prometheus /metrics."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """One scrape's reading; a field the engine did not report is None (unknown, not zero)."""

    engine: str  # "vllm", "sglang", "llama.cpp" or "sits-local" (an embedded worker)
    running: int | None = None  # requests being executed in the engine's batch
    waiting: int | None = None  # requests queued inside the engine
    kv_cache_usage: float | None = None  # fraction 0..1 of the KV cache in use
    observed_at: float = 0.0  # the scraper's monotonic clock at the scrape
    # Memory pressure 0..1: an engine's KV-cache use (its memory for new sequences), or for an
    # embedded worker its resident memory against what the host still has available.
    memory_usage: float | None = None
