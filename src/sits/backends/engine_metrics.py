"""Reading model servers' Prometheus /metrics (vLLM, SGLang, llama.cpp's server, SITS's embedded
workers) and llama.cpp's /slots into an `EngineLoad`.

The text is parsed by prometheus-client's own exposition-format parser. Values are
summed over label sets (data-parallel engines export one series per engine) except
the fractions, which are averaged. llama.cpp's /metrics has no KV-cache gauge: its
/slots (the tokens each busy slot holds against the slot's context) supplies it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import orjson
from prometheus_client.parser import text_string_to_metric_families

from sits.errors import UpstreamProtocolError
from sits.state.engine_load import EngineLoad

LLAMA_CPP = "llama.cpp"


@dataclass(frozen=True, slots=True)
class _Names:
    engine: str
    running: tuple[str, ...]
    waiting: tuple[str, ...]
    kv_cache: tuple[str, ...] = ()  # first found wins, newest name first
    memory: tuple[str, ...] = ()  # a memory-pressure fraction of its own (else the KV-cache use)


_ENGINES = (
    # vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc in the V1 engine; both are 0..1.
    _Names("vllm", ("vllm:num_requests_running",), ("vllm:num_requests_waiting",),
           ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
    # SGLang's token_usage is the fraction of KV-cache token slots in use.
    _Names("sglang", ("sglang:num_running_reqs",), ("sglang:num_queue_reqs",), ("sglang:token_usage",)),
    # llama-server started with --metrics; older builds also had kv_cache_usage_ratio.
    _Names(LLAMA_CPP, ("llamacpp:requests_processing",), ("llamacpp:requests_deferred",),
           ("llamacpp:kv_cache_usage_ratio",)),
    # SITS's embedded llama.cpp workers (backends/local/worker.py).
    _Names("sits-local", ("sits_local_requests_running",), ("sits_local_requests_waiting",),
           memory=("sits_local_memory_usage_ratio",)),
)


def parse_engine_metrics(text: str, observed_at: float = 0.0) -> EngineLoad | None:
    """The engine's load from its /metrics text; None when no known engine's names are there.

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
        memory = _mean(values, names.memory)
        if running is None and waiting is None and kv is None and memory is None:
            continue
        kv = None if kv is None else _unit(kv)
        return EngineLoad(
            engine=names.engine,
            running=None if running is None else int(running),
            waiting=None if waiting is None else int(waiting),
            kv_cache_usage=kv,
            observed_at=observed_at,
            memory_usage=kv if memory is None else _unit(memory),
        )
    return None


def with_llama_cpp_slots(load: EngineLoad, body: bytes) -> EngineLoad:
    """`load` completed from llama-server's /slots: the KV-cache use (tokens held by busy slots against
    every slot's context) and, where /metrics said nothing, the busy slots as running requests."""
    try:
        slots = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise UpstreamProtocolError(f"llama.cpp /slots is not JSON: {exc}") from None
    if not isinstance(slots, list) or not slots:
        raise UpstreamProtocolError("llama.cpp /slots is not a list of slots")
    capacity = held = busy = 0
    for slot in slots:
        if not isinstance(slot, dict):
            raise UpstreamProtocolError("llama.cpp /slots holds something that is not a slot")
        capacity += _int(slot.get("n_ctx"))
        if slot.get("is_processing"):
            busy += 1
            decoded = slot.get("next_token")
            decoded = decoded[0] if isinstance(decoded, list) and decoded else decoded
            held += _int(slot.get("n_prompt_tokens")) + (_int(decoded.get("n_decoded"))
                                                         if isinstance(decoded, dict) else 0)
    kv = _unit(held / capacity) if capacity else None
    return dataclasses.replace(load, kv_cache_usage=kv, memory_usage=kv,
                               running=load.running if load.running is not None else busy)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _unit(x: float) -> float:
    return min(1.0, max(0.0, x))


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
