from __future__ import annotations

import pytest

from sits.understanding.tier_selection import DualFactorTierHandler, TierParams

# Cut-offs fixed here (the defaults are calibrated and may move): idle score = 0.4 + 0.6 * complexity,
# so tiny below complexity 0.25, heavy from complexity 0.7.
PARAMS = TierParams(load_weight=0.4, complexity_weight=0.6, tiny_below=0.55, heavy_from=0.82, saturated_at=0.8)
HANDLER = DualFactorTierHandler(PARAMS)


def loads(**by_tier: float):
    return lambda tier: by_tier.get(tier, 0.0)


@pytest.mark.parametrize(("complexity", "tier"), [
    (0.0, "tiny"),
    (0.24, "tiny"),    # 0.544
    (0.25, "base"),    # 0.55: the boundary belongs to the heavier tier
    (0.69, "base"),    # 0.814
    (0.7, "heavy"),    # 0.82
    (1.0, "heavy"),
    (7.0, "heavy"),    # clamped to 1
    (float("nan"), "tiny"),
])
def test_idle_tier_follows_complexity_alone(complexity, tier):
    assert HANDLER.choose(complexity).tier == tier


def test_the_heavy_tier_is_reachable_when_idle():
    """The old rule scored 0.4 * load + 0.6 * complexity: idle, 0.6 * complexity never reached 0.7."""
    assert HANDLER.choose(0.95).tier == "heavy"
    assert DualFactorTierHandler().choose(1.0).tier == "heavy"  # with the calibrated defaults too


@pytest.mark.parametrize("load", [0.0, 0.5, 0.79, 0.8])
def test_load_below_saturation_moves_nothing(load):
    for complexity in (0.1, 0.5, 0.9):
        assert HANDLER.choose(complexity, loads(tiny=load, base=load, heavy=load)).tier == \
               HANDLER.choose(complexity).tier


def test_a_saturated_needed_tier_moves_the_request_down_never_up():
    choice = HANDLER.choose(0.75, loads(heavy=1.0))
    assert choice.tier == "base"
    assert "heavy in-flight 1.00 saturated" in choice.reason and "demoted to base" in choice.reason
    # a busy light tier never pushes work up: the old rule sent it to the slowest tier
    assert HANDLER.choose(0.1, loads(tiny=1.0)).tier == "tiny"
    assert HANDLER.choose(0.5, loads(tiny=1.0, base=0.5)).tier == "base"


def test_demotion_is_proportional_to_the_excess():
    # needs heavy at complexity 0.75 (score 0.85); at in-flight 0.85 the excess is 0.25: score 0.75, still base?
    partly = HANDLER.choose(0.75, loads(heavy=0.85))
    assert partly.tier == "base"  # 0.4 * 0.75 + 0.45 = 0.75 < 0.82
    barely = HANDLER.choose(0.99, loads(heavy=0.85))
    assert barely.tier == "heavy"  # 0.3 + 0.594 = 0.894: saturated a little, not enough to move


def test_never_onto_a_saturated_lighter_tier():
    assert HANDLER.choose(0.75, loads(heavy=1.0, base=0.95)).tier == "heavy"
    # tiny free, base saturated: a heavy request fully demoted lands on base only if base is free
    choice = HANDLER.choose(0.75, loads(heavy=1.0, base=1.0))
    assert choice.tier == "heavy" and "no lighter tier free" in choice.reason


def test_quality_critical_requests_are_never_demoted():
    choice = HANDLER.choose(0.75, loads(heavy=1.0), quality_critical=True)
    assert choice.tier == "heavy" and "quality-critical" in choice.reason


def test_reason_names_the_factors():
    reason = HANDLER.choose(0.5).reason
    assert "0.4*headroom" in reason and "0.6*complexity 0.50" in reason and "needs base" in reason


@pytest.mark.parametrize("kwargs", [
    {"load_weight": 0.5, "complexity_weight": 0.6},
    {"load_weight": -0.5, "complexity_weight": 1.5},
    {"tiny_below": 0.8, "heavy_from": 0.7},
    {"saturated_at": 1.0},
])
def test_bad_params_are_rejected(kwargs):
    with pytest.raises(ValueError):
        TierParams(**kwargs)
