"""Pure parts of bench/calibrate_tiers.py on tiny synthetic data (never reads the shared data folder)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "calibrate_tiers.py"
_spec = importlib.util.spec_from_file_location("calibrate_tiers", _PATH)
ct = importlib.util.module_from_spec(_spec)
sys.modules["calibrate_tiers"] = ct
_spec.loader.exec_module(ct)


def test_cost_groups_split_at_the_largest_log_gaps():
    costs = {"a": 1.0, "b": 1.2, "c": 5.0, "d": 6.0, "e": 100.0}
    assert ct.cost_groups(costs) == [["a", "b"], ["c", "d"], ["e"]]
    with pytest.raises(ValueError):
        ct.cost_groups({"a": 1.0, "b": 2.0})


def test_needed_interval_is_the_cheapest_tier_that_answers():
    tiers = {"t1": 0, "t2": 0, "b1": 1, "h1": 2}
    assert ct.needed_interval({"t1": 0, "t2": 1, "b1": 1, "h1": 1}, tiers) == (0, 0)
    assert ct.needed_interval({"t1": 0, "t2": 0.4, "b1": 0.5, "h1": 1}, tiers) == (1, 1)
    assert ct.needed_interval({"t1": 0, "t2": 0, "b1": 0, "h1": 1}, tiers) == (2, 2)
    assert ct.needed_interval({"t1": 0, "t2": 0, "b1": 0, "h1": 0}, tiers) == (3, ct.UNSOLVED)
    assert ct.exact_label((3, ct.UNSOLVED)) is None


def test_untested_tiers_give_intervals():
    pair = {"base": 1, "heavy": 2}  # a strong/weak pair without a tiny model
    assert ct.needed_interval({"base": 1, "heavy": 1}, pair) == (0, 1)  # at most base
    assert ct.needed_interval({"base": 0, "heavy": 1}, pair) == (2, 2)  # heavy
    small = {"m1": 0, "m2": 0}  # small models only
    assert ct.needed_interval({"m1": 0, "m2": 1}, small) == (0, 0)
    assert ct.needed_interval({"m1": 0, "m2": 0}, small) == (1, ct.UNSOLVED)  # at least base
    assert ct.boundary_labels((0, 1)) == (None, 0)
    assert ct.boundary_labels((1, ct.UNSOLVED)) == (1, None)
    assert ct.boundary_labels((2, 2)) == (1, 1)
    assert ct.boundary_labels((0, 0)) == (0, 0)
    assert ct.boundary_labels((3, ct.UNSOLVED)) == (None, None)


def test_scores_and_assignment():
    assert ct.idle_score(0.5, 0.4, 0.6) == pytest.approx(0.7)
    assert ct.idle_score(0.5, 0.4, 0.6, excess=1.0) == pytest.approx(0.3)
    assert ct.old_score(1.0) == pytest.approx(0.6)  # never reaches 0.7 at idle
    assert ct.assign(np.array([0.1, 0.3, 0.5, 0.7, 0.9]), 0.3, 0.7).tolist() == [0, 1, 1, 2, 2]
    assert ct.to_score_cutoffs(0.0, 1.0, 0.4, 0.6) == pytest.approx((0.4, 1.0))


def test_metrics_confusion_and_recall():
    m = ct.tier_metrics([0, 0, 1, 2], [0, 1, 1, 0])
    assert m["confusion"] == [[1, 1, 0], [0, 1, 0], [1, 0, 0]]
    assert m["recall"] == {"tiny": 0.5, "base": 1.0, "heavy": 0.0}
    assert m["macro_recall"] == pytest.approx(0.5)
    assert m["under_served"] == 0.25 and m["over_served"] == 0.25
    assert m["assigned_share"]["tiny"] == 0.5


def test_searches_recover_separable_cutoffs():
    c = [0.05, 0.1, 0.15, 0.4, 0.45, 0.5, 0.8, 0.9]
    y = [0, 0, 0, 1, 1, 1, 2, 2]
    found = ct.search_cutoffs(c, y)
    assert found["macro_recall"] == pytest.approx(1.0)
    assert 0.15 < found["c_tiny"] < 0.4 and 0.5 < found["c_heavy"] < 0.8
    both = ct.choose_cutoffs(c, [(t, t) for t in y])
    assert both["tiny"]["balanced_accuracy"] == pytest.approx(1.0)
    assert both["heavy"]["balanced_accuracy"] == pytest.approx(1.0)
    assert 0.15 < both["c_tiny"] < 0.4 and 0.5 < both["c_heavy"] < 0.8
    # ties go to the cheaper (larger) cut-off
    assert ct.search_boundary([0.1, 0.9], [0, 1])["c"] == pytest.approx(0.5)


def test_split_is_seeded_stratified_and_disjoint():
    strata = ["a"] * 10 + ["b"] * 5 + ["c"] * 1
    a, b = ct.stratified_halves(strata, seed=1)
    assert sorted(a + b) == list(range(16)) and not set(a) & set(b)
    assert sum(1 for i in a if strata[i] == "a") == 5
    assert (a, b) == ct.stratified_halves(strata, seed=1)
    assert ct.binary_auc([1, 2], [0, 0]) == 1.0 and ct.binary_auc([1], [1]) == 0.5
