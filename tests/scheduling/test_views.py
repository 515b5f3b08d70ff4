"""The per-request views are built positionally for speed (a named tuple's keywords cost more on every
request), so a field moved in the type and not at the call, or the other way round, would silently put
one signal in another's place. These tests build each view as production does and read every field back."""

from __future__ import annotations

import random

import orjson

from sits.api.http_types import HttpRequest
from sits.api.request_intake import RequestIntake
from sits.api.schemas import CHAT_COMPLETION
from sits.pipeline.context import Passthrough
from sits.pipeline.pool_planner import PoolPlanner
from sits.scheduling.scheduler import Scheduler
from sits.state.circuit_breaker import CircuitBreakers
from sits.state.endpoint_health import HealthBoard
from sits.state.endpoint_stats import StatsStore
from sits.state.engine_load import EngineLoad
from sits.state.routing_table import Endpoint, ModelEntry
from sits.telemetry.tracing import NO_TRACE


def test_endpoint_views_put_every_signal_in_its_field():
    stats = StatsStore()
    s = stats.get("m/ep-0")
    s.in_flight, s.latency_ewma_s, s.latency_p95_s, s.latency_peak_ewma_s = 3, 0.11, 0.22, 0.33
    s.ttft_ewma_s, s.error_rate, s.qps, s.dynamic_weight = 0.044, 0.055, 66.0, 0.77
    s.engine = EngineLoad("vllm", running=2, waiting=8, kv_cache_usage=0.9, memory_usage=0.91)
    health = HealthBoard()
    health.track("m/ep-0", probed=False)
    model = ModelEntry("m", (Endpoint("m/ep-0", "m", "m", "http", "127.0.0.1", 1, "/v1", weight=2.5),),
                       tier="base", features=frozenset({"tools"}), context_window=4096, latency_p95_ms=350.0,
                       cost_per_1k_input=0.001, cost_per_1k_output=0.002)
    planner = PoolPlanner(Scheduler(None, {}), stats, health, CircuitBreakers(), None, random.Random(0))  # type: ignore[arg-type]
    (view,) = planner.views(model, now=0.0)
    assert view._asdict() == {
        "id": "m/ep-0", "model": "m", "weight": 2.5, "healthy": True, "in_flight": 3, "latency_ewma_s": 0.11,
        "latency_p95_s": 0.22, "latency_peak_ewma_s": 0.33, "ttft_s": 0.044, "error_rate": 0.055, "qps": 66.0,
        "queue_depth": 8, "kv_cache_usage": 0.9, "memory_usage": 0.91, "dynamic_weight": 0.77,
        "features": frozenset({"tools"}), "context_window": 4096, "tier": "base", "cost_per_1k_tokens": 0.003,
        "sla_ms": 350.0,
    }


def test_the_routing_request_puts_every_part_in_its_field():
    body = CHAT_COMPLETION.parse(orjson.dumps({
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 7,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}))
    request = HttpRequest("POST", "/v1/chat/completions", "", {"x-sits-sla-ms": "250"}, b"")
    passthrough = Passthrough(b'{"model":"m","input":"hi"}')
    routing = RequestIntake.routing("/chat/completions", CHAT_COMPLETION, body, False, request, "rid-1", "hi",
                                    0, "scope-1", NO_TRACE, passthrough)
    assert routing._asdict() == {
        "api": "/chat/completions", "model": "m", "stream": False, "request_id": "rid-1", "prompt_text": "hi",
        "priority": 0, "tenant": None, "cache_scope": "scope-1", "trace": NO_TRACE, "needs": frozenset({"tools"}),
        "max_tokens": 7, "sla_ms": 250.0, "passthrough": passthrough,
    }
