from __future__ import annotations

import numpy as np
import pytest

from sits.understanding.quality_router.metrics import (
    Point, cost_to_reach, frontier_auc, pair_metrics, pareto, random_apgr, utility_frontier,
)

RNG = np.random.default_rng(1)
STRONG = (RNG.random(400) < 0.8).astype(float)
WEAK = (RNG.random(400) < 0.6).astype(float)


def test_oracle_beats_random_and_random_is_half():
    oracle = pair_metrics(STRONG, WEAK, STRONG - WEAK)
    rand = random_apgr(STRONG, WEAK)
    assert oracle.apgr > 0.9 and abs(rand.apgr - 0.5) < 0.05
    assert oracle.cpt50 < rand.cpt50 and oracle.cpt80 <= rand.cpt80


def test_pgr_runs_from_zero_to_one():
    m = pair_metrics(STRONG, WEAK, RNG.random(400))
    assert m.pgr[0] == pytest.approx(0.0) and m.pgr[-1] == pytest.approx(1.0)
    assert 0.0 <= m.cpt50 <= m.cpt80 <= 1.0


def test_anti_oracle_is_worst():
    assert pair_metrics(STRONG, WEAK, WEAK - STRONG).apgr < 0.2


def test_no_gap_is_an_error():
    with pytest.raises(ValueError):
        pair_metrics(STRONG, STRONG, STRONG)


def test_pareto_and_reach():
    pts = pareto([Point(1, 0.5), Point(2, 0.4), Point(3, 0.9), Point(0.5, 0.5)])
    assert [(p.cost, p.quality) for p in pts] == [(0.5, 0.5), (3, 0.9)]
    assert cost_to_reach(pts, 0.9) == 3 and cost_to_reach(pts, 0.95) is None
    assert 0.5 <= frontier_auc(pts, 0.5, 3) <= 0.9


def test_utility_frontier_spans_cheap_to_best():
    scores = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    costs = np.array([[10.0, 1.0]] * 3)
    pts = utility_frontier(scores, costs, scores, costs, np.array([0.0, 0.05, 100.0]))
    assert pts[0].cost == 1.0 and pts[-1].quality == 1.0
