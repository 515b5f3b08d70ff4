"""Plugins by kebab-case type name; routing policy (YAML) names them, code implements them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sits.scheduling.framework import Filter, Picker, Profile, Scorer, WeightedScorer
from sits.scheduling.plugins.healthy_filter import HealthyFilter
from sits.scheduling.plugins.least_inflight_scorer import LeastInflightScorer
from sits.scheduling.plugins.max_score_picker import MaxScorePicker


@dataclass
class PluginRegistry:
    filters: dict[str, Callable[[], Filter]] = field(default_factory=dict)
    scorers: dict[str, Callable[[], Scorer]] = field(default_factory=dict)
    pickers: dict[str, Callable[[], Picker]] = field(default_factory=dict)


def builtin_plugins() -> PluginRegistry:
    return PluginRegistry(
        filters={HealthyFilter.name: HealthyFilter},
        scorers={LeastInflightScorer.name: LeastInflightScorer},
        pickers={MaxScorePicker.name: MaxScorePicker},
    )


def default_profile(plugins: PluginRegistry) -> Profile:
    return Profile(
        name="default",
        filters=(plugins.filters["healthy-filter"](),),
        scorers=(WeightedScorer(plugins.scorers["least-inflight-scorer"](), 1.0),),
        picker=plugins.pickers["max-score-picker"](),
    )
