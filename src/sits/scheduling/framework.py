"""Scheduling framework: filters, weighted scorers and a picker over one snapshot.

Everything here is pure: a function of (request, endpoint views, seeded RNG).
No awaits, no clocks, no globals; the caller takes the snapshot. The only clock
is an injected timer in `SchedulingMetrics`, and it never changes an outcome.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from operator import add
from typing import Protocol

from sits.scheduling.metrics import SchedulingMetrics
from sits.scheduling.types import EndpointView, SchedulingRequest

DEFAULT_PICK_LIMIT = 3  # the director tries at most this many endpoints (connect-error failover)


class Filter(Protocol):
    name: str

    def filter(
        self, request: SchedulingRequest, endpoints: Sequence[EndpointView], rng: random.Random
    ) -> Sequence[EndpointView]:
        """Return the subset of `endpoints` that may serve `request` (order kept)."""
        ...


class Scorer(Protocol):
    name: str

    def score(self, request: SchedulingRequest, endpoints: Sequence[EndpointView]) -> Sequence[float]:
        """One score per endpoint, same order; higher is better. Clamped to [0, 1] by the framework."""
        ...


class Picker(Protocol):
    name: str

    def pick(
        self, scores: Sequence[float], endpoints: Sequence[EndpointView], rng: random.Random, limit: int
    ) -> list[EndpointView]:
        """Up to `limit` distinct endpoints of `endpoints`, best first (at least one if any)."""
        ...


@dataclass(frozen=True, slots=True)
class WeightedScorer:
    scorer: Scorer
    weight: float


@dataclass(frozen=True, slots=True)
class ScorerScores:
    """One scorer's clamped scores over `Decision.scored`, kept to explain the decision."""

    name: str
    weight: float
    scores: Sequence[float]


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of scheduling: candidates best-first and why."""

    candidates: tuple[EndpointView, ...]
    profile: str
    reason: str
    scored: Sequence[EndpointView] = ()  # the endpoints that survived the filters
    scores: tuple[ScorerScores, ...] = ()
    totals: Sequence[float] = ()
    shadows: tuple[Decision, ...] = ()  # shadow profiles' decisions: recorded, never used

    @property
    def pick(self) -> str | None:
        return self.candidates[0].id if self.candidates else None

    def route_header(self) -> str:
        """The x-sits-route value: profile, pick and reason."""
        return f"profile={self.profile}; pick={self.pick or '-'}; reason={self.reason}"

    def explain(self, limit: int = 8) -> dict[str, object]:
        """The best `limit` scored endpoints with each scorer's score; for the debug log."""
        index = {e.id: i for i, e in enumerate(self.scored)}
        rows = []
        shown = list(self.candidates)
        if self.totals:
            best = sorted(range(len(self.totals)), key=self.totals.__getitem__, reverse=True)[:limit]
            shown += [self.scored[i] for i in best if self.scored[i] not in shown]
        for e in shown[:limit]:
            i = index.get(e.id)
            row: dict[str, object] = {"id": e.id, "in_flight": e.in_flight}
            if i is not None and self.totals:
                row["total"] = round(self.totals[i], 4)
                row.update({s.name: round(s.scores[i], 4) for s in self.scores})
            rows.append(row)
        return {"profile": self.profile, "pick": self.pick, "reason": self.reason,
                "considered": len(self.scored), "candidates": rows}


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    filters: tuple[Filter, ...]
    scorers: tuple[WeightedScorer, ...]
    picker: Picker

    def run(
        self,
        request: SchedulingRequest,
        endpoints: Sequence[EndpointView],
        rng: random.Random,
        metrics: SchedulingMetrics | None = None,
        limit: int = DEFAULT_PICK_LIMIT,
    ) -> Decision:
        timer = metrics.timer if metrics is not None else None
        remaining = endpoints
        for f in self.filters:
            if timer is None:
                remaining = f.filter(request, remaining, rng)
            else:
                t0 = timer()
                remaining = f.filter(request, remaining, rng)
                metrics.observe(f.name, timer() - t0)  # type: ignore[union-attr]
            if not remaining:
                if metrics is not None:
                    metrics.no_candidate(self.name, f.name)
                return Decision((), self.name, f"no endpoint passed {f.name}")
        if len(remaining) == 1:
            if metrics is not None:
                metrics.decided(self.name)
            return Decision((remaining[0],), self.name, "single candidate", remaining)
        n = len(remaining)
        totals: list[float] | None = None
        explained = []
        for ws in self.scorers:
            if timer is None:
                scores = ws.scorer.score(request, remaining)
            else:
                t0 = timer()
                scores = ws.scorer.score(request, remaining)
                metrics.observe(ws.scorer.name, timer() - t0)  # type: ignore[union-attr]
            if len(scores) != n:  # a broken scorer abstains rather than failing the request
                if metrics is not None:
                    metrics.broken(ws.scorer.name)
                continue
            scores, clamped = _clamped(scores)
            if clamped and metrics is not None:
                metrics.clamped(ws.scorer.name)
            explained.append(ScorerScores(ws.scorer.name, ws.weight, scores))
            w = ws.weight
            if totals is None:
                totals = list(scores) if w == 1.0 else [w * s for s in scores]
            elif w == 1.0:
                totals = list(map(add, totals, scores))
            else:
                totals = [t + w * s for t, s in zip(totals, scores)]
        if totals is None:
            totals = [0.0] * n
        if timer is None:
            ordered = self.picker.pick(totals, remaining, rng, limit)
        else:
            t0 = timer()
            ordered = self.picker.pick(totals, remaining, rng, limit)
            metrics.observe(self.picker.name, timer() - t0)  # type: ignore[union-attr]
            metrics.decided(self.name)  # type: ignore[union-attr]
        first = ordered[0]
        # identity, not ==: comparing frozen views field by field costs more than the whole decision
        best = next(totals[i] for i, e in enumerate(remaining) if e is first) if self.scorers else None
        reason = self.picker.name if best is None else f"{self.picker.name} score {best:.3f} of {n}"
        return Decision(tuple(ordered), self.name, reason, remaining, tuple(explained), totals)


def _clamped(scores: Sequence[float]) -> tuple[Sequence[float], bool]:
    """Scores forced into [0, 1] (NaN counts as 0); the common in-range case costs three C-level passes."""
    lo, hi, total = min(scores), max(scores), sum(scores)
    if lo >= 0.0 and hi <= 1.0 and total == total:
        return scores, False
    return [0.0 if s != s else (1.0 if s > 1.0 else (0.0 if s < 0.0 else s)) for s in scores], True
