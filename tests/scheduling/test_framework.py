"""The framework: filters -> weighted scorers -> picker, metrics, explanations, the scheduler."""

from __future__ import annotations

import itertools
import random

from sits.scheduling.framework import Profile, WeightedScorer
from sits.scheduling.metrics import SchedulingMetrics
from sits.scheduling.policy import RoutingPolicy, build_scheduler
from sits.scheduling.registry import builtin_plugins
from sits.scheduling.types import EndpointView, SchedulingRequest

P = builtin_plugins()
REQ = SchedulingRequest("m", "/chat/completions", False)


def eps(n: int) -> list[EndpointView]:
    return [EndpointView(f"e{i}", "m", 1.0, True, i, 0.1) for i in range(n)]


def fake_timer():
    ticks = itertools.count(0, 1000)
    return lambda: next(ticks)


def test_metrics_time_every_plugin_and_count_decisions():
    metrics = SchedulingMetrics(fake_timer(), timed_every=1)
    profile = Profile("p", (P.create("filter", "healthy-filter"),),
                      (WeightedScorer(P.create("scorer", "least-inflight-scorer"), 1.0),),
                      P.create("picker", "max-score-picker"))
    for _ in range(3):
        profile.run(REQ, eps(4), random.Random(0), metrics)
    timings = {t.name: t for t in metrics.snapshot()}
    assert set(timings) == {"healthy-filter", "least-inflight-scorer", "max-score-picker"}
    assert all(t.calls == 3 and t.total_ns == 3000 for t in timings.values())
    assert metrics.decisions == {"p": 3}


def test_metrics_time_one_decision_in_n_and_count_all():
    metrics = SchedulingMetrics(fake_timer(), timed_every=4)
    profile = Profile("p", (P.create("filter", "healthy-filter"),),
                      (WeightedScorer(P.create("scorer", "least-inflight-scorer"), 1.0),),
                      P.create("picker", "max-score-picker"))
    for _ in range(9):
        profile.run(REQ, eps(4), random.Random(0), metrics)
    timings = {t.name: t for t in metrics.snapshot()}
    assert {t.calls for t in timings.values()} == {3}  # decisions 1, 5 and 9
    assert metrics.decisions == {"p": 9}


def test_a_broken_scorer_abstains_and_is_counted():
    class Short:
        name = "short-scorer"

        def score(self, request, endpoints):
            return [1.0]

    metrics = SchedulingMetrics(fake_timer())
    profile = Profile("p", (), (WeightedScorer(Short(), 1.0), WeightedScorer(P.create("scorer", "least-inflight-scorer"), 1.0)),
                      P.create("picker", "max-score-picker"))
    decision = profile.run(REQ, eps(3), random.Random(0), metrics)
    assert decision.pick == "e0"
    assert {t.name: t.broken for t in metrics.snapshot()}["short-scorer"] == 1


def test_empty_filter_result_names_the_filter():
    profile = Profile("p", (P.create("filter", "tier-filter"),), (), P.create("picker", "max-score-picker"))
    decision = profile.run(SchedulingRequest("m", "/x", False, tier="heavy"), eps(3), random.Random(0))
    assert decision.candidates == () and decision.reason == "no endpoint passed tier-filter"
    assert decision.route_header() == "profile=p; pick=-; reason=no endpoint passed tier-filter"


def test_decision_explains_itself():
    scheduler = build_scheduler(RoutingPolicy())
    decision = scheduler.schedule(REQ, eps(5), random.Random(0))
    header = decision.route_header()
    assert header.startswith("profile=default; pick=e0; reason=max-score-picker score ")
    explained = decision.explain()
    assert explained["pick"] == "e0" and explained["considered"] == 5
    row = explained["candidates"][0]
    assert {"queue-depth-scorer", "kv-cache-scorer", "prefix-affinity-scorer", "adapter-affinity-scorer"} <= set(row)


def test_split_handler_and_shadow_profiles():
    policy = RoutingPolicy.model_validate({
        "handler": {"type": "split-profile-handler", "params": {"split": {"a": 0.5, "b": 0.5}}},
        "profiles": {
            "a": {"picker": {"type": "round-robin-picker"}},
            "b": {"scorers": [{"type": "least-inflight-scorer"}]},
            "shadow": {"scorers": [{"type": "cost-scorer"}]},
        },
        "shadow_profiles": ["shadow"],
    })
    scheduler = build_scheduler(policy)
    rng = random.Random(4)
    seen = {scheduler.schedule(REQ, eps(3), rng).profile for _ in range(50)}
    assert seen == {"a", "b"}
    decision = scheduler.schedule(REQ, eps(3), rng)
    assert [s.profile for s in decision.shadows] == ["shadow"]


def test_schedules_are_reproducible_from_the_seed():
    def run() -> list[str | None]:
        scheduler = build_scheduler(RoutingPolicy.model_validate({"profiles": {"default": {
            "filters": [{"type": "random-sample-filter", "params": {"size": 2}}],
            "scorers": [{"type": "peak-ewma-scorer"}]}}}))
        rng = random.Random(11)
        return [scheduler.schedule(REQ, eps(10), rng).pick for _ in range(100)]

    assert run() == run()
