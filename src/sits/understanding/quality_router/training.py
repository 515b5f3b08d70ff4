"""Training a quality router: embed prompts, fit candidate predictors, keep the best by measurement.

Selection is by 5-fold cross-validation on the training rows (a single 20% split proved
too noisy on a few hundred prompts): for two models the candidate with the
best APGR wins, for more the best area under the quality-cost frontier (or the best
mean quality of its top choice when there are no costs). The winner is refit on all rows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import numpy as np

from sits.understanding.embedders import make_embedder
from sits.understanding.embedding_cache import cached_embed
from sits.understanding.quality_router.artifact import TrainedRouter, save_router
from sits.understanding.quality_router.metrics import frontier_auc, pair_metrics, utility_frontier
from sits.understanding.quality_router.outcomes import Outcomes, load_outcomes, prompt_key
from sits.understanding.quality_router.predictors import Predictor, fit_bilinear, fit_knn

FOLDS = 5
Fit = Callable[[np.ndarray, np.ndarray], Predictor]

CANDIDATES: dict[str, dict[str, Fit]] = {
    "knn": {f"knn-k{k}": (lambda x, y, k=k: fit_knn(x, y, k)) for k in (10, 40, 100)},
    "logistic": {f"logistic-l2={l2:g}": (lambda x, y, l2=l2: fit_bilinear(x, y, None, l2)) for l2 in (1e-2, 1e-1)},
    "mf": {"mf-r16": lambda x, y: fit_bilinear(x, y, 16, 1e-3)},
}


def selection_score(predicted: np.ndarray, outcomes: Outcomes) -> float:
    s = outcomes.scores
    if s.shape[1] == 2:
        strong, weak = (0, 1) if s[:, 0].mean() >= s[:, 1].mean() else (1, 0)
        return pair_metrics(s[:, strong], s[:, weak], predicted[:, strong] - predicted[:, weak]).apgr
    if outcomes.costs is not None:
        mean_costs = outcomes.costs.mean(axis=0)
        lambdas = _lambdas(mean_costs)
        points = utility_frontier(predicted, mean_costs[None, :], s, outcomes.costs, lambdas)
        return frontier_auc(points, float(mean_costs.min()), float(mean_costs.max()))
    return float(s[np.arange(len(s)), predicted.argmax(axis=1)].mean())


def _lambdas(mean_costs: np.ndarray) -> np.ndarray:
    """Cost weights from "ignore cost" to "a quality point is worth the cheapest model's whole cost"."""
    scale = 1.0 / max(float(mean_costs.min()), 1e-12)
    return np.concatenate([[0.0], np.geomspace(scale * 1e-4, scale * 10, 60)])


def train_router(
    outcomes: Outcomes, vectors: np.ndarray, embedder_name: str, kind: str = "auto", seed: int = 0,
    log: Callable[[str], None] = lambda _: None,
) -> TrainedRouter:
    kinds = tuple(CANDIDATES) if kind == "auto" else (kind,)
    candidates = {name: fit for k in kinds for name, fit in CANDIDATES[k].items()}
    folds = np.random.default_rng(seed).permutation(len(outcomes)) % FOLDS
    selection: dict[str, float] = {}
    for name, fit in candidates.items():
        per_fold = []
        for k in range(FOLDS):
            fit_idx, val_idx = np.nonzero(folds != k)[0], np.nonzero(folds == k)[0]
            model = fit(vectors[fit_idx], outcomes.scores[fit_idx])
            per_fold.append(selection_score(model.predict(vectors[val_idx]), outcomes.subset(val_idx)))
        selection[name] = float(np.mean(per_fold))
        log(f"  {name:<20} cross-validated {selection[name]:.4f}")
    best = max(selection, key=lambda n: selection[n])
    log(f"  chose {best}")
    predictor = candidates[best](vectors, outcomes.scores)
    mean_costs = None if outcomes.costs is None else tuple(float(c) for c in outcomes.costs.mean(axis=0))
    return TrainedRouter(embedder_name, outcomes.models, mean_costs, predictor,
                         frozenset(prompt_key(p) for p in outcomes.prompts), selection)


def split_indices(n: int, holdout: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    cut = n - int(round(holdout * n))
    return np.sort(order[:cut]), np.sort(order[cut:])


def train_router_cli(
    data: Path, out: Path, kind: str, embedder_name: str, cache_dir: Path | None, stdout: TextIO,
    holdout: float = 0.0, seed: int = 0,
) -> int:
    outcomes = load_outcomes(data)
    train_idx, held_idx = split_indices(len(outcomes), holdout, seed)
    outcomes_train = outcomes.subset(train_idx)
    embedder = make_embedder(embedder_name)
    vectors = cached_embed(embedder, list(outcomes.prompts), cache_dir)[train_idx]
    print(f"training on {len(train_idx)} prompts x {len(outcomes.models)} models "
          f"({len(held_idx)} held out, never seen)", file=stdout)
    router = train_router(outcomes_train, vectors, embedder.name, kind, seed, lambda s: print(s, file=stdout))
    save_router(router, out)
    print(f"wrote {out} ({router.predictor.kind})", file=stdout)
    return 0
