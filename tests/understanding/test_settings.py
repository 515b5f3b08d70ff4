from __future__ import annotations

import pytest
from pydantic import ValidationError

from sits.understanding.rules_stage import IntentGuess
from sits.understanding.tier_selection import TierParams
from sits.understanding.settings import IntentRouteConfig, TierSelectionConfig, UnderstandingConfig


def test_the_config_defaults_are_the_tier_rule_defaults():
    assert UnderstandingConfig().tier.to_params() == TierParams()
    assert (TierParams().load_weight, TierParams().complexity_weight) == (0.4, 0.6)


@pytest.mark.parametrize("data", [
    {"tier": {"load_weight": 0.5}},
    {"tier": {"tiny_below": 0.9, "heavy_from": 0.2}},
    {"routes": [{"intent": "coding"}]},
    {"routes": [{"intent": "coding", "model": "m", "workflow": "w"}]},
    {"embedder": "bert"},
    {"unknown": 1},
])
def test_bad_config_is_rejected(data):
    with pytest.raises(ValidationError):
        UnderstandingConfig.model_validate(data)


def test_routes_respect_confidence():
    cfg = UnderstandingConfig.model_validate({"routes": [
        {"intent": "coding", "model": "coder", "min_confidence": 0.6},
        {"intent": "contract_analysis", "workflow": "legal-fusion"},
    ]})
    routes = cfg.to_routes()
    assert routes.route_for(IntentGuess("coding", 0.7, "embedding")).model == "coder"
    assert routes.route_for(IntentGuess("coding", 0.5, "embedding")) is None
    assert routes.route_for(IntentGuess("contract_analysis", 0.9, "rules")).workflow == "legal-fusion"
    assert routes.route_for(IntentGuess("math", 0.9, "rules")) is None


def test_tier_config_round_trips():
    assert TierSelectionConfig(load_weight=1.0, complexity_weight=0.0).to_params().load_weight == 1.0
    assert IntentRouteConfig(intent="x", model="m").min_confidence == 0.5
