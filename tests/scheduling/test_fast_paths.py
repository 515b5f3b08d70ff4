"""The framework's shortcuts: predicate filters, the NaN check on totals, one endpoint, sampled pools."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits.scheduling.framework import Profile, WeightedScorer
from sits.scheduling.metrics import SchedulingMetrics
from sits.scheduling.plugins.prefix_affinity_scorer import PrefixAffinityScorer
from sits.scheduling.policy import DEFAULT_POLICY, RoutingPolicy, build_scheduler
from sits.scheduling.registry import builtin_plugins
from tests.scheduling.test_plugin_contracts import rich_request, views

from sits.scheduling.types import EndpointView, SchedulingRequest

P = builtin_plugins()
REQ = SchedulingRequest("m", "/chat/completions", False)
PREDICATE_FILTERS = sorted(n for n, cls in P.filters.items() if hasattr(cls, "keeps"))


def test_the_per_endpoint_filters_declare_predicates():
    assert {"model-match-filter", "healthy-filter", "capability-filter", "memory-headroom-filter", "sla-filter",
            "tier-filter"} <= set(PREDICATE_FILTERS)


@pytest.mark.parametrize("name", PREDICATE_FILTERS)
@pytest.mark.parametrize("seed", range(40))
def test_a_predicate_filter_keeps_exactly_what_its_predicate_keeps(name, seed):
    """The law sampled (strict) decisions rely on: filter() == the predicate's pass unless that is
    empty, and a None predicate keeps everything."""
    for params in ({}, {"fail_open": False}) if "fail_open" in P.filters[name].Params.model_fields else ({},):
        f = P.create("filter", name, params)
        endpoints = views(1 + seed % 9, seed)
        request = rich_request(random.Random(seed)) if seed % 3 else REQ
        kept = list(f.filter(request, endpoints, random.Random(0)))
        p = f.keeps(request)
        strict = list(endpoints) if p is None else [e for e in endpoints if p(e)]
        if strict:
            assert kept == strict
        else:
            assert kept in ([], list(endpoints))  # fail-open keeps all, or nothing


@pytest.mark.parametrize("name", sorted(n for n, cls in P.scorers.items() if hasattr(cls, "abstains")))
@pytest.mark.parametrize("seed", range(30))
def test_a_scorer_abstains_only_when_every_score_is_zero(name, seed):
    scorer = P.create("scorer", name)
    endpoints = views(1 + seed % 9, seed)
    rng = random.Random(seed)
    request = rich_request(rng)._replace(adapter_endpoints=frozenset(
        e.id for e in endpoints if rng.random() < 0.5) if seed % 2 else frozenset())
    if scorer.abstains(request):
        assert list(scorer.score(request, endpoints)) == [0.0] * len(endpoints)


def test_nan_that_min_and_max_miss_is_clamped_through_the_totals():
    class MidNan:
        name = "mid-nan-scorer"

        def score(self, request, endpoints):
            return [0.5, float("nan"), 0.2]

    metrics = SchedulingMetrics(lambda: 0, timed_every=1)
    profile = Profile("p", (), (WeightedScorer(MidNan(), 1.0),), P.create("picker", "max-score-picker"))
    decision = profile.run(REQ, views(3, 1), random.Random(0), metrics)
    assert list(decision.scores[0].scores) == [0.5, 0.0, 0.2]
    assert list(decision.totals) == [0.5, 0.0, 0.2] and decision.pick == "e0"
    assert {t.name: t.clamped for t in metrics.snapshot()}["mid-nan-scorer"] == 1


def test_an_all_zero_scorer_changes_nothing_but_is_explained():
    scheduler = build_scheduler(RoutingPolicy())
    endpoints = [EndpointView(f"e{i}", "m", 1.0, True, i, 0.1) for i in range(4)]
    decision = scheduler.schedule(REQ, endpoints, random.Random(0))  # no prefix, no adapter: both all 0
    by_name = {s.name: list(s.scores) for s in decision.scores}
    assert by_name["prefix-affinity-scorer"] == [0.0] * 4
    assert by_name["cost-scorer"] == [1.0] * 4  # one model, one price
    assert by_name["error-rate-scorer"] == [1.0] * 4  # no failures
    expected = [q + 0.5 * k + 0.5 + 1.0 for q, k in zip(by_name["queue-depth-scorer"], by_name["kv-cache-scorer"])]
    assert list(decision.totals) == pytest.approx(expected)


def test_one_endpoint_still_meets_the_hard_filters():
    scheduler = build_scheduler(DEFAULT_POLICY)
    small = EndpointView("only", "m", 1.0, True, 0, 0.1, context_window=1024)
    fits = scheduler.schedule(SchedulingRequest("m", "/chat/completions", False, 500), [small], random.Random(0))
    assert fits.pick == "only" and fits.reason == "only endpoint"
    too_long = scheduler.schedule(SchedulingRequest("m", "/chat/completions", False, 5000), [small], random.Random(0))
    assert too_long.candidates == () and too_long.reason == "no endpoint passed context-window-filter"
    assert too_long.rejected_by == "context-window-filter"
    needs_tools = scheduler.schedule(SchedulingRequest("m", "/chat/completions", False, needs=frozenset({"tools"})),
                                     [EndpointView("only", "m", 1.0, True, 0, 0.1, features=frozenset())],
                                     random.Random(0))
    assert needs_tools.candidates == () and needs_tools.reason == "no endpoint passed capability-filter"


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 40), key=st.integers(0, 2**64 - 1), seed=st.integers(0, 10_000), weighted=st.booleans())
def test_prefix_owner_without_a_ring_is_the_ring_walks_owner(n, key, seed, weighted):
    rng = random.Random(seed)
    endpoints = [EndpointView(f"e{rng.randrange(10**6)}-{i}", "m", rng.choice([1.0, 2.0, 4.0]) if weighted else 1.0,
                              True, rng.randrange(6), 0.1) for i in range(n)]
    request = SchedulingRequest("m", "/x", False, prefix_hash=key)
    scorer = PrefixAffinityScorer()
    first = scorer.score(request, endpoints)  # first sight: endpoint by endpoint
    second = scorer.score(request, endpoints)  # second sight: builds and walks the ring
    assert first == second and sum(second) <= 1.0


def test_prefixes_spread_over_endpoints_in_proportion_to_weight():
    endpoints = [EndpointView("big", "m", 4.0, True, 0, 0.1), EndpointView("small", "m", 1.0, True, 0, 0.1)]
    scorer, rng = PrefixAffinityScorer(), random.Random(2)
    owners = [scorer.score(SchedulingRequest("m", "/x", False, prefix_hash=rng.getrandbits(64)), endpoints)
              for _ in range(2000)]
    share = sum(s[0] for s in owners) / len(owners)
    assert 0.72 < share < 0.88  # 4/5 of the ring belongs to the endpoint of weight 4


def big_pool(n: int, healthy=lambda i: True) -> list[EndpointView]:
    rng = random.Random(n)
    return [EndpointView(f"ep-{i}", "m", 1.0, healthy(i), rng.randrange(4), 0.2, latency_peak_ewma_s=0.2,
                         context_window=32768) for i in range(n)]


def test_a_large_pool_is_decided_over_a_bounded_sample():
    scheduler = build_scheduler(DEFAULT_POLICY)
    decision = scheduler.schedule(REQ, big_pool(2000), random.Random(1))
    assert decision.reason.endswith("sampled from 2000")
    assert len(decision.scored) <= 48 and len(decision.candidates) == 3


def test_a_sampled_pool_keeps_sending_a_prefix_to_its_owner():
    pool = [EndpointView(f"ep-{i}", "m", 1.0, True, 1, 0.2, latency_peak_ewma_s=0.2) for i in range(2000)]
    scheduler = build_scheduler(DEFAULT_POLICY)
    rng = random.Random(3)
    for prefix in (11, 2**40 + 7, 2**63 + 5):
        request = SchedulingRequest("m", "/chat/completions", False, prefix_hash=prefix)
        owner = PrefixAffinityScorer().pinned(request, pool)[0]
        picks = {scheduler.schedule(request, pool, rng).pick for _ in range(20)}
        assert picks == {pool[owner].id}  # 20 different samples, one endpoint: the prefix's owner


def test_a_sample_with_nothing_healthy_falls_back_to_the_whole_pool():
    """Fail-open must not open over a sample: the pool's one healthy endpoint is found."""
    pool = big_pool(2000, healthy=lambda i: i == 1234)
    scheduler = build_scheduler(DEFAULT_POLICY)
    rng = random.Random(5)
    picks = [scheduler.schedule(REQ, pool, rng) for _ in range(10)]
    assert {d.pick for d in picks} == {"ep-1234"}
    assert all(d.reason == "single candidate" for d in picks)


def test_sampling_is_off_unless_the_policy_sets_it():
    scheduler = build_scheduler(RoutingPolicy.model_validate({"profiles": {"default": {
        "scorers": [{"type": "least-inflight-scorer"}]}}}))
    decision = scheduler.schedule(REQ, big_pool(600), random.Random(0))
    assert len(decision.scored) == 600 and "sampled" not in decision.reason


def test_sample_params_are_validated():
    with pytest.raises(ValueError, match="size"):
        RoutingPolicy.model_validate({"profiles": {"default": {"sample": {"above": 10, "size": 1}}}})
    with pytest.raises(ValueError, match="extra"):
        RoutingPolicy.model_validate({"profiles": {"default": {"sample": {"above": 10, "sizes": 4}}}})
