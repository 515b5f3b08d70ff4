"""Does auxiliary outcome data help a strong/weak router? A measurement, not a product path.

`python -m research.aux_study --data F --aux routerdc-7models.jsonl ...`

Protocol (the same seeded 50/50 split as `sits router train --holdout 0.5`):
- every auxiliary row that may be a held-out prompt is dropped (`auxiliary.overlapping_rows`);
- variants are scored by 5-fold cross-validation on the training half only; inside each fold
  the auxiliary rows matching that fold's validation prompts are dropped too;
- the variant with the best CV APGR is the choice; held-out APGR is printed for every variant
  for the record, but nothing is chosen by it.

It also reports, as an upper bound, the APGR of ranking the training prompts found in the
auxiliary set by their *true* auxiliary difficulty (no prediction involved).

Variants: `base` (the router alone); `blend-a` (rank blend, weight a, of the router's
strong-minus-weak gap with a predicted difficulty: 1 - mean auxiliary score of the k nearest
auxiliary prompts); `pseudo` (auxiliary rows added as training rows, labelled by a logistic map
from their auxiliary scores to each model's outcome, fitted on training prompts found in both).
The auxiliary models' outcomes on an evaluated prompt are never used.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from research.auxiliary import overlapping_rows, question_stem
from sits.understanding.embedders import make_embedder
from sits.understanding.embedding_cache import DEFAULT_CACHE_DIR, cached_embed
from sits.understanding.quality_router.metrics import pair_metrics
from sits.understanding.quality_router.outcomes import Outcomes, load_outcomes
from sits.understanding.quality_router.predictors import fit_bilinear, fit_knn
from sits.understanding.quality_router.training import CANDIDATES, FOLDS, split_indices

BLENDS = (0.25, 0.5)
AUX_K = 100


def embed(spec: str, texts: list[str], cache: Path) -> np.ndarray:
    """The "+"-joined embedder's vectors; the cache keeps one block per part, so a slow part is embedded once."""
    return cached_embed(make_embedder(spec), texts, cache)


def _rank(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(x, kind="stable"), kind="stable") / max(len(x) - 1, 1)


