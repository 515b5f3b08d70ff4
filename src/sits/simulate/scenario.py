"""Simulation scenarios (YAML): simulated endpoints, workload, incidents and the strategies compared."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sits.scheduling.policy import RoutingPolicy

Positive = Annotated[float, Field(gt=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EndpointGroup(_Strict):
    """`count` endpoints alike: `slots` requests served at once, service time ~ lognormal(mean, sigma)."""

    name: str
    count: Annotated[int, Field(ge=1)]
    slots: Annotated[int, Field(ge=1)] = 8
    mean_service_ms: Positive = 300.0
    sigma: Annotated[float, Field(ge=0, le=3)] = 0.5  # lognormal shape: 0 = constant service time
    weight: Positive = 1.0  # the static weight an operator would configure (used by weighted strategies)


class Incident(_Strict):
    """From `start` for `duration` (fractions of the run's timeline), a `fraction` of endpoints misbehave."""

    kind: Literal["slowdown", "failure", "burst"]
    start: Fraction
    duration: Fraction
    fraction: Fraction = 0.1  # of endpoints (slowdown, failure)
    factor: Positive = 3.0  # service-time multiplier (slowdown) or arrival-rate multiplier (burst)


class Workload(_Strict):
    requests_per_run: Annotated[int, Field(ge=100)] = 400_000
    load_levels: list[Annotated[float, Field(gt=0, le=3)]] = [0.5, 0.7, 0.85, 0.95, 1.05]  # x nominal capacity
    shared_prefix_share: Fraction = 0.5  # requests that reuse a popular prompt prefix
    distinct_prefixes: Annotated[int, Field(ge=1)] = 2000
    prefix_zipf_s: Annotated[float, Field(gt=1)] = 1.2
    prefix_cache_speedup: Annotated[float, Field(gt=0, le=1)] = 0.6  # service-time factor on a prefix-cache hit
    reference_load: Annotated[float, Field(gt=0)] = 0.7  # where average latency and p99 are compared


class Scenario(_Strict):
    name: str = "scenario"
    seed: int = 1
    replicas_per_model: Annotated[int, Field(ge=1)] = 8  # endpoints are grouped into model pools of this size
    endpoints: list[EndpointGroup]
    workload: Workload = Workload()
    incidents: list[Incident] = []
    slo_p99_ms: Positive = 3000.0  # a load is sustainable while p99 stays under this and errors under 1%
    stats_refresh_s: Positive = 0.2
    engine_scrape_s: Positive = 1.0  # how stale the engines' queue / KV readings are
    strategies: dict[str, RoutingPolicy]

    @model_validator(mode="after")
    def _sizes(self) -> Scenario:
        if self.total_endpoints() < self.replicas_per_model:
            raise ValueError("fewer endpoints than replicas_per_model")
        if not self.strategies:
            raise ValueError("strategies: give at least one")
        return self

    def total_endpoints(self) -> int:
        return sum(g.count for g in self.endpoints)


def load_scenario(path: Path) -> Scenario:
    return Scenario.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
