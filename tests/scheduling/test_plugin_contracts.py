"""Every registered plugin obeys its kind's laws."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits.scheduling.framework import Profile, WeightedScorer
from sits.scheduling.policy import default_profile
from sits.scheduling.registry import builtin_plugins
from sits.scheduling.types import EndpointView, SchedulingRequest

PLUGINS = builtin_plugins()
REQUEST = SchedulingRequest(model="m", api="/chat/completions", stream=False)
CAPS = [None, frozenset(), frozenset({"tools"}), frozenset({"tools", "vision", "json"})]


def rich_request(rng: random.Random) -> SchedulingRequest:
    return SchedulingRequest(
        model=rng.choice(["m", "m", "other"]), api="/chat/completions", stream=rng.random() < 0.5,
        prompt_tokens_estimate=rng.randrange(0, 9000), max_tokens=rng.choice([0, 256, 4096]),
        needs=rng.choice([frozenset(), frozenset({"tools"}), frozenset({"vision", "json"})]),
        sla_ms=rng.choice([None, 350.0]), tier=rng.choice([None, "tiny", "heavy"]),
        prefix_hash=rng.choice([None, rng.getrandbits(64)]),
    )


def views(n: int, seed: int) -> list[EndpointView]:
    rng = random.Random(seed)
    return [
        EndpointView(
            f"e{i}", rng.choice(["m", "m", "m", "other"]), rng.choice([0.5, 1.0, 3.0]), rng.random() > 0.3,
            rng.randrange(50), rng.random(), latency_p95_s=rng.random(), latency_peak_ewma_s=rng.random(),
            ttft_s=rng.random(), error_rate=rng.random(), qps=rng.random() * 1000, queue_depth=rng.randrange(20),
            kv_cache_usage=rng.choice([None, rng.random()]), memory_usage=rng.choice([None, rng.random()]),
            dynamic_weight=rng.random() * 2, features=rng.choice(CAPS),
            context_window=rng.choice([None, 4096, 32768]), tier=rng.choice([None, "tiny", "heavy"]),
            cost_per_1k_tokens=rng.random(), sla_ms=rng.choice([None, 350.0]),
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("name", sorted(PLUGINS.filters))
@pytest.mark.parametrize("seed", range(30))
def test_filters_return_a_subset_in_order(name, seed):
    endpoints = views(1 + seed % 9, seed)
    request = rich_request(random.Random(seed)) if seed % 2 else REQUEST
    kept = list(PLUGINS.filters[name]().filter(request, endpoints, random.Random(seed)))
    assert all(e in endpoints for e in kept)
    assert kept == [e for e in endpoints if e in kept]
    assert len({e.id for e in kept}) == len(kept)


@pytest.mark.parametrize("name", sorted(PLUGINS.filters))
def test_filters_are_deterministic_given_the_seed(name):
    endpoints = views(12, 5)
    request = rich_request(random.Random(5))
    first = PLUGINS.filters[name]().filter(request, endpoints, random.Random(9))
    assert list(first) == list(PLUGINS.filters[name]().filter(request, endpoints, random.Random(9)))


@pytest.mark.parametrize("name", sorted(PLUGINS.scorers))
@pytest.mark.parametrize("seed", range(30))
def test_scorers_give_one_score_in_range_per_endpoint(name, seed):
    endpoints = views(1 + seed % 9, seed)
    request = rich_request(random.Random(seed)) if seed % 2 else REQUEST
    scores = PLUGINS.scorers[name]().score(request, endpoints)
    assert len(scores) == len(endpoints)
    assert all(0.0 <= s <= 1.0 for s in scores)


_floats = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)
_view = st.builds(
    EndpointView, id=st.text(min_size=1, max_size=4), model=st.just("m"),
    weight=st.floats(min_value=1e-6, max_value=1e3), healthy=st.booleans(),
    in_flight=st.integers(0, 10_000), latency_ewma_s=_floats, latency_p95_s=_floats, latency_peak_ewma_s=_floats,
    qps=_floats, queue_depth=st.integers(0, 10_000),
    kv_cache_usage=st.none() | st.floats(0.0, 1.0), dynamic_weight=_floats,
    cost_per_1k_tokens=_floats,
)


@pytest.mark.parametrize("name", sorted(PLUGINS.scorers))
@settings(max_examples=60, deadline=None)
@given(endpoints=st.lists(_view, min_size=1, max_size=12), prefix=st.none() | st.integers(0, 2**64 - 1))
def test_scores_stay_in_range_for_any_signals(name, endpoints, prefix):
    request = SchedulingRequest("m", "/chat/completions", False, prefix_hash=prefix)
    scores = PLUGINS.scorers[name]().score(request, endpoints)
    assert len(scores) == len(endpoints)
    assert all(0.0 <= s <= 1.0 for s in scores)


@pytest.mark.parametrize("name", sorted(PLUGINS.pickers))
@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("limit", [1, 3, 100])
def test_pickers_return_distinct_endpoints_up_to_the_limit(name, seed, limit):
    endpoints = views(1 + seed % 9, seed)
    scores = [random.Random(seed + i).random() for i in range(len(endpoints))]
    picked = PLUGINS.pickers[name]().pick(scores, endpoints, random.Random(seed), limit)
    assert len(picked) == min(limit, len(endpoints))
    assert len({e.id for e in picked}) == len(picked)
    assert all(e in endpoints for e in picked)


@pytest.mark.parametrize("seed", range(30))
def test_max_score_picker_puts_the_best_first(seed):
    endpoints = views(1 + seed % 9, seed)
    scores = [random.Random(seed + i).random() for i in range(len(endpoints))]
    picked = PLUGINS.pickers["max-score-picker"]().pick(scores, endpoints, random.Random(seed), 3)
    by_id = {e.id: s for e, s in zip(endpoints, scores)}
    assert by_id[picked[0].id] == max(scores)
    assert [by_id[e.id] for e in picked] == sorted((by_id[e.id] for e in picked), reverse=True)


@pytest.mark.parametrize("kind", ["filter", "scorer", "picker", "handler"])
def test_every_plugin_has_a_kebab_case_name_and_strict_params(kind):
    from pydantic import ValidationError

    for name, cls in PLUGINS.kind(kind).items():
        assert name == cls.name and name.endswith(f"-{kind}") and name == name.lower() and "_" not in name
        with pytest.raises(ValidationError):
            PLUGINS.create(kind, name, {"no_such_param": 1})
        assert PLUGINS.create(kind, name, {}).name == name


@pytest.mark.parametrize("name", sorted(PLUGINS.handlers))
@pytest.mark.parametrize("seed", range(10))
def test_handlers_choose_one_of_their_profiles(name, seed):
    handler = PLUGINS.create("handler", name, {})
    chosen = handler.choose(rich_request(random.Random(seed)), random.Random(seed))
    assert chosen in handler.profiles()


def test_profile_is_deterministic_given_the_seed():
    endpoints = views(8, 3)
    profile = default_profile(PLUGINS)
    request = SchedulingRequest("m", "/chat/completions", False, prefix_hash=7)
    first = profile.run(request, endpoints, random.Random(42))
    again = default_profile(PLUGINS).run(request, endpoints, random.Random(42))
    assert first == again


def test_least_inflight_prefers_the_idle_endpoint():
    busy = EndpointView("busy", "m", 1.0, True, 10, 0.1)
    idle = EndpointView("idle", "m", 1.0, True, 0, 0.1)
    decision = default_profile(PLUGINS).run(REQUEST, [busy, idle], random.Random(0))
    assert decision.candidates[0].id == "idle"


def test_framework_clamps_out_of_range_scores():
    class Wild:
        name = "wild"

        def score(self, request, endpoints):
            return [float("nan"), 7.0, -3.0]

    profile = Profile("p", (), (WeightedScorer(Wild(), 1.0),), PLUGINS.pickers["max-score-picker"]())
    decision = profile.run(REQUEST, views(3, 1), random.Random(0))
    assert decision.candidates[0].id == "e1"
    assert list(decision.scores[0].scores) == [0.0, 1.0, 0.0]
