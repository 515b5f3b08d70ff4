"""Rankers for a strong/weak pair beyond one predictor on one feature set, chosen by cross-validation.

    python -m research.ensemble_study --data routellm-gsm8k-dev.jsonl \
        --embedders e5,charngram,e5+charngram,minilm --out cv.json            # 5-fold CV on the training half
    python -m research.ensemble_study --data ... --evaluate cv.json --out result.json

Same seeded 50/50 split and the same 5 folds as `sits router train --holdout 0.5`. The first call
never reads the held-out half: it scores every candidate by mean per-fold APGR and names the best.
The second fits that one choice, and the product's own choice (`train_router`, kind auto, on the
product's features), on the whole training half and scores both once on the unseen rows that
`sits router eval` keeps (prompts not seen in training). Candidates, each named `ranker@features`:

- `knn-kK`: the product's kNN (cosine-weighted mean over K neighbours) of the strong-minus-weak gain;
  `knn-softT-kK`: the same with softmax weights exp(cosine / T).
- `logistic-l2=L`: the product's two logistic heads, ranked by p(strong right) - p(weak right).
- `gap3-l2=L`: one multinomial logistic over the gain's three values (-1, 0, +1), ranked by
  p(+1) - p(-1): the gap as the target instead of two independent qualities.
- `subject-prior`, `knn-k100+subject-bB` (when rows name a subject, as RouteLLM MMLU's `dataset`
  does): a logistic subject classifier's probabilities times each subject's mean gain on the fit
  rows, alone or as B pseudo-neighbours that kNN's estimate is shrunk towards. `true-subject` (each
  validation row's own subject's mean gain) is a diagnostic, never chosen: the prompt does not say it.
- `rank-mean(...)`: the mean of the members' ranks (scaled to [0, 1] within the scored rows).
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
from sits.understanding.quality_router.metrics import pair_metrics
from sits.understanding.quality_router.outcomes import Outcomes, load_outcomes, prompt_key
from sits.understanding.quality_router.predictors import fit_bilinear
from sits.understanding.quality_router.training import FOLDS, split_indices, train_router

Ranker = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (fit rows, scored rows) -> gain score, higher = strong
DIAGNOSTIC = ("true-subject",)


def knn_gain(x: np.ndarray, gain: np.ndarray, fi: np.ndarray, vi: np.ndarray, k: int,
             temperature: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(weighted sum of the k nearest fit rows' gains, sum of weights) per scored row."""
    k = min(k, len(fi))
    num, den = np.empty(len(vi)), np.empty(len(vi))
    keys = x[fi]
    for s in range(0, len(vi), 1024):
        sims = x[vi[s : s + 1024]] @ keys.T
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        near = np.take_along_axis(sims, top, axis=1).astype(np.float64)
        if temperature is None:
            w = np.maximum(near, 0.0) + 1e-6  # the product's KnnPredictor weights
        else:
            w = np.exp((near - near.max(axis=1, keepdims=True)) / temperature)
        num[s : s + 1024] = (w * gain[fi][top]).sum(axis=1)
        den[s : s + 1024] = w.sum(axis=1)
    return num, den