class Study:
    def __init__(self, data: Outcomes, x: np.ndarray, aux: Outcomes, xa: np.ndarray, main: str) -> None:
        self.o, self.x, self.aux, self.xa = data, x, aux, xa
        self.fit_main: Callable = {n: f for c in CANDIDATES.values() for n, f in c.items()}[main]
        self.aux_stem = {}
        for j, p in enumerate(aux.prompts):
            self.aux_stem.setdefault(question_stem(p), j)

    def _calibration(self, fit_idx: np.ndarray, allowed: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        pairs = [(i, self.aux_stem[question_stem(self.o.prompts[i])]) for i in fit_idx
                 if question_stem(self.o.prompts[i]) in self.aux_stem]
        pairs = [(i, j) for i, j in pairs if allowed[j]]
        z = self._z(self.aux.scores[[j for _, j in pairs]])
        mu, sd = z.mean(0), z.std(0) + 1e-6
        model = fit_bilinear((z - mu) / sd, self.o.scores[[i for i, _ in pairs]], None, 1e-3, epochs=500)
        return lambda s: model.predict((self._z(s) - mu) / sd)

    @staticmethod
    def _z(s: np.ndarray) -> np.ndarray:
        return np.concatenate([s, s.mean(axis=1, keepdims=True)], axis=1)

    def gaps(self, fit_idx: np.ndarray, eval_idx: np.ndarray, protected: np.ndarray, si: int, wi: int
             ) -> dict[str, np.ndarray]:
        """Each variant's rank score on eval_idx; `protected`: auxiliary rows never to be used."""
        p = self.fit_main(self.x[fit_idx], self.o.scores[fit_idx]).predict(self.x[eval_idx])
        base = p[:, si] - p[:, wi]
        out = {"base": base}
        ok = ~(protected | overlapping_rows(self.aux.prompts, [self.o.prompts[i] for i in eval_idx]))
        difficulty = 1 - fit_knn(self.xa[ok], self.aux.scores[ok], AUX_K).predict(self.x[eval_idx]).mean(axis=1)
        for a in BLENDS:
            out[f"blend-{a:g}"] = (1 - a) * _rank(base) + a * _rank(difficulty)
        # Extra rows: not the training prompts themselves (they have real labels).
        extra = ok & ~overlapping_rows(self.aux.prompts, [self.o.prompts[i] for i in fit_idx])
        label = self._calibration(fit_idx, ok)
        xs = np.concatenate([self.x[fit_idx], self.xa[extra]])
        ys = np.concatenate([self.o.scores[fit_idx], label(self.aux.scores[extra])])
        p = self.fit_main(xs, ys).predict(self.x[eval_idx])
        out["pseudo"] = p[:, si] - p[:, wi]
        return out


def run(args: argparse.Namespace) -> dict[str, object]:
    o = load_outcomes(args.data)
    aux = load_outcomes(args.aux)
    if args.aux_datasets:
        keep = [j for j, i in enumerate(aux.ids) if i.startswith(tuple(args.aux_datasets.split(",")))]
        aux = aux.subset(keep)
    train, held = split_indices(len(o), 0.5, args.seed)
    means = o.scores[train].mean(axis=0)
    si, wi = int(means.argmax()), int(means.argmin())
    x = embed(args.embedder, list(o.prompts), args.cache)
    xa = embed(args.embedder, list(aux.prompts), args.cache)
    study = Study(o, x, aux, xa, args.main)
    held_out = overlapping_rows(aux.prompts, [o.prompts[i] for i in held])
    print(f"{len(aux)} auxiliary rows; {int(held_out.sum())} dropped as possible held-out prompts", file=sys.stderr)
    folds = np.random.default_rng(args.seed).permutation(len(train)) % FOLDS
    cv: dict[str, list[float]] = {}
    for k in range(FOLDS):
        fit_idx, val_idx = train[folds != k], train[folds == k]
        s = o.scores[val_idx]
        for name, g in study.gaps(fit_idx, val_idx, held_out, si, wi).items():
            cv.setdefault(name, []).append(pair_metrics(s[:, si], s[:, wi], g).apgr)
        print(f"fold {k}: " + ", ".join(f"{n} {v[-1]:.3f}" for n, v in cv.items()), file=sys.stderr)
    chosen = max(cv, key=lambda n: float(np.mean(cv[n])))
    # How much the signal could give at best: training prompts found in the auxiliary set, ranked by
    # their own true auxiliary difficulty (training data only; unavailable for a new prompt).
    both = [(i, study.aux_stem[question_stem(o.prompts[i])]) for i in train
            if question_stem(o.prompts[i]) in study.aux_stem]
    bi, bj = [i for i, _ in both], [j for _, j in both]
    ceiling = pair_metrics(o.scores[bi, si], o.scores[bi, wi], 1 - aux.scores[bj].mean(axis=1)).apgr if both else None
    s = o.scores[held]
    final = study.gaps(train, held, held_out, si, wi)
    return {
        "data": args.data.name, "aux": args.aux.name, "aux_datasets": args.aux_datasets, "aux_rows": len(aux),
        "aux_rows_dropped_as_held_out": int(held_out.sum()), "embedder": args.embedder, "main": args.main,
        "strong": o.models[si], "weak": o.models[wi], "train_rows": len(train), "held_out_rows": len(held),
        "train_rows_in_aux": len(both), "train_apgr_ranked_by_true_aux_difficulty": ceiling,
        "cv_apgr": {n: float(np.mean(v)) for n, v in cv.items()}, "chosen_by_cv": chosen,
        "held_out_apgr": {n: pair_metrics(s[:, si], s[:, wi], g).apgr for n, g in final.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--aux", type=Path, required=True)
    ap.add_argument("--aux-datasets", default="", help="keep auxiliary rows whose id starts with one of these")
    ap.add_argument("--embedder", default="e5")
    ap.add_argument("--main", default="knn-k100", choices=[n for c in CANDIDATES.values() for n in c],
                    help="the router's predictor (a `sits router train` candidate)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE_DIR)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    result = run(args)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
