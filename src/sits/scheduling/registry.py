"""Plugins by kebab-case type name; routing policy (YAML) names them, code implements them.

Every plugin class has a `name`, a strict pydantic `Params` model and a constructor
taking an instance of it (or nothing, for the defaults).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sits.scheduling.framework import Filter, Picker, Scorer
from sits.scheduling.plugins.adapter_affinity_scorer import AdapterAffinityScorer
from sits.scheduling.plugins.capability_filter import CapabilityFilter
from sits.scheduling.plugins.context_window_filter import ContextWindowFilter
from sits.scheduling.plugins.cost_scorer import CostScorer
from sits.scheduling.plugins.dynamic_weight_scorer import DynamicWeightScorer
from sits.scheduling.plugins.healthy_filter import HealthyFilter
from sits.scheduling.plugins.kv_cache_scorer import KvCacheScorer
from sits.scheduling.plugins.error_rate_scorer import ErrorRateScorer
from sits.scheduling.plugins.least_inflight_scorer import LeastInflightScorer
from sits.scheduling.plugins.max_score_picker import MaxScorePicker
from sits.scheduling.plugins.memory_headroom_filter import MemoryHeadroomFilter
from sits.scheduling.plugins.model_match_filter import ModelMatchFilter
from sits.scheduling.plugins.peak_ewma_scorer import PeakEwmaScorer
from sits.scheduling.plugins.prefix_affinity_scorer import PrefixAffinityScorer
from sits.scheduling.plugins.queue_depth_scorer import QueueDepthScorer
from sits.scheduling.plugins.random_sample_filter import RandomSampleFilter
from sits.scheduling.plugins.round_robin_picker import RoundRobinPicker
from sits.scheduling.plugins.sla_filter import SlaFilter
from sits.scheduling.plugins.tier_filter import TierFilter
from sits.scheduling.plugins.weighted_random_picker import WeightedRandomPicker
from sits.scheduling.plugins.weighted_round_robin_picker import WeightedRoundRobinPicker
from sits.scheduling.profile_handlers import (
    ProfileHandler,
    SingleProfileHandler,
    SplitProfileHandler,
    TierProfileHandler,
)


@dataclass
class PluginRegistry:
    """Plugin classes by kind and type name; `create` validates params and builds one."""

    filters: dict[str, Any] = field(default_factory=dict)
    scorers: dict[str, Any] = field(default_factory=dict)
    pickers: dict[str, Any] = field(default_factory=dict)
    handlers: dict[str, Any] = field(default_factory=dict)

    def kind(self, kind: str) -> dict[str, Any]:
        return {"filter": self.filters, "scorer": self.scorers, "picker": self.pickers,
                "handler": self.handlers}[kind]

    def create(self, kind: str, type_name: str, params: Mapping[str, object] | None = None) -> Any:
        """A new plugin instance. Raises KeyError for an unknown type, pydantic's ValidationError for bad params."""
        cls = self.kind(kind)[type_name]
        return cls(cls.Params.model_validate(dict(params or {})))


def _by_name(*classes: Any) -> dict[str, Any]:
    return {c.name: c for c in classes}


def builtin_plugins() -> PluginRegistry:
    return PluginRegistry(
        filters=_by_name(ModelMatchFilter, HealthyFilter, CapabilityFilter, ContextWindowFilter, SlaFilter,
                         MemoryHeadroomFilter, TierFilter, RandomSampleFilter),
        scorers=_by_name(LeastInflightScorer, ErrorRateScorer, QueueDepthScorer, KvCacheScorer, PeakEwmaScorer, CostScorer,
                         PrefixAffinityScorer, DynamicWeightScorer, AdapterAffinityScorer),
        pickers=_by_name(MaxScorePicker, RoundRobinPicker, WeightedRoundRobinPicker, WeightedRandomPicker),
        handlers=_by_name(SingleProfileHandler, TierProfileHandler, SplitProfileHandler),
    )


__all__ = ["Filter", "Picker", "PluginRegistry", "ProfileHandler", "Scorer", "builtin_plugins"]
