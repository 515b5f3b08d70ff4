"""`sits router eval`: a trained router against the baselines, on prompts it never saw.

Baselines: random, prompt length (longer -> stronger model), best single model, oracle.
For a strong/weak pair: APGR, CPT(50%), CPT(80%). With costs: the quality-cost frontier
(mean USD per prompt, mean score) and the cost at which each reaches the best single
model's quality.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from sits.errors import ConfigError
from sits.understanding.embedders import make_embedder
from sits.understanding.embedding_cache import cached_embed
from sits.understanding.quality_router.artifact import load_router
from sits.understanding.quality_router.metrics import (
    PairMetrics, Point, assignment_point, cost_to_reach, mix_frontier, pair_metrics, quality_within, random_apgr,
    utility_frontier,
)
from sits.understanding.quality_router.outcomes import Outcomes, load_outcomes, prompt_key
from sits.understanding.quality_router.training import _lambdas

COST_FRACTIONS = (0.25, 0.5)  # RouterBench's target: the best single model's quality at <= 25% of its cost


@dataclass(frozen=True)
class EvalReport:
    rows: int
    skipped_seen: int
    strong: str
    weak: str
    pair: dict[str, PairMetrics]  # router and baselines
    frontiers: dict[str, list[Point]]  # empty without costs
    singles: list[Point]
    reach: dict[str, float | None]  # cost / best single model's cost to reach its quality
    quality_at: dict[str, dict[str, float | None]]  # fraction of the best single model's cost -> frontier -> quality
    strong_quality: float
    weak_quality: float

    def as_json(self) -> dict[str, object]:
        def pts(ps: list[Point]) -> list[dict[str, float]]:
            return [{"cost": p.cost, "quality": p.quality} for p in ps]

        r = self.pair["router"]
        return {
            "rows": self.rows, "skipped_seen_in_training": self.skipped_seen, "strong": self.strong, "weak": self.weak,
            "apgr": r.apgr, "cpt50": r.cpt50, "cpt80": r.cpt80, "frontier": pts(self.frontiers.get("router", [])),
            "baselines": {
                **{name: {"apgr": m.apgr, "cpt50": m.cpt50, "cpt80": m.cpt80,
                          "frontier": pts(self.frontiers.get(name, []))}
                   for name, m in self.pair.items() if name != "router"},
                # Always the strong model: the gap is recovered only at 100% strong calls; APGR is not defined.
                "best_single": {"apgr": None, "cpt50": 1.0, "cpt80": 1.0, "quality": self.strong_quality,
                                "frontier": pts(self.frontiers.get("best_single", []))},
            },
            "single_models": [{"model": p.label, "cost": p.cost, "quality": p.quality} for p in self.singles],
            "cost_fraction_to_reach_best_single": self.reach,
            "quality_at_cost_fraction_of_best_single": self.quality_at,
        }


def evaluate(outcomes: Outcomes, predicted: np.ndarray, strong: str | None, weak: str | None,
             skipped: int = 0) -> EvalReport:
    s = outcomes.scores
    means = s.mean(axis=0)
    strong = strong or outcomes.models[int(means.argmax())]
    weak = weak or outcomes.models[int(means.argmin())]
    for name in (strong, weak):
        if name not in outcomes.models:
            raise ConfigError(f"model {name!r} is not in the data; models: {', '.join(outcomes.models)}")
    si, wi = outcomes.models.index(strong), outcomes.models.index(weak)
    lengths = np.array([len(p) for p in outcomes.prompts], dtype=float)
    pair = {
        "router": pair_metrics(s[:, si], s[:, wi], predicted[:, si] - predicted[:, wi]),
        "random": random_apgr(s[:, si], s[:, wi]),
        "prompt_length": pair_metrics(s[:, si], s[:, wi], lengths),
        "oracle": pair_metrics(s[:, si], s[:, wi], s[:, si] - s[:, wi]),
    }
    frontiers: dict[str, list[Point]] = {}
    singles: list[Point] = []
    reach: dict[str, float | None] = {}
    quality_at: dict[str, dict[str, float | None]] = {}
    if outcomes.costs is not None:
        c = outcomes.costs
        n = len(s)
        singles = [assignment_point(np.full(n, j), s, c, m) for j, m in enumerate(outcomes.models)]
        best = max(range(len(singles)), key=lambda j: singles[j].quality)
        cheap = min(range(len(singles)), key=lambda j: singles[j].cost)
        mean_costs = c.mean(axis=0)[None, :]
        lambdas = _lambdas(c.mean(axis=0))
        rng = np.random.default_rng(0)
        frontiers = {
            "router": utility_frontier(predicted, mean_costs, s, c, lambdas),
            "random": mix_frontier(rng.random(n), cheap, best, s, c),
            "prompt_length": mix_frontier(lengths, cheap, best, s, c),
            "best_single": [singles[best]],
            "oracle": utility_frontier(s, c, s, c, lambdas),
        }
        target, full = singles[best].quality, singles[best].cost
        for name, pts in frontiers.items():
            hit = cost_to_reach(pts, target)
            reach[name] = None if hit is None else hit / full
        quality_at = {f"{f:g}": {name: quality_within(pts, f * full) for name, pts in frontiers.items()}
                      for f in COST_FRACTIONS}
    return EvalReport(len(s), skipped, strong, weak, pair, frontiers, singles, reach, quality_at,
                      float(s[:, si].mean()), float(s[:, wi].mean()))


def eval_router_cli(
    router_dir: Path, data: Path, strong: str | None, weak: str | None, plot: Path | None, as_json: bool,
    cache_dir: Path | None, stdout: TextIO,
) -> int:
    if plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise ConfigError("--plot needs matplotlib, which is not installed (pip install matplotlib, "
                          "or the 'research' extra)")
    router = load_router(router_dir)
    outcomes = load_outcomes(data)
    missing = [m for m in router.models if m not in outcomes.models]
    if missing:
        raise ConfigError(f"the data has no scores for the router's model {missing[0]!r}")
    vectors_all = cached_embed(make_embedder(router.embedder), list(outcomes.prompts), cache_dir)
    unseen = np.array([i for i, p in enumerate(outcomes.prompts) if prompt_key(p) not in router.train_keys], int)
    if len(unseen) == 0:
        raise ConfigError("every prompt in the data was used to train this router; evaluate on unseen prompts")
    test = outcomes.subset(unseen).select_models(router.models)
    report = evaluate(test, router.predict(vectors_all[unseen]), strong, weak, len(outcomes) - len(unseen))
    if plot is not None and report.frontiers:
        plot_frontiers(report.frontiers, report.singles, plot, title=data.name)
    if as_json:
        print(json.dumps(report.as_json()), file=stdout)
    else:
        _print_report(report, stdout)
    return 0


def _print_report(r: EvalReport, out: TextIO) -> None:
    print(f"{r.rows} unseen prompts ({r.skipped_seen} skipped: used in training); "
          f"strong={r.strong} weak={r.weak}", file=out)
    print(f"{'router':<16}{'APGR':>8}{'CPT(50%)':>10}{'CPT(80%)':>10}", file=out)
    for name, m in r.pair.items():
        print(f"{name:<16}{m.apgr:>8.3f}{m.cpt50:>10.2f}{m.cpt80:>10.2f}", file=out)
    print(f"{'best_single':<16}{'-':>8}{1.0:>10.2f}{1.0:>10.2f}   (always {r.strong}: quality {r.strong_quality:.3f}; "
          f"weak alone {r.weak_quality:.3f})", file=out)
    if not r.frontiers:
        return
    print("\nsingle models (mean USD per prompt, mean quality):", file=out)
    for p in sorted(r.singles, key=lambda p: p.cost):
        print(f"  {p.label:<40}{p.cost:>12.6f}{p.quality:>8.3f}", file=out)
    print("\ncost (fraction of the best single model's) to reach its quality:", file=out)
    for name, frac in r.reach.items():
        print(f"  {name:<16}{'not reached' if frac is None else f'{frac:.1%}':>12}", file=out)
    for f, by_name in r.quality_at.items():
        print(f"\nquality at <= {float(f):.0%} of the best single model's cost:", file=out)
        for name, q in by_name.items():
            print(f"  {name:<16}{'-' if q is None else f'{q:.3f}':>12}", file=out)
    print("\nrouter frontier (mean USD per prompt, mean quality):", file=out)
    for p in r.frontiers["router"]:
        print(f"  {p.cost:>12.6f}{p.quality:>8.3f}", file=out)


def plot_frontiers(frontiers: dict[str, list[Point]], singles: list[Point], path: Path, title: str) -> None:
    """The quality-cost frontier as a PNG (matplotlib is imported only when a plot is asked for)."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    styles = {"router": "-o", "oracle": "--", "random": ":", "prompt_length": "-."}
    for name, pts in frontiers.items():
        if name == "best_single":
            continue
        ax.plot([p.cost for p in pts], [p.quality for p in pts], styles.get(name, "-"), label=name, markersize=3)
    ax.scatter([p.cost for p in singles], [p.quality for p in singles], c="grey", s=14, label="single models")
    for p in singles:
        ax.annotate(p.label.split("/")[-1][:18], (p.cost, p.quality), fontsize=6, alpha=0.7)
    ax.set_xscale("log")
    ax.set_xlabel("mean cost per prompt (USD, log)")
    ax.set_ylabel("mean quality")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
