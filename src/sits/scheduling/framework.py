"""Scheduling framework: filters, weighted scorers and a picker over one snapshot.

Everything here is pure: a function of (request, endpoint views, seeded RNG).
No awaits, no clocks, no globals; the caller takes the snapshot.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sits.scheduling.types import EndpointView, SchedulingRequest


class Filter(Protocol):
    name: str

    def filter(self, request: SchedulingRequest, endpoints: Sequence[EndpointView]) -> Sequence[EndpointView]:
        """Return the subset of `endpoints` that may serve `request` (order kept)."""
        ...


class Scorer(Protocol):
    name: str

    def score(self, request: SchedulingRequest, endpoints: Sequence[EndpointView]) -> Sequence[float]:
        """One score per endpoint, same order; higher is better. Clamped to [0, 1] by the framework."""
        ...


class Picker(Protocol):
    name: str

    def pick(self, scores: Sequence[float], endpoints: Sequence[EndpointView], rng: random.Random) -> list[EndpointView]:
        """All `endpoints`, best first."""
        ...


@dataclass(frozen=True, slots=True)
class WeightedScorer:
    scorer: Scorer
    weight: float


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of scheduling: candidates best-first and why."""

    candidates: tuple[EndpointView, ...]
    profile: str
    reason: str


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    filters: tuple[Filter, ...]
    scorers: tuple[WeightedScorer, ...]
    picker: Picker

    def run(self, request: SchedulingRequest, endpoints: Sequence[EndpointView], rng: random.Random) -> Decision:
        remaining = endpoints
        for f in self.filters:
            remaining = f.filter(request, remaining)
            if not remaining:
                return Decision((), self.name, f"no endpoint passed {f.name}")
        if len(remaining) == 1:
            return Decision((remaining[0],), self.name, "single candidate")
        totals = [0.0] * len(remaining)
        for ws in self.scorers:
            scores = ws.scorer.score(request, remaining)
            for i, s in enumerate(scores):
                totals[i] += ws.weight * (0.0 if s != s else min(1.0, max(0.0, s)))  # NaN counts as 0
        ordered = self.picker.pick(totals, remaining, rng)
        return Decision(tuple(ordered), self.name, self.picker.name)
