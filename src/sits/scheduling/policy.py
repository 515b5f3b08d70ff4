"""Routing policy: the YAML `routing:` section, validated strictly, and the scheduler it builds.

Policy is configuration (which plugins, in which order, with which weights and params);
mechanism is the plugin code. Every plugin type and every params key is checked at load,
and an error names its path, e.g. `profiles.default.scorers[1].params.load_factor: ...`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sits.scheduling.candidate_sample import CandidateSample
from sits.scheduling.framework import Profile, WeightedScorer
from sits.scheduling.metrics import NO_SCHEDULING_METRICS, SchedulingMetrics
from sits.scheduling.registry import PluginRegistry, builtin_plugins
from sits.scheduling.scheduler import Scheduler


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class PluginSpec(_Strict):
    type: Annotated[str, Field(min_length=1)]
    params: dict[str, Any] = {}


class ScorerSpec(PluginSpec):
    weight: Annotated[float, Field(ge=0)] = 1.0


class SampleSpec(_Strict):
    """Decide pools larger than `above` over `size` random endpoints (plus the prefix's owner)."""

    above: Annotated[int, Field(ge=1)] = 512
    size: Annotated[int, Field(ge=2)] = 48


class ProfileSpec(_Strict):
    filters: list[PluginSpec] = []
    scorers: list[ScorerSpec] = []
    picker: PluginSpec = PluginSpec(type="max-score-picker")
    sample: SampleSpec | None = None  # off: every decision considers the whole pool


class EngineMetricsSpec(_Strict):
    """Scraping engines' /metrics (vLLM, SGLang, llama.cpp, embedded workers) for queue depth, KV-cache
    use and memory pressure; endpoints without metrics are polled ever less often (at most every 10 min)."""

    enabled: bool = True
    interval_s: Annotated[float, Field(ge=0.1)] = 1.0
    timeout_s: Annotated[float, Field(gt=0)] = 2.0
    stale_after_s: Annotated[float, Field(gt=0)] = 10.0  # older engine readings count as unknown


def _default_profile() -> ProfileSpec:
    return ProfileSpec(
        # No memory-headroom-filter and no peak-ewma-scorer here, by measurement (docs/scheduling.md,
        # "Default policy"): a hard filter on engine readings up to a scrape old herds every request
        # onto the few endpoints that looked free at the last scrape once a pool is near saturation,
        # and latency x in-flight misjudges engines that serve many requests in parallel. Both stay
        # available to policies; the kv-cache scorer keeps the engine signal, softly.
        filters=[
            PluginSpec(type="model-match-filter"),
            PluginSpec(type="healthy-filter"),
            PluginSpec(type="capability-filter"),
            PluginSpec(type="context-window-filter"),
            PluginSpec(type="sla-filter"),
        ],
        scorers=[
            ScorerSpec(type="queue-depth-scorer", weight=1.0),
            ScorerSpec(type="kv-cache-scorer", weight=0.5),
            ScorerSpec(type="prefix-affinity-scorer", weight=1.0),
            # 0 for all unless a LoRA adapter is asked for; then it outweighs the others together (2.5)
            ScorerSpec(type="adapter-affinity-scorer", weight=4.0),
            # equal across one model's endpoints; between the models of an `auto` tier, cheaper first
            ScorerSpec(type="cost-scorer", weight=0.5),
            # off a failing endpoint at once, before its breaker opens
            ScorerSpec(type="error-rate-scorer", weight=1.0),
        ],
        picker=PluginSpec(type="max-score-picker"),
        # O(d) decisions on pools of thousands (docs/scheduling.md, "Decision latency")
        sample=SampleSpec(above=512, size=48),
    )


class RoutingPolicy(_Strict):
    handler: PluginSpec = PluginSpec(type="single-profile-handler")
    profiles: dict[str, ProfileSpec] = Field(default_factory=lambda: {"default": _default_profile()})
    shadow_profiles: list[str] = []
    stats_refresh_s: Annotated[float, Field(gt=0)] = 0.2  # live stats (p95, QPS, dynamic weight) recompute period
    engine_metrics: EngineMetricsSpec = EngineMetricsSpec()

    @model_validator(mode="after")
    def _plugins_exist(self) -> RoutingPolicy:
        plugins = builtin_plugins()
        _check(plugins, "handler", self.handler, "handler")
        for name, profile in self.profiles.items():
            for i, f in enumerate(profile.filters):
                _check(plugins, "filter", f, f"profiles.{name}.filters[{i}]")
            for i, s in enumerate(profile.scorers):
                _check(plugins, "scorer", s, f"profiles.{name}.scorers[{i}]")
            _check(plugins, "picker", profile.picker, f"profiles.{name}.picker")
        handler = plugins.create("handler", self.handler.type, self.handler.params)
        for wanted in sorted(handler.profiles()):
            if wanted not in self.profiles:
                raise ValueError(f"handler: names profile {wanted!r}, which is not in profiles")
        for i, shadow in enumerate(self.shadow_profiles):
            if shadow not in self.profiles:
                raise ValueError(f"shadow_profiles[{i}]: unknown profile {shadow!r}")
        return self


def _check(plugins: PluginRegistry, kind: str, spec: PluginSpec, where: str) -> None:
    known = plugins.kind(kind)
    cls = known.get(spec.type)
    if cls is None:
        raise ValueError(f"{where}.type: unknown {kind} type {spec.type!r} (known: {', '.join(sorted(known))})")
    try:
        cls.Params.model_validate(spec.params)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        key = ".".join(str(p) for p in first["loc"])
        what = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
        raise ValueError(f"{where}.params{'.' + key if key else ''}: {what}") from None


DEFAULT_POLICY = RoutingPolicy()


def default_profile(plugins: PluginRegistry) -> Profile:
    """The built-in default profile (the `default` profile of `DEFAULT_POLICY`)."""
    return build_profile(plugins, "default", DEFAULT_POLICY.profiles["default"])


def build_profile(plugins: PluginRegistry, name: str, spec: ProfileSpec) -> Profile:
    return Profile(
        name=name,
        filters=tuple(plugins.create("filter", f.type, f.params) for f in spec.filters),
        scorers=tuple(WeightedScorer(plugins.create("scorer", s.type, s.params), s.weight) for s in spec.scorers),
        picker=plugins.create("picker", spec.picker.type, spec.picker.params),
        sample=CandidateSample(spec.sample.above, spec.sample.size) if spec.sample is not None else None,
    )


def build_scheduler(
    policy: RoutingPolicy, plugins: PluginRegistry | None = None, metrics: SchedulingMetrics = NO_SCHEDULING_METRICS
) -> Scheduler:
    """Fresh plugin instances for one gateway (or one simulation run): nothing is shared."""
    plugins = plugins or builtin_plugins()
    profiles = {name: build_profile(plugins, name, spec) for name, spec in policy.profiles.items()}
    handler = plugins.create("handler", policy.handler.type, policy.handler.params)
    return Scheduler(handler, profiles, tuple(policy.shadow_profiles), metrics)
