"""Calibration (isotonic fit, reliability, ECE) and the three aggregation methods."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sits.pipeline.fusion.aggregation import Candidate, best_of_n, judged, single, weighted_vote
from sits.pipeline.fusion.calibration import (
    CalibrationMap,
    expected_calibration_error,
    fit_isotonic,
    reliability_curve,
)
from sits.pipeline.fusion.source_facts import SourceFacts
from sits.pipeline.fusion.symbolic_guard import SymbolicGuard


@given(st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=1, max_size=200))
def test_isotonic_fit_is_monotone_and_in_range(pairs):
    fitted = fit_isotonic([p[0] for p in pairs], [p[1] for p in pairs])
    values = [fitted(x / 50) for x in range(51)]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert all(a <= b + 1e-12 for a, b in zip(values, values[1:], strict=False))


def test_calibration_fixes_an_overconfident_score():
    rng = random.Random(3)
    raw = [rng.random() for _ in range(4000)]
    correct = [rng.random() < r * r for r in raw]  # the truth is r^2: raw is overconfident
    before = expected_calibration_error(raw, correct)
    fitted = fit_isotonic(raw, correct)
    after = expected_calibration_error([fitted(r) for r in raw], correct)
    assert before > 0.1 and after < 0.03
    assert fitted(0.5) == pytest.approx(0.25, abs=0.06)


def test_reliability_curve_and_identity():
    bins = reliability_curve([0.05, 0.15, 0.95, 1.0], [False, True, True, True], bins=10)
    assert [(b.count, b.accuracy) for b in bins] == [(1, 0.0), (1, 1.0), (2, 1.0)]
    assert CalibrationMap.identity()(0.37) == pytest.approx(0.37)
    assert CalibrationMap.from_points([(0.2, 0.1), (0.8, 0.7)])(0.0) == 0.1


def verdict(draft: str, source: str):
    return SymbolicGuard().check(draft, SourceFacts.build(source))


def test_weighted_vote_pools_the_weights_of_equal_answers():
    choice = weighted_vote([Candidate(0, "a", "Paris.", 1.0), Candidate(1, "b", "paris", 1.0),
                            Candidate(2, "c", "Lyon", 1.5)])
    assert choice.candidate.branch == 0 and choice.raw_confidence == pytest.approx(2 / 3.5)


def test_best_of_n_takes_the_best_verified_draft_then_the_heavier():
    source = "Revenue was 1,540,000."
    good = Candidate(0, "a", "Revenue: 1,540,000", 1.0, verdict("Revenue: 1,540,000", source))
    bad = Candidate(1, "b", "Revenue: 1,450,000", 3.0, verdict("Revenue: 1,450,000", source))
    assert best_of_n([bad, good]).candidate is good and best_of_n([bad, good]).raw_confidence == 1.0
    unchecked = [Candidate(0, "a", "fine", 1.0), Candidate(1, "b", "fine too", 2.0)]
    assert best_of_n(unchecked).candidate.branch == 1 and best_of_n(unchecked).raw_confidence == 0.5


def test_judge_pick_and_its_fallback():
    drafts = [Candidate(0, "a", "x", 1.0, judge_score=0.0), Candidate(1, "b", "y", 1.0, judge_score=1.0)]
    assert judged(drafts, 1).candidate.branch == 0
    fallback = judged(drafts, None)
    assert fallback.candidate.branch == 1 and "no usable pick" in fallback.detail
    assert single(drafts[1]).raw_confidence == 1.0
