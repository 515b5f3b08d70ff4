"""Router metrics: RouteLLM's APGR and CPT for a strong/weak pair, and quality-cost frontiers.

APGR: the mean, over strong-call fractions 0..100%, of the performance gap recovered
PGR(f) = (q(f) - q_weak) / (q_strong - q_weak), where q(f) sends the fraction f of
prompts a router ranks highest to the strong model. CPT(x): the least strong-call
fraction whose PGR reaches x.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FRACTIONS = np.linspace(0.0, 1.0, 101)


@dataclass(frozen=True, slots=True)
class PairMetrics:
    apgr: float
    cpt50: float
    cpt80: float
    pgr: tuple[float, ...]  # at FRACTIONS


def pair_metrics(strong: np.ndarray, weak: np.ndarray, rank_score: np.ndarray, seed: int = 0) -> PairMetrics:
    """`rank_score`: higher means "call the strong model"; ties are broken at random (seeded)."""
    n = len(strong)
    gap = float(strong.mean() - weak.mean())
    if n == 0 or abs(gap) < 1e-12:
        raise ValueError("APGR needs prompts and a quality gap between the strong and the weak model")
    tiebreak = np.random.default_rng(seed).random(n)
    order = np.lexsort((tiebreak, -rank_score))  # best-first
    gain = (strong - weak)[order]
    cum = np.concatenate([[0.0], np.cumsum(gain)])
    counts = np.round(FRACTIONS * n).astype(int)
    quality = weak.mean() + cum[counts] / n
    pgr = (quality - weak.mean()) / gap
    apgr = float(np.trapezoid(pgr, FRACTIONS))
    return PairMetrics(apgr, _cpt(pgr, 0.5), _cpt(pgr, 0.8), tuple(float(p) for p in pgr))


def random_apgr(strong: np.ndarray, weak: np.ndarray, seeds: int = 20) -> PairMetrics:
    """The random router, averaged over seeds (its expectation is APGR 0.5)."""
    runs = [pair_metrics(strong, weak, np.zeros(len(strong)), seed=s) for s in range(seeds)]
    pgr = np.mean([r.pgr for r in runs], axis=0)
    return PairMetrics(float(np.mean([r.apgr for r in runs])), _cpt(pgr, 0.5), _cpt(pgr, 0.8), tuple(pgr))


def _cpt(pgr: np.ndarray, target: float) -> float:
    hit = np.nonzero(np.asarray(pgr) >= target - 1e-9)[0]
    return round(float(FRACTIONS[hit[0]]), 4) if len(hit) else 1.0


@dataclass(frozen=True, slots=True)
class Point:
    cost: float  # mean USD per prompt
    quality: float  # mean score
    label: str = ""


def assignment_point(choice: np.ndarray, scores: np.ndarray, costs: np.ndarray, label: str = "") -> Point:
    rows = np.arange(len(choice))
    return Point(float(costs[rows, choice].mean()), float(scores[rows, choice].mean()), label)


def utility_frontier(
    predicted: np.ndarray, cost_estimate: np.ndarray, scores: np.ndarray, costs: np.ndarray, lambdas: np.ndarray,
) -> list[Point]:
    """Route each prompt to argmax(predicted - lambda * cost_estimate) for each lambda; Pareto-pruned."""
    points = []
    for lam in lambdas:
        choice = np.argmax(predicted - lam * cost_estimate, axis=1)
        points.append(assignment_point(choice, scores, costs, f"lambda={lam:.4g}"))
    return pareto(points)


def mix_frontier(
    rank_score: np.ndarray, cheap: int, best: int, scores: np.ndarray, costs: np.ndarray, steps: int = 21,
) -> list[Point]:
    """Send the top fraction f by `rank_score` to `best`, the rest to `cheap`, for f in 0..1."""
    n = len(rank_score)
    order = np.argsort(-rank_score, kind="stable")
    points = []
    for f in np.linspace(0, 1, steps):
        choice = np.full(n, cheap)
        choice[order[: int(round(f * n))]] = best
        points.append(assignment_point(choice, scores, costs, f"f={f:.2f}"))
    return points


def pareto(points: list[Point]) -> list[Point]:
    """Points no other point beats on both cost and quality, cheapest first."""
    out: list[Point] = []
    for p in sorted(points, key=lambda p: (p.cost, -p.quality)):
        if not out or p.quality > out[-1].quality + 1e-12:
            out.append(p)
    return out


def cost_to_reach(points: list[Point], quality: float) -> float | None:
    """The least cost on a frontier whose quality reaches `quality` (None when none does)."""
    hits = [p.cost for p in points if p.quality >= quality - 1e-9]
    return min(hits) if hits else None


def quality_within(points: list[Point], cost: float) -> float | None:
    """The best quality on a frontier at `cost` or less (None when every point costs more)."""
    return max((p.quality for p in points if p.cost <= cost * (1 + 1e-9)), default=None)


def frontier_auc(points: list[Point], lo: float, hi: float, grid: int = 50) -> float:
    """Mean over costs in [lo, hi] (log-spaced) of the best quality reachable at that cost or less."""
    if not points:
        return 0.0
    cs = np.geomspace(max(lo, 1e-12), max(hi, lo * 1.0001, 1e-12), grid)
    best = [max((p.quality for p in points if p.cost <= c + 1e-15), default=0.0) for c in cs]
    return float(np.mean(best))
