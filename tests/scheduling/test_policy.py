"""Routing policy YAML: strict validation with paths, and the scheduler it builds."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from sits.scheduling.policy import DEFAULT_POLICY, RoutingPolicy, build_scheduler

GOOD = """
handler: {type: tier-profile-handler, params: {tiers: {tiny: fast}, default: default}}
profiles:
  fast:
    filters: [{type: healthy-filter}, {type: random-sample-filter, params: {size: 2}}]
    scorers: [{type: peak-ewma-scorer, weight: 1}]
  default:
    filters: [{type: sla-filter, params: {default_sla_ms: 350}}]
    scorers:
      - {type: queue-depth-scorer, weight: 1.0}
      - {type: prefix-affinity-scorer, weight: 2, params: {load_factor: 1.5}}
    picker: {type: max-score-picker}
"""


def test_a_policy_from_yaml_builds_a_scheduler():
    policy = RoutingPolicy.model_validate(yaml.safe_load(GOOD))
    scheduler = build_scheduler(policy)
    assert set(scheduler.profiles) == {"fast", "default"}
    assert [f.name for f in scheduler.profiles["fast"].filters] == ["healthy-filter", "random-sample-filter"]


def test_the_default_policy_builds():
    scheduler = build_scheduler(DEFAULT_POLICY)
    assert scheduler.profiles["default"].picker.name == "max-score-picker"


@pytest.mark.parametrize("patch,message", [
    ({"profiles": {"default": {"scorers": [{"type": "nope-scorer"}]}}},
     "profiles.default.scorers[0].type: unknown scorer type 'nope-scorer'"),
    ({"profiles": {"default": {"scorers": [{"type": "prefix-affinity-scorer", "params": {"load_factr": 2}}]}}},
     "profiles.default.scorers[0].params.load_factr: unknown key"),
    ({"profiles": {"default": {"filters": [{"type": "random-sample-filter", "params": {"size": 0}}]}}},
     "profiles.default.filters[0].params.size: Input should be greater than or equal to 1"),
    ({"handler": {"type": "single-profile-handler", "params": {"profile": "missing"}}},
     "handler: names profile 'missing'"),
    ({"shadow_profiles": ["ghost"]}, "shadow_profiles[0]: unknown profile 'ghost'"),
    ({"profiles": {"default": {"pickr": {}}}}, "pickr"),
])
def test_bad_policies_name_the_offending_path(patch, message):
    with pytest.raises(ValidationError) as info:
        RoutingPolicy.model_validate(patch)
    assert message in str(info.value)


def test_negative_scorer_weight_is_rejected():
    with pytest.raises(ValidationError):
        RoutingPolicy.model_validate({"profiles": {"default": {"scorers": [{"type": "cost-scorer", "weight": -1}]}}})
