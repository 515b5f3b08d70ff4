"""Every registered plugin obeys its kind's laws."""

from __future__ import annotations

import random

import pytest

from sits.scheduling.framework import Profile, WeightedScorer
from sits.scheduling.registry import builtin_plugins, default_profile
from sits.scheduling.types import EndpointView, SchedulingRequest

PLUGINS = builtin_plugins()
REQUEST = SchedulingRequest(model="m", api="/chat/completions", stream=False)


def views(n: int, seed: int) -> list[EndpointView]:
    rng = random.Random(seed)
    return [EndpointView(f"e{i}", "m", rng.choice([0.5, 1.0, 3.0]), rng.random() > 0.3, rng.randrange(50),
                         rng.random()) for i in range(n)]


@pytest.mark.parametrize("name", sorted(PLUGINS.filters))
@pytest.mark.parametrize("seed", range(20))
def test_filters_return_a_subset_in_order(name, seed):
    endpoints = views(1 + seed % 7, seed)
    kept = list(PLUGINS.filters[name]().filter(REQUEST, endpoints))
    assert all(e in endpoints for e in kept)
    assert kept == [e for e in endpoints if e in kept]


@pytest.mark.parametrize("name", sorted(PLUGINS.scorers))
@pytest.mark.parametrize("seed", range(20))
def test_scorers_give_one_score_in_range_per_endpoint(name, seed):
    endpoints = views(1 + seed % 7, seed)
    scores = PLUGINS.scorers[name]().score(REQUEST, endpoints)
    assert len(scores) == len(endpoints)
    assert all(0.0 <= s <= 1.0 for s in scores)


@pytest.mark.parametrize("name", sorted(PLUGINS.pickers))
@pytest.mark.parametrize("seed", range(20))
def test_pickers_return_a_permutation_best_first(name, seed):
    endpoints = views(1 + seed % 7, seed)
    scores = [random.Random(seed + i).random() for i in range(len(endpoints))]
    picked = PLUGINS.pickers[name]().pick(scores, endpoints, random.Random(seed))
    assert sorted(e.id for e in picked) == sorted(e.id for e in endpoints)
    by_id = {e.id: s for e, s in zip(endpoints, scores)}
    assert by_id[picked[0].id] == max(scores)


def test_profile_is_deterministic_given_the_seed():
    endpoints = views(8, 3)
    profile = default_profile(PLUGINS)
    first = profile.run(REQUEST, endpoints, random.Random(42))
    again = profile.run(REQUEST, endpoints, random.Random(42))
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
