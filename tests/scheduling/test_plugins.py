"""Each plugin's own behaviour, table-driven."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from sits.scheduling.registry import builtin_plugins
from sits.scheduling.types import EndpointView, SchedulingRequest

P = builtin_plugins()
RNG = random.Random(0)


def ep(i: str, **kw) -> EndpointView:
    base = dict(id=i, model="m", weight=1.0, healthy=True, in_flight=0, latency_ewma_s=0.1)
    base.update(kw)
    return EndpointView(**base)


def req(**kw) -> SchedulingRequest:
    return SchedulingRequest(**{"model": "m", "api": "/chat/completions", "stream": False, **kw})


def kept(filter_name: str, request: SchedulingRequest, endpoints, **params) -> list[str]:
    return [e.id for e in P.create("filter", filter_name, params).filter(request, endpoints, random.Random(0))]


@pytest.mark.parametrize("name,request_,endpoints,params,expected", [
    ("model-match-filter", req(), [ep("a"), ep("b", model="x")], {}, ["a"]),
    ("healthy-filter", req(), [ep("a", healthy=False), ep("b")], {}, ["b"]),
    ("healthy-filter", req(), [ep("a", healthy=False)], {}, ["a"]),  # fail open
    ("healthy-filter", req(), [ep("a", healthy=False)], {"fail_open": False}, []),
    ("healthy-filter", req(), [ep("a", error_rate=0.6), ep("b", error_rate=0.1)], {"max_error_rate": 0.5}, ["b"]),
    ("capability-filter", req(needs=frozenset({"tools"})),
     [ep("a", features=frozenset()), ep("b", features=frozenset({"tools", "vision"})), ep("c")], {}, ["b", "c"]),
    ("capability-filter", req(needs=frozenset({"vision"})), [ep("c")], {"undeclared_is_capable": False}, []),
    ("capability-filter", req(), [ep("a", features=frozenset())], {}, ["a"]),
    ("context-window-filter", req(prompt_tokens_estimate=3000, max_tokens=2000),
     [ep("a", context_window=4096), ep("b", context_window=8192), ep("c")], {}, ["b", "c"]),
    ("context-window-filter", req(prompt_tokens_estimate=3000),
     [ep("a", context_window=4096)], {"default_completion_tokens": 2000}, []),
    ("sla-filter", req(sla_ms=350.0),
     [ep("a", latency_p95_s=0.5), ep("b", latency_p95_s=0.2), ep("new", latency_p95_s=0.0)], {}, ["b", "new"]),
    ("sla-filter", req(), [ep("a", latency_p95_s=0.5, sla_ms=350.0), ep("b", latency_p95_s=0.5)], {}, ["b"]),
    ("sla-filter", req(), [ep("a", latency_p95_s=0.5)], {"default_sla_ms": 350.0, "fail_open": False}, []),
    ("sla-filter", req(sla_ms=350.0), [ep("a", latency_p95_s=0.5)], {}, ["a"]),  # fail open
    ("memory-headroom-filter", req(),
     [ep("a", kv_cache_usage=0.99), ep("b", kv_cache_usage=0.5), ep("c", memory_usage=0.97), ep("d")], {}, ["b", "d"]),
    ("memory-headroom-filter", req(), [ep("a", kv_cache_usage=0.85)], {"max_kv_cache_usage": 0.8, "fail_open": False}, []),
    ("tier-filter", req(tier="tiny"), [ep("a", tier="tiny"), ep("b", tier="heavy")], {}, ["a"]),
    ("tier-filter", req(), [ep("a", tier="tiny"), ep("b")], {}, ["a", "b"]),
    ("tier-filter", req(tier="base"), [ep("a", tier="tiny")], {"fail_open": True}, ["a"]),
])
def test_filter_table(name, request_, endpoints, params, expected):
    assert kept(name, request_, endpoints, **params) == expected


def test_random_sample_filter_keeps_size_endpoints_in_order():
    endpoints = [ep(f"e{i}") for i in range(50)]
    out = kept("random-sample-filter", req(), endpoints, size=2)
    assert len(out) == 2 and out == sorted(out, key=lambda i: int(i[1:]))


def scores(name: str, request: SchedulingRequest, endpoints, **params) -> list[float]:
    return list(P.create("scorer", name, params).score(request, endpoints))


@pytest.mark.parametrize("name,endpoints,best", [
    ("least-inflight-scorer", [ep("a", in_flight=4, weight=1.0), ep("b", in_flight=4, weight=3.0)], "b"),
    ("queue-depth-scorer", [ep("a", in_flight=1, queue_depth=9), ep("b", in_flight=3)], "b"),
    ("kv-cache-scorer", [ep("a", kv_cache_usage=0.9), ep("b", kv_cache_usage=0.2)], "b"),
    ("peak-ewma-scorer", [ep("a", latency_peak_ewma_s=1.0, in_flight=1), ep("b", latency_peak_ewma_s=0.2, in_flight=2)],
     "b"),
    ("cost-scorer", [ep("a", cost_per_1k_tokens=0.01), ep("b", cost_per_1k_tokens=0.001)], "b"),
    ("dynamic-weight-scorer", [ep("a", dynamic_weight=0.3), ep("b", dynamic_weight=1.2)], "b"),
])
def test_scorer_prefers(name, endpoints, best):
    s = scores(name, req(), endpoints)
    assert endpoints[s.index(max(s))].id == best


def test_prefix_affinity_is_sticky_and_spreads_prefixes():
    endpoints = [ep(f"e{i}") for i in range(8)]
    winners = []
    for prefix in range(200):
        first = scores("prefix-affinity-scorer", req(prefix_hash=prefix * 7919 << 40), endpoints)
        again = scores("prefix-affinity-scorer", req(prefix_hash=prefix * 7919 << 40), endpoints)
        assert first == again and sum(first) == 1.0
        winners.append(first.index(1.0))
    assert len(set(winners)) == 8  # prefixes spread over every endpoint


def test_prefix_affinity_overflows_a_hot_prefix_under_bounded_load():
    endpoints = [ep(f"e{i}") for i in range(4)]
    request = req(prefix_hash=12345)
    home = scores("prefix-affinity-scorer", request, endpoints).index(1.0)
    loaded = [ep(e.id, in_flight=(10 if i == home else 1)) for i, e in enumerate(endpoints)]
    moved = scores("prefix-affinity-scorer", request, loaded).index(1.0)
    assert moved != home


def test_prefix_affinity_moves_only_the_leaving_endpoints_prefixes():
    endpoints = [ep(f"e{i}") for i in range(6)]
    before = {p: scores("prefix-affinity-scorer", req(prefix_hash=p << 45), endpoints).index(1.0) for p in range(300)}
    survivors = endpoints[:3] + endpoints[4:]
    for p, home in before.items():
        if endpoints[home].id != "e3":
            now = scores("prefix-affinity-scorer", req(prefix_hash=p << 45), survivors).index(1.0)
            assert survivors[now].id == endpoints[home].id


def test_no_prefix_means_no_preference():
    assert scores("prefix-affinity-scorer", req(), [ep("a"), ep("b")]) == [0.0, 0.0]


def test_round_robin_cycles():
    picker = P.create("picker", "round-robin-picker")
    endpoints = [ep("a"), ep("b"), ep("c")]
    picks = [picker.pick([0.0] * 3, endpoints, RNG, 1)[0].id for _ in range(6)]
    assert picks == ["a", "b", "c", "a", "b", "c"]


def test_weighted_round_robin_honours_weights_smoothly():
    picker = P.create("picker", "weighted-round-robin-picker")
    endpoints = [ep("a", weight=5.0), ep("b", weight=1.0), ep("c", weight=1.0)]
    picks = [picker.pick([0.0] * 3, endpoints, RNG, 1)[0].id for _ in range(7)]
    assert Counter(picks) == {"a": 5, "b": 1, "c": 1}
    assert "aa a" not in "".join(picks)  # smooth: never three a's in a row
    assert picks.count("a") == 5 and "aaa" not in "".join(picks)


def test_weighted_random_follows_the_scores():
    picker = P.create("picker", "weighted-random-picker")
    endpoints = [ep("a"), ep("b")]
    rng = random.Random(1)
    picks = Counter(picker.pick([0.9, 0.1], endpoints, rng, 1)[0].id for _ in range(2000))
    assert 0.85 < picks["a"] / 2000 < 0.95


def test_max_score_picker_shares_ties():
    picker = P.create("picker", "max-score-picker")
    endpoints = [ep("a"), ep("b"), ep("c")]
    rng = random.Random(3)
    picks = Counter(picker.pick([1.0, 1.0, 0.2], endpoints, rng, 2)[0].id for _ in range(400))
    assert set(picks) == {"a", "b"} and min(picks.values()) > 150
