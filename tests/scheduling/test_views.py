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
from sits.scheduling.profile_handlers import SingleProfileHandler
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
    planner = PoolPlanner(Scheduler(SingleProfileHandler(), {}), stats, health, CircuitBreakers(), None,
                          random.Random(0))
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
                                    0, "scope-1", NO_TRACE, passthrough, True)
    assert routing._asdict() == {
        "api": "/chat/completions", "model": "m", "stream": False, "request_id": "rid-1", "prompt_text": "hi",
        "priority": 0, "tenant": None, "cache_scope": "scope-1", "trace": NO_TRACE, "needs": frozenset({"tools"}),
        "max_tokens": 7, "sla_ms": 250.0, "passthrough": passthrough, "translated": True,
    }


def test_the_scheduling_request_plan_and_decision_are_whole_and_in_field_order():
    """`new_tuple` checks neither the number nor the order of fields: a short tuple would fail only when
    a later field is read. One endpoint (the one-candidate decision) and two (the scored one)."""
    from sits.pipeline.context import RoutingRequest
    from sits.pipeline.fallback import Plan
    from sits.scheduling.framework import Decision
    from sits.scheduling.policy import DEFAULT_POLICY, build_scheduler
    from sits.scheduling.types import SchedulingRequest

    seen: list[SchedulingRequest] = []

    class Recording:  # a filter that keeps every endpoint and remembers the request it was given
        name = "recording"

        def filter(self, request, endpoints, rng):
            seen.append(request)
            return endpoints

    scheduler = build_scheduler(DEFAULT_POLICY)
    profile = next(iter(scheduler.profiles.values()))
    object.__setattr__(profile, "filters", (Recording(), *profile.filters))
    health = HealthBoard()
    request = RoutingRequest("/chat/completions", "m", True, "rid-1", "a prompt of some length", 1, None,
                             "anonymous", NO_TRACE, frozenset({"tools"}), 64, 250.0)
    for count in (1, 2):
        endpoints = tuple(Endpoint(f"m/ep-{i}", "m", "m", "http", "127.0.0.1", 1 + i, "/v1") for i in range(count))
        for e in endpoints:
            health.track(e.id, probed=False)
        model = ModelEntry("m", endpoints, tier="base", features=frozenset({"tools"}))
        planner = PoolPlanner(scheduler, StatsStore(), health, CircuitBreakers(), None, random.Random(0))
        plan = planner.model(model, request, now=0.0)
        assert len(plan) == len(Plan._fields) and plan.model is model and plan.kind == "primary"
        assert plan.rejected is None and plan.tier is None and set(plan.endpoints) == set(endpoints)
        decision = plan.decision
        assert decision is not None and len(decision) == len(Decision._fields)
        assert decision.shadows == () and decision.rejected_by is None and len(decision.scored) == count
        assert (decision.raw_scores, decision.totals) == ((), ()) if count == 1 else len(decision.totals) == 2
        wanted = seen[-1]
        assert len(wanted) == len(SchedulingRequest._fields)
        assert wanted._asdict() == {
            "model": "m", "api": "/chat/completions", "stream": True, "prompt_tokens_estimate": 5,
            "max_tokens": 64, "needs": frozenset({"tools"}), "sla_ms": 250.0, "tier": None,
            "prefix_hash": wanted.prefix_hash if count > 1 else None, "adapter_endpoints": frozenset(),
            "count_prompt_tokens": None,
        }
        assert (wanted.prefix_hash is not None) == (count > 1)
