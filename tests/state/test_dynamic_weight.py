"""The dynamic weight formula and its surge protection."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sits.state.dynamic_weight import SurgeGuard, dynamic_weight


@pytest.mark.parametrize("latency_ms,qps,expected", [
    (99.0, 0.0, 0.6 * 0.5),  # log10(100) = 2
    (999.0, 0.0, 0.6 * (1 / 3)),
    (1e12, 0.0, 0.6 * 0.1),  # penalty floored at 0.1
    (99.0, 1e6, 0.6 * 0.5 + 0.4 * 0.8),
    (99.0, 1e9, 0.6 * 0.5 + 0.4 * 5.0),  # reward capped at 5
    (0.0, 0.0, 0.6 / math.log10(2.0)),  # latency floored at 1 ms
])
def test_formula(latency_ms, qps, expected):
    assert dynamic_weight(latency_ms, qps) == pytest.approx(expected)


@given(st.floats(0, 1e9), st.floats(0, 1e9))
def test_weight_is_positive_and_bounded(latency_ms, qps):
    w = dynamic_weight(latency_ms, qps)
    assert 0.06 - 1e-12 <= w <= 0.6 / math.log10(2.0) + 2.0 + 1e-9


def test_steady_qps_follows_the_formula():
    guard = SurgeGuard()
    weight, baseline, surging = guard.next(1.0, 99.0, 100.0, 100.0)
    assert not surging and weight == pytest.approx(dynamic_weight(99.0, 100.0))


def test_a_sudden_qps_jump_decays_the_weight_then_recovers():
    guard = SurgeGuard(ratio=2.0, decay=0.5)
    weight, baseline = 0.3, 100.0
    seen = []
    for _ in range(60):
        weight, baseline, surging = guard.next(weight, 99.0, 1_000_000.0, baseline)  # 10,000x jump
        seen.append((weight, surging))
    assert seen[0] == (pytest.approx(0.15), True) and seen[1][0] == pytest.approx(0.075)
    assert not seen[-1][1]  # the baseline caught up: a lasting rise is no longer a surge
    assert seen[-1][0] == pytest.approx(dynamic_weight(99.0, 1_000_000.0))


def test_warm_up_is_not_a_surge():
    weight, _, surging = SurgeGuard().next(1.0, 99.0, 500.0, 0.0)
    assert not surging and weight == pytest.approx(dynamic_weight(99.0, 500.0))
