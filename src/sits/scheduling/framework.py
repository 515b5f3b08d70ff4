"""Scheduling framework: filters, weighted scorers and a picker over one snapshot.

Everything here is pure: a function of (request, endpoint views, seeded RNG).
No awaits, no clocks, no globals; the caller takes the snapshot. The only clock
is an injected timer in `SchedulingMetrics`, and it never changes an outcome.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import add
from typing import Final, NamedTuple, Protocol

from sits.scheduling.candidate_sample import CandidateSample
from sits.scheduling.filtering import SAMPLE_EMPTY, filter_all, filter_strict
from sits.scheduling.metrics import NO_SCHEDULING_METRICS, SchedulingMetrics
from sits.scheduling.types import EndpointView, SchedulingRequest
from sits.tuples import new_tuple

ONLY_ENDPOINT: Final = "only endpoint"  # a decision's reason when the pool was one endpoint
DEFAULT_PICK_LIMIT = 3  # the director tries at most this many endpoints (connect-error failover)


class Filter(Protocol):
    """A filter; one that tests each endpoint on its own also has `keeps(request)` (filtering.py). One that
    can tell from an endpoint's declared metadata alone that it never turns away a pool of that one
    endpoint (for any request for its model, whatever its live signals) also has
    `always_keeps_one(endpoint) -> bool` (`Profile.lone`)."""

    name: str

    def filter(
        self, request: SchedulingRequest, endpoints: Sequence[EndpointView], rng: random.Random
    ) -> Sequence[EndpointView]:
        """Return the subset of `endpoints` that may serve `request` (order kept)."""
        ...


class Scorer(Protocol):
    """A scorer. Optional: `pinned(request, endpoints) -> indices`, the endpoints a sampled decision
    must include (candidate_sample.py); `abstains(request) -> bool`, True when every score would be 0
    for this request (no prefix, no adapter asked for), so the framework need not call it."""

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


class ScorerScores(NamedTuple):
    """One scorer's clamped scores over `Decision.scored`, kept to explain the decision.

    A named tuple rather than a dataclass: one is built per scorer per decision, and it costs half."""

    name: str
    weight: float
    scores: Sequence[float]


class Decision(NamedTuple):
    """The outcome of scheduling: candidates best-first and why.

    A named tuple (immutable, compared by value) rather than a frozen dataclass: one is built per
    decision, and a frozen dataclass's __init__ is a visible share of a decision's cost (figures:
    bench/README.md, "measured")."""

    candidates: tuple[EndpointView, ...]
    profile: str
    reason: str
    scored: Sequence[EndpointView] = ()  # the endpoints that survived the filters
    raw_scores: tuple[tuple[str, float, Sequence[float]], ...] = ()  # (scorer, weight, scores); see `scores`
    totals: Sequence[float] = ()
    shadows: tuple[Decision, ...] = ()  # shadow profiles' decisions: recorded, never used
    rejected_by: str | None = None  # the filter that left no candidate, if one did

    @property
    def scores(self) -> tuple[ScorerScores, ...]:
        """Each scorer's clamped scores over `scored` (built on demand: most decisions are never explained)."""
        return tuple(ScorerScores(*t) for t in self.raw_scores)

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
    """Filters, weighted scorers and a picker; `run` is one decision.

    The framework's shortcuts never change an outcome: a scorer whose scores are all 0 adds
    nothing to the totals, and a filtered set of one needs no scoring. `sample` (off unless the
    policy sets it) is the one that does: pools larger than `sample.above` are decided over a
    random sample (scheduling/candidate_sample.py).
    """

    name: str
    filters: tuple[Filter, ...]
    scorers: tuple[WeightedScorer, ...]
    picker: Picker
    sample: CandidateSample | None = None
    _scorers: tuple = field(init=False, repr=False, compare=False)  # (scorer, weight, its `abstains` or None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_scorers", tuple((ws.scorer, ws.weight, getattr(ws.scorer, "abstains", None))
                                                   for ws in self.scorers))

    def run(
        self,
        request: SchedulingRequest,
        endpoints: Sequence[EndpointView],
        rng: random.Random,
        metrics: SchedulingMetrics = NO_SCHEDULING_METRICS,
        limit: int = DEFAULT_PICK_LIMIT,
    ) -> Decision:
        # Plugin timings on one decision in `metrics.timed_every` (each timed decision times every plugin).
        timed = metrics.decision(self.name)
        sample = self.sample
        if sample is not None and len(endpoints) > sample.above:
            sampled = sample.draw(request, endpoints, rng, self.scorers)
            decision = self._decide(request, sampled, rng, metrics, timed, limit, len(endpoints))
            if decision is not None:
                return decision
            # Nothing in the sample passed the filters strictly: decide over the whole pool.
        decision = self._decide(request, endpoints, rng, metrics, timed, limit, 0)
        assert decision is not None  # only a sampled pass defers
        return decision

    def lone(self, endpoint: EndpointView) -> Decision | None:
        """The decision for a pool of just `endpoint` when no request can change it (every filter says it
        always keeps a lone endpoint like this one, `always_keeps_one`), else None. A filter without that
        method may turn it away, so the pool is scheduled per request."""
        for f in self.filters:
            always = getattr(f, "always_keeps_one", None)
            if always is None or not always(endpoint):
                return None
        return Decision((endpoint,), self.name, ONLY_ENDPOINT, (endpoint,))

    def _decide(
        self,
        request: SchedulingRequest,
        endpoints: Sequence[EndpointView],
        rng: random.Random,
        metrics: SchedulingMetrics,
        timed: bool,
        limit: int,
        sampled_from: int,
    ) -> Decision | None:
        if sampled_from:
            remaining, emptied = filter_strict(self.filters, request, endpoints, rng, metrics if timed else None)
        elif timed:
            remaining, emptied = filter_all(self.filters, request, endpoints, rng, metrics)
        else:  # the common case, inline: one call less per decision
            remaining, emptied = endpoints, None
            for f in self.filters:
                remaining = f.filter(request, remaining, rng)
                if not remaining:
                    emptied = f.name
                    break
        if emptied is not None:
            if emptied == SAMPLE_EMPTY:
                return None
            metrics.no_candidate(self.name, emptied)
            return Decision((), self.name, f"no endpoint passed {emptied}", rejected_by=emptied)
        if len(remaining) == 1:
            why = ONLY_ENDPOINT if len(endpoints) == 1 else "single candidate"
            return new_tuple(Decision, ((remaining[0],), self.name, why, remaining, (), (), (), None))
        n = len(remaining)
        timer = metrics.timer if timed else None
        totals: list[float] | None = None
        explained = []
        for scorer, w, abstains in self._scorers:
            if abstains is not None and abstains(request):
                explained.append((scorer.name, w, [0.0] * n))  # all 0: adds nothing
                continue
            if timer is None:
                scores = scorer.score(request, remaining)
            else:
                t0 = timer()
                scores = scorer.score(request, remaining)
                metrics.observe(scorer.name, timer() - t0)
            if len(scores) != n:  # a broken scorer abstains rather than failing the request
                metrics.broken(scorer.name)
                continue
            # The clamp's range check; NaN slips past min/max and is caught once, on the totals.
            lo, hi = min(scores), max(scores)
            if lo < 0.0 or hi > 1.0 or lo != lo or hi != hi:
                scores = _clamped(scores)
                metrics.clamped(scorer.name)
                lo, hi = min(scores), max(scores)
            explained.append((scorer.name, w, scores))
            if hi == 0.0 and lo == 0.0 and not sum(scores):
                continue  # all 0 (no prefix, no adapter asked for): adds nothing to any total
            if totals is None:
                totals = list(scores) if w == 1.0 else [w * s for s in scores]  # a scorer may give any sequence
            elif w == 1.0:
                totals = list(map(add, totals, scores))
            else:
                totals = [t + w * s for t, s in zip(totals, scores)]
        if totals is None:
            totals = [0.0] * n
        else:
            total = sum(totals)
            if total != total:  # some scorer gave NaN: clamp every scorer in full and add up again
                explained, totals = _without_nan(explained, n, metrics)
        if timer is None:
            ordered = self.picker.pick(totals, remaining, rng, limit)
        else:
            t0 = timer()
            ordered = self.picker.pick(totals, remaining, rng, limit)
            metrics.observe(self.picker.name, timer() - t0)
        # by identity, not ==: comparing frozen views field by field costs more than the whole decision
        best = totals[list(map(id, remaining)).index(id(ordered[0]))] if self.scorers else None
        reason = self.picker.name if best is None else f"{self.picker.name} score {best:.3f} of {n}"
        if sampled_from:
            reason += f" sampled from {sampled_from}"
        return new_tuple(Decision, (tuple(ordered), self.name, reason, remaining, tuple(explained), totals, (), None))


def _clamped(scores: Sequence[float]) -> list[float]:
    """Scores forced into [0, 1]; NaN counts as 0."""
    return [0.0 if s != s else (1.0 if s > 1.0 else (0.0 if s < 0.0 else s)) for s in scores]


def _without_nan(explained: list, n: int, metrics: SchedulingMetrics) -> tuple[list, list[float]]:
    """The rare path: scores with a NaN that min/max did not see, clamped, and the totals again."""
    fixed, totals = [], [0.0] * n
    for name, w, scores in explained:
        if any(s != s for s in scores):
            scores = _clamped(scores)
            metrics.clamped(name)
        fixed.append((name, w, scores))
        totals = [t + w * s for t, s in zip(totals, scores)]
    return fixed, totals