def fit_softmax(x: np.ndarray, labels: np.ndarray, classes: int, l2: float, epochs: int = 300,
                lr: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression by full-batch Adam (the same schedule as `fit_bilinear`)."""
    n, d = x.shape
    y = np.eye(classes)[labels]
    prior = y.mean(0) + 1e-3
    params = {"v": np.zeros((d, classes)), "b": np.log(prior / prior.sum())}
    state = {k: (np.zeros_like(p), np.zeros_like(p)) for k, p in params.items()}
    x64 = x.astype(np.float64)
    for t in range(1, epochs + 1):
        g = (softmax(x64 @ params["v"] + params["b"]) - y) / n
        grads = {"v": x64.T @ g + l2 * params["v"], "b": g.sum(0)}
        for k, gk in grads.items():
            m1, m2 = state[k]
            m1, m2 = 0.9 * m1 + 0.1 * gk, 0.999 * m2 + 0.001 * gk * gk
            state[k] = (m1, m2)
            params[k] -= lr * (m1 / (1 - 0.9**t)) / (np.sqrt(m2 / (1 - 0.999**t)) + 1e-8)
    return params["v"], params["b"]


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def rank01(score: np.ndarray) -> np.ndarray:
    """Ranks scaled to [0, 1]; ties share their mean rank."""
    order = np.argsort(score, kind="stable")
    ranks = np.empty(len(score))
    ranks[order] = np.arange(len(score))
    _, inverse = np.unique(score, return_inverse=True)
    ranks = np.bincount(inverse, ranks) / np.bincount(inverse)
    return ranks[inverse] / max(len(score) - 1, 1)


def rankers(features: dict[str, np.ndarray], scores: np.ndarray, subjects: np.ndarray | None) -> dict[str, Ranker]:
    """Every candidate over all rows of the data; `scores` columns are (strong, weak)."""
    gain = scores[:, 0] - scores[:, 1]
    gain3 = (np.sign(gain) + 1).astype(int)  # 0: only weak right, 1: tie, 2: only strong right
    out: dict[str, Ranker] = {}
    for f, x in features.items():
        for k in (40, 100, 200, 400, 800):
            out[f"knn-k{k}@{f}"] = _remembered(lambda fi, vi, x=x, k=k: np.divide(*knn_gain(x, gain, fi, vi, k)))
        for t in (0.02, 0.05):
            out[f"knn-soft{t:g}-k400@{f}"] = _remembered(
                lambda fi, vi, x=x, t=t: np.divide(*knn_gain(x, gain, fi, vi, 400, t)))
        for l2 in (1e-2, 1e-1):
            out[f"logistic-l2={l2:g}@{f}"] = _remembered(lambda fi, vi, x=x, l2=l2: _two_heads(x, scores, fi, vi, l2))
            out[f"gap3-l2={l2:g}@{f}"] = _remembered(lambda fi, vi, x=x, l2=l2: _gap3(x, gain3, fi, vi, l2))
        if subjects is not None and x.shape[1] <= 1024:  # a 57-class fit on 4,096-d n-grams is too slow here
            prior = out[f"subject-prior@{f}"] = _remembered(
                lambda fi, vi, x=x: _subject_prior(x, gain, subjects, fi, vi))
            for b in (25, 100):
                out[f"knn-k100+subject-b{b}@{f}"] = _remembered(
                    lambda fi, vi, x=x, b=b, prior=prior: _knn_shrunk(x, gain, fi, vi, prior(fi, vi), b))
    if subjects is not None:
        out["true-subject"] = lambda fi, vi: _subject_means(gain, subjects, fi)[_codes(subjects)[vi]]
    names = [f for f in features if "+" not in f]  # the members' feature sets: e5, charngram, minilm
    ensembles = {
        "knn-k100": [f"knn-k100@{f}" for f in names],
        "logistic-l2=0.01": [f"logistic-l2=0.01@{f}" for f in names],
        "knn-k100,logistic-l2=0.01": [f"{r}@{f}" for f in names for r in ("knn-k100", "logistic-l2=0.01")],
        "knn-k100,logistic-l2=0.01,gap3-l2=0.01": [
            f"{r}@{f}" for f in names for r in ("knn-k100", "logistic-l2=0.01", "gap3-l2=0.01")],
    }
    if len(names) > 1:
        for label, members in ensembles.items():
            out[f"rank-mean({label})@{','.join(names)}"] = _rank_mean([out[m] for m in members])
    return out


def _remembered(ranker: Ranker) -> Ranker:
    """The same ranker, computed once per (fit rows, scored rows): ensembles reuse their members' folds."""
    memo: dict[tuple[bytes, bytes], np.ndarray] = {}

    def run(fi: np.ndarray, vi: np.ndarray) -> np.ndarray:
        key = (fi.tobytes(), vi.tobytes())
        if key not in memo:
            memo[key] = ranker(fi, vi)
        return memo[key]

    return run


def _two_heads(x: np.ndarray, scores: np.ndarray, fi: np.ndarray, vi: np.ndarray, l2: float) -> np.ndarray:
    p = fit_bilinear(x[fi], scores[fi], None, l2).predict(x[vi])
    return p[:, 0] - p[:, 1]


def _gap3(x: np.ndarray, gain3: np.ndarray, fi: np.ndarray, vi: np.ndarray, l2: float) -> np.ndarray:
    v, b = fit_softmax(x[fi], gain3[fi], 3, l2)
    p = softmax(x[vi].astype(np.float64) @ v + b)
    return p[:, 2] - p[:, 0]


def _codes(subjects: np.ndarray) -> np.ndarray:
    return np.unique(subjects, return_inverse=True)[1]


def _subject_means(gain: np.ndarray, subjects: np.ndarray, fi: np.ndarray, shrink: float = 5.0) -> np.ndarray:
    """Each subject's mean gain on the fit rows, shrunk towards the overall mean (a subject may be rare)."""
    codes, n_subjects = _codes(subjects), len(np.unique(subjects))
    total = np.bincount(codes[fi], gain[fi], n_subjects)
    count = np.bincount(codes[fi], None, n_subjects)
    return (total + shrink * gain[fi].mean()) / (count + shrink)


def _subject_prior(x: np.ndarray, gain: np.ndarray, subjects: np.ndarray, fi: np.ndarray, vi: np.ndarray) -> np.ndarray:
    codes, n_subjects = _codes(subjects), len(np.unique(subjects))
    v, b = fit_softmax(x[fi], codes[fi], n_subjects, 1e-3)
    return softmax(x[vi].astype(np.float64) @ v + b) @ _subject_means(gain, subjects, fi)


def _knn_shrunk(x: np.ndarray, gain: np.ndarray, fi: np.ndarray, vi: np.ndarray, prior: np.ndarray,
                weight: float) -> np.ndarray:
    num, den = knn_gain(x, gain, fi, vi, 100)
    return (num + weight * prior) / (den + weight)


def _rank_mean(members: list[Ranker]) -> Ranker:
    return lambda fi, vi: np.mean([rank01(m(fi, vi)) for m in members], axis=0)


def cross_validate(ranker: Ranker, scores: np.ndarray, train_idx: np.ndarray, seed: int = 0) -> list[float]:
    """Per-fold APGR over the training rows, the folds of `train_router`."""
    folds = np.random.default_rng(seed).permutation(len(train_idx)) % FOLDS
    out = []
    for k in range(FOLDS):
        fi, vi = train_idx[folds != k], train_idx[folds == k]
        out.append(pair_metrics(scores[vi, 0], scores[vi, 1], ranker(fi, vi)).apgr)
    return out


def strong_weak(o: Outcomes) -> tuple[int, int]:
    means = o.scores.mean(0)
    return int(means.argmax()), int(means.argmin())


def subjects_of(path: Path, o: Outcomes) -> np.ndarray | None:
    """Each row's `dataset` when the rows name several (MMLU's subjects), else None."""
    by_id = {}
    for line in path.read_text("utf-8").split("\n"):
        if line.strip():
            row = json.loads(line)
            by_id[str(row.get("id"))] = row.get("dataset")
    out = np.array([by_id.get(i) for i in o.ids], dtype=object)
    return None if any(s is None for s in out) or len(set(out)) < 2 else out.astype(str)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--embedders", default="e5,charngram,e5+charngram")
    ap.add_argument("--only", help="comma-separated candidate names to score (default: all)")
    ap.add_argument("--evaluate", type=Path, help="a CV result of this study: score its choice on the held-out half")
    ap.add_argument("--product-embedder", default="e5")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    cache = cache_dir_from_env(os.environ)
    o = load_outcomes(args.data)
    strong, weak = strong_weak(o)
    scores = o.scores[:, [strong, weak]]
    train_idx, held_idx = split_indices(len(o), 0.5, args.seed)
    specs = args.embedders.split(",")
    features = {s: cached_embed(make_embedder(s), list(o.prompts), cache) for s in specs}
    candidates = rankers(features, scores, subjects_of(args.data, o))
    if args.evaluate is None:
        names = args.only.split(",") if args.only else list(candidates)
        cv = {}
        for name in names:
            per_fold = cross_validate(candidates[name], scores, train_idx, args.seed)
            cv[name] = {"mean": float(np.mean(per_fold)), "per_fold": [round(a, 4) for a in per_fold]}
            print(f"{name:<72}CV APGR {cv[name]['mean']:.4f}  folds {cv[name]['per_fold']}", flush=True)
        chosen = max((n for n in cv if n not in DIAGNOSTIC), key=lambda n: cv[n]["mean"])
        print(f"chosen by CV: {chosen}", flush=True)
        report = {"data": args.data.name, "strong": o.models[strong], "weak": o.models[weak],
                  "training_rows": len(train_idx), "folds": FOLDS, "cv_apgr": cv, "chosen": chosen}
    else:
        report = json.loads(args.evaluate.read_text("utf-8"))
        report["heldout"] = evaluate_heldout(o, scores, features, candidates[report["chosen"]], report["chosen"],
                                             train_idx, held_idx, args.product_embedder, cache, args.seed)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def evaluate_heldout(o: Outcomes, scores: np.ndarray, features: dict[str, np.ndarray], ranker: Ranker, name: str,
                     train_idx: np.ndarray, held_idx: np.ndarray, product_embedder: str, cache: Path | None,
                     seed: int) -> dict:
    """The choice and the product router, fit on the training half, scored once on the unseen rows."""
    seen = {prompt_key(o.prompts[i]) for i in train_idx}
    unseen = np.array([i for i in held_idx if prompt_key(o.prompts[i]) not in seen], dtype=int)
    x = features.get(product_embedder)
    if x is None:
        x = cached_embed(make_embedder(product_embedder), list(o.prompts), cache)
    product = train_router(o.subset(train_idx), x[train_idx], product_embedder, "auto", seed)
    strong, weak = strong_weak(o)
    predicted = product.predict(x[unseen])
    out = {"rows": len(unseen)}
    for label, score in ((name, ranker(train_idx, unseen)),
                         (f"product ({product.predictor.kind}, {product_embedder})",
                          predicted[:, strong] - predicted[:, weak]),
                         ("prompt_length", np.array([len(o.prompts[i]) for i in unseen], float))):
        m = pair_metrics(scores[unseen, 0], scores[unseen, 1], score)
        out[label] = {"apgr": m.apgr, "cpt50": m.cpt50, "cpt80": m.cpt80}
        print(f"held out {label:<60}APGR {m.apgr:.4f}  CPT(50%) {m.cpt50:.2f}  CPT(80%) {m.cpt80:.2f}", flush=True)
    out["product_selection"] = product.selection
    return out


if __name__ == "__main__":
    raise SystemExit(main())
