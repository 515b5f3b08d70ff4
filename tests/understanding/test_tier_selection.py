from __future__ import annotations

import pytest

from sits.understanding.tier_selection import DualFactorTierHandler, TierParams


@pytest.mark.parametrize(("load", "complexity", "tier"), [
    (0.0, 0.0, "tiny"),
    (0.0, 0.49, "tiny"),   # 0.294
    (0.0, 0.5, "base"),    # 0.30: the boundary belongs to base
    (1.0, 0.0, "base"),    # 0.40
    (0.5, 0.8, "base"),    # 0.68
    (0.5, 0.9, "heavy"),   # 0.74
    (1.0, 1.0, "heavy"),
    (-3.0, 7.0, "base"),  # clamped to (0, 1): 0.6
    (float("nan"), 0.0, "tiny"),
])
def test_default_cuts(load, complexity, tier):
    assert DualFactorTierHandler().choose(load, complexity).tier == tier


def test_reason_names_the_factors():
    reason = DualFactorTierHandler().choose(0.5, 0.5).reason
    assert "0.4*load" in reason and "0.6*complexity" in reason


def test_configurable_params():
    load_only = DualFactorTierHandler(TierParams(load_weight=1.0, complexity_weight=0.0, tiny_below=0.5, heavy_from=0.9))
    assert load_only.choose(0.4, 1.0).tier == "tiny"
    assert load_only.choose(0.95, 0.0).tier == "heavy"


@pytest.mark.parametrize("kwargs", [
    {"load_weight": 0.5, "complexity_weight": 0.6},
    {"load_weight": -0.5, "complexity_weight": 1.5},
    {"tiny_below": 0.8, "heavy_from": 0.7},
])
def test_bad_params_are_rejected(kwargs):
    with pytest.raises(ValueError):
        TierParams(**kwargs)
