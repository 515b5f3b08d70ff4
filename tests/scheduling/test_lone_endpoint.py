"""A model with one endpoint that no request can turn away is decided once per routing-table entry
(`Scheduler.lone`, `PoolPlanner` keeps the plan): the same outcome as scheduling it per request, and
per-request scheduling again wherever a request could change it."""

from __future__ import annotations

import random

import pytest

from sits.pipeline.context import RoutingRequest
from sits.pipeline.pool_planner import PoolPlanner
from sits.scheduling.metrics import SchedulingMetrics
from sits.scheduling.policy import DEFAULT_POLICY, RoutingPolicy, build_scheduler
from sits.scheduling.registry import builtin_plugins
from sits.scheduling.types import EndpointView
from sits.state.circuit_breaker import CircuitBreakers
from sits.state.endpoint_health import HealthBoard
from sits.state.endpoint_stats import StatsStore
from sits.state.routing_table import Endpoint, ModelEntry
from tests.scheduling.test_plugin_contracts import rich_request

P = builtin_plugins()
DEFAULT_FILTERS = ["model-match-filter", "healthy-filter", "capability-filter", "context-window-filter", "sla-filter"]


def lone_view(**declared) -> EndpointView:
    return EndpointView("only", "m", 1.0, True, 0, 0.1, **declared)


@pytest.mark.parametrize("declared", [{}, {"context_window": 4096}, {"features": frozenset({"tools"})},
                                      {"sla_ms": 50.0}])
@pytest.mark.parametrize("seed", range(60))
def test_a_filter_that_always_keeps_a_lone_endpoint_keeps_it_for_any_request(declared, seed):
    """The law `Profile.lone` relies on, for every built-in filter that states it: whatever the request and
    the endpoint's live signals (health, latency, errors), a pool of that one endpoint is kept."""
    rng = random.Random(seed)
    request = rich_request(rng)._replace(model="m")
    live = {"healthy": rng.random() < 0.5, "latency_p95_s": rng.choice([0.0, 0.05, 3.0]),
            "error_rate": rng.random()}
    endpoint = lone_view(**declared)._replace(**live)
    for name in (n for n, cls in P.filters.items() if hasattr(cls, "always_keeps_one")):
        for params in ({}, {"fail_open": False}) if "fail_open" in P.filters[name].Params.model_fields else ({},):
            f = P.create("filter", name, params)
            if f.always_keeps_one(endpoint):
                assert list(f.filter(request, [endpoint], rng)) == [endpoint], (name, params)


def test_the_default_filters_keep_an_undeclared_lone_endpoint_and_a_declared_window_is_checked():
    scheduler = build_scheduler(DEFAULT_POLICY)
    decided = scheduler.lone(lone_view())
    assert decided is not None and decided.pick == "only" and decided.reason == "only endpoint"
    assert scheduler.lone(lone_view(context_window=1024)) is None  # a long prompt is turned away
    assert scheduler.lone(lone_view(features=frozenset())) is None  # a request that needs tools is


def test_a_filter_that_does_not_say_so_schedules_every_request():
    closed = RoutingPolicy.model_validate({"profiles": {"default": {
        "filters": [{"type": t} for t in DEFAULT_FILTERS[:1]]
        + [{"type": "healthy-filter", "params": {"fail_open": False}}],
        "picker": {"type": "max-score-picker"}}}})
    assert build_scheduler(closed).lone(lone_view()) is None
    tiered = RoutingPolicy.model_validate({"profiles": {"default": {
        "filters": [{"type": "tier-filter"}], "picker": {"type": "max-score-picker"}}}})
    assert build_scheduler(tiered).lone(lone_view()) is None  # no always_keeps_one: it may turn it away


def planner(metrics: SchedulingMetrics | None = None, policy: RoutingPolicy = DEFAULT_POLICY
            ) -> tuple[PoolPlanner, HealthBoard]:
    scheduler = build_scheduler(policy, metrics=metrics) if metrics is not None else build_scheduler(policy)
    health = HealthBoard()
    return PoolPlanner(scheduler, StatsStore(), health, CircuitBreakers(), None, random.Random(0)), health


def entry(name: str = "m", **declared) -> ModelEntry:
    return ModelEntry(name, (Endpoint(f"{name}/ep-0", name, name, "http", "127.0.0.1", 1, "/v1"),), **declared)


def request(prompt: str = "hi") -> RoutingRequest:
    return RoutingRequest("/chat/completions", "m", False, "rid", prompt)


def test_the_kept_plan_is_the_scheduled_one_and_each_request_is_counted():
    metrics = SchedulingMetrics(lambda: 0)
    kept, _ = planner(metrics)
    scheduled, _ = planner(SchedulingMetrics(lambda: 0))
    m = entry()
    first = kept.model(m, request(), 100.0)
    again = kept.model(m, request("something else entirely"), 101.0)
    assert again is first  # decided once for the entry
    by_scheduling = scheduled.model(m, request(), 100.0, allowed=lambda e: True)  # `allowed`: always scheduled
    assert (first.endpoints, first.kind, first.route) == (by_scheduling.endpoints, by_scheduling.kind,
                                                           by_scheduling.route)
    assert kept.model(m, request(), 100.0, kind="fallback").kind == "fallback"
    assert metrics.decisions["default"] == 3


def test_an_endpoint_that_cannot_be_sent_to_has_no_plan():
    kept, health = planner()
    m = entry()
    assert kept.model(m, request(), 100.0).endpoints == m.endpoints
    health.track("m/ep-0", probed=True)  # pending until its first probe passes
    assert kept.model(m, request(), 101.0).endpoints == ()
    health.probe_result("m/ep-0", True, 102.0)
    assert kept.model(m, request(), 103.0).endpoints == m.endpoints


def test_a_declared_window_is_checked_per_request_and_a_new_entry_is_decided_again():
    kept, _ = planner()
    assert kept.model(entry(), request("x" * 40_000), 100.0).endpoints  # no window declared: it goes
    windowed = entry(context_window=1024)
    too_long = kept.model(windowed, request("x" * 40_000), 100.0)
    assert too_long.endpoints == () and too_long.rejected is not None and too_long.rejected.param == "messages"
    assert kept.model(windowed, request("short"), 100.0).endpoints == windowed.endpoints


@pytest.mark.parametrize("seed", range(30))
def test_the_decision_made_once_is_what_scheduling_any_request_decides(seed):
    scheduler = build_scheduler(DEFAULT_POLICY)
    view = lone_view()
    wanted = rich_request(random.Random(seed))._replace(model="m")
    full = scheduler.schedule(wanted, [view], random.Random(seed))
    once = scheduler.lone(view)
    assert once is not None and (full.candidates, full.profile, full.reason) == (once.candidates, once.profile,
                                                                                 once.reason)
