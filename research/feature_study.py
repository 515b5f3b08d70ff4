"""Which prompt features a quality router should use, by cross-validation on the training half only.

    python -m research.feature_study --data routerbench-train.jsonl \
        --embedders e5,e5@last,e5+e5@last,e5+charngram --out study.json

Same seeded 50/50 split and the same 5 folds as `sits router train --holdout 0.5`; the held-out
half is never read. Per feature set and candidate predictor it reports the product's selection
score (area under the quality-cost frontier) and the quality at <= 25% of the best single model's
cost (RouterBench's target), with the request-time cost estimate (each model's mean cost on the
fit rows). Two diagnostics where the data names each row's benchmark (`dataset`): the router that
knows only the benchmark (each model's mean score on it), and how well kNN k=100 ranks each model's
per-prompt correctness within a benchmark (ROC AUC, 0.5 = no signal; out-of-fold averages sit a
little under 0.5 when there is none, since a fold's own rows are missing from its neighbours).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sits.understanding.embedders import make_embedder
from sits.understanding.embedding_cache import cache_dir_from_env, cached_embed
from sits.understanding.quality_router.metrics import cost_to_reach, frontier_auc, quality_within, utility_frontier
from sits.understanding.quality_router.outcomes import Outcomes, load_outcomes
from sits.understanding.quality_router.predictors import fit_knn
from sits.understanding.quality_router.training import CANDIDATES, FOLDS, _lambdas, split_indices

TARGET_FRACTION = 0.25


def cross_validate(o: Outcomes, predict: Callable[[np.ndarray, np.ndarray], np.ndarray], seed: int = 0) -> dict:
    """`predict(fit_idx, val_idx)` -> predicted quality of the validation rows; means over the folds."""
    assert o.costs is not None
    best = int(o.scores.mean(0).argmax())
    folds = np.random.default_rng(seed).permutation(len(o)) % FOLDS
    auc, q_at, reach = [], [], []
    for k in range(FOLDS):
        fit_idx, val_idx = np.nonzero(folds != k)[0], np.nonzero(folds == k)[0]
        v, est = o.subset(val_idx), o.costs[fit_idx].mean(0)
        pts = utility_frontier(predict(fit_idx, val_idx), est[None, :], v.scores, v.costs, _lambdas(est))
        auc.append(frontier_auc(pts, float(v.costs.mean(0).min()), float(v.costs.mean(0).max())))
        full = float(v.costs[:, best].mean())
        q_at.append(quality_within(pts, TARGET_FRACTION * full) or 0.0)
        hit = cost_to_reach(pts, float(v.scores[:, best].mean()))
        reach.append(1.0 if hit is None else hit / full)
    return {"frontier_auc": float(np.mean(auc)), "quality_at_25pct_cost": float(np.mean(q_at)),
            "cost_fraction_to_reach_best": float(np.mean(reach))}


def roc_auc(y: np.ndarray, s: np.ndarray) -> float:
    pos, neg = s[y > 0.5], s[y <= 0.5]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    diff = pos[:, None] - neg[None, :]  # every (correct, wrong) pair; ties count a half
    return float((diff > 0).mean() + 0.5 * (diff == 0).mean())


def within_benchmark_auc(o: Outcomes, x: np.ndarray, bench: np.ndarray, seed: int = 0) -> dict[str, float]:
    folds = np.random.default_rng(seed).permutation(len(o)) % FOLDS
    pred = np.zeros_like(o.scores)
    for k in range(FOLDS):
        fit_idx, val_idx = np.nonzero(folds != k)[0], np.nonzero(folds == k)[0]
        pred[val_idx] = fit_knn(x[fit_idx], o.scores[fit_idx], 100).predict(x[val_idx])
    return {b: float(np.nanmean([roc_auc(o.scores[bench == b, j], pred[bench == b, j]) for j in range(len(o.models))]))
            for b in sorted(set(bench))}


def benchmarks(path: Path, prompts: tuple[str, ...]) -> np.ndarray | None:
    names = {}
    for line in path.read_text("utf-8").split("\n"):
        if line.strip():
            row = json.loads(line)
            names[row["prompt"]] = row.get("dataset")
    out = np.array([names.get(p) for p in prompts], dtype=object)
    return None if any(b is None for b in out) else out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--embedders", default="e5,e5@last,e5+e5@last,e5+charngram")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    cache = cache_dir_from_env(os.environ)
    everything = load_outcomes(args.data)
    train_idx, _ = split_indices(len(everything), 0.5, args.seed)
    o = everything.subset(train_idx)  # the held-out half is never looked at
    bench = benchmarks(args.data, o.prompts)
    report: dict = {"data": args.data.name, "training_rows": len(o), "folds": FOLDS, "features": {}}
    if bench is not None:
        def prior(fit_idx: np.ndarray, val_idx: np.ndarray) -> np.ndarray:
            return np.stack([o.scores[fit_idx][bench[fit_idx] == bench[i]].mean(0) for i in val_idx])

        report["benchmark_prior"] = cross_validate(o, prior, args.seed)
        print(f"{'benchmark identity alone':<44}{_fmt(report['benchmark_prior'])}", flush=True)
    for spec in args.embedders.split(","):
        x = cached_embed(make_embedder(spec), list(everything.prompts), cache)[train_idx]
        entry: dict = {"candidates": {}}
        for name, fit in {n: f for c in CANDIDATES.values() for n, f in c.items()}.items():
            r = cross_validate(o, lambda fi, vi, fit=fit: fit(x[fi], o.scores[fi]).predict(x[vi]), args.seed)
            entry["candidates"][name] = r
            print(f"{spec:<22}{name:<22}{_fmt(r)}", flush=True)
        if bench is not None:
            entry["within_benchmark_roc_auc_knn100"] = within_benchmark_auc(o, x, bench, args.seed)
            print(f"{spec:<22}within-benchmark ROC AUC {entry['within_benchmark_roc_auc_knn100']}", flush=True)
        report["features"][spec] = entry
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def _fmt(r: dict) -> str:
    return (f"frontier AUC {r['frontier_auc']:.4f}  quality at 25% cost {r['quality_at_25pct_cost']:.4f}  "
            f"cost to reach best {r['cost_fraction_to_reach_best']:.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
