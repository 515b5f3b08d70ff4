"""Reading vLLM's and SGLang's Prometheus /metrics into an `EngineLoad`.

The text is parsed by prometheus-client's own exposition-format parser. Values are
summed over label sets (data-parallel engines export one series per engine) except
the KV-cache fraction, which is averaged.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from sits.errors import UpstreamProtocolError
from sits.state.engine_load import EngineLoad


@dataclass(frozen=True, slots=True)
class _Names:
    engine: str
    running: tuple[str, ...]
    waiting: tuple[str, ...]
    kv_cache: tuple[str, ...]  # first found wins, newest name first


_ENGINES = (
    # vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc in the V1 engine; both are 0..1.
    _Names("vllm", ("vllm:num_requests_running",), ("vllm:num_requests_waiting",),
           ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
    # SGLang's token_usage is the fraction of KV-cache token slots in use.
    _Names("sglang", ("sglang:num_running_reqs",), ("sglang:num_queue_reqs",), ("sglang:token_usage",)),
)


def parse_engine_metrics(text: str, observed_at: float = 0.0) -> EngineLoad | None:
    """The engine's load from its /metrics text; None when it is neither vLLM nor SGLang.

    Raises UpstreamProtocolError for text that is not the Prometheus exposition format.
    """
    values: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                values.setdefault(sample.name, []).append(sample.value)
    except (ValueError, TypeError, IndexError) as exc:
        raise UpstreamProtocolError(f"engine /metrics is not Prometheus text: {exc}") from None
    for names in _ENGINES:
        running = _total(values, names.running)
        waiting = _total(values, names.waiting)
        kv = _mean(values, names.kv_cache)
        if running is None and waiting is None and kv is None:
            continue
        return EngineLoad(
            engine=names.engine,
            running=None if running is None else int(running),
            waiting=None if waiting is None else int(waiting),
            kv_cache_usage=None if kv is None else min(1.0, max(0.0, kv)),
            observed_at=observed_at,
        )
    return None


def _total(values: dict[str, list[float]], names: tuple[str, ...]) -> float | None:
    for name in names:
        found = [v for v in values.get(name, ()) if v == v]
        if found:
            return sum(found)
    return None


def _mean(values: dict[str, list[float]], names: tuple[str, ...]) -> float | None:
    for name in names:
        found = [v for v in values.get(name, ()) if v == v]
        if found:
            return sum(found) / len(found)
    return None
