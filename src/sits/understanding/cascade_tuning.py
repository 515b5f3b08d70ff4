"""Choosing the cascade's margin bar on training data only: a cross-validated sweep.

For each seeded k-fold split of the training rows, both heads are fitted on k-1 folds and
label the held-out fold; the fast head's margin on every held-out row then says, for any
bar, which rows would escalate and whether the cascade would be right. Averaged over
seeds this gives, per bar, the escalation share and the cascade's accuracy. The bar the
gateway ships is the smallest one whose cross-validated accuracy reaches the target
(`sits intent tune`; docs/understanding.md). Test data never enters this.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sits.understanding.embedders import Embedder
from sits.understanding.embedding_cache import cached_embed
from sits.understanding.intent_classifier import DEFAULT_TEMPERATURE
from sits.understanding.linear_head import fit_linear_head

DEFAULT_GRID = tuple(round(0.05 * i, 2) for i in range(20))  # 0.00 .. 0.95


@dataclass(frozen=True, slots=True)
class SweepPoint:
    min_margin: float
    escalated: float  # share of rows the accurate model would embed
    accuracy: float  # the cascade's
    kept_fast_accuracy: float  # the fast head's accuracy on the rows it keeps (nan if none)


@dataclass(frozen=True)
class CascadeSweep:
    fast_accuracy: float
    accurate_accuracy: float
    points: tuple[SweepPoint, ...]
    rows: int
    seeds: int

    def choose(self, target: float) -> SweepPoint | None:
        """The smallest bar whose cross-validated accuracy reaches `target` (None if none does)."""
        return next((p for p in self.points if p.accuracy >= target), None)

    def as_json(self) -> dict[str, object]:
        return {"rows": self.rows, "seeds": self.seeds, "fast_accuracy": self.fast_accuracy,
                "accurate_accuracy": self.accurate_accuracy,
                "points": [{"min_margin": p.min_margin, "escalated": p.escalated, "accuracy": p.accuracy,
                            "kept_fast_accuracy": p.kept_fast_accuracy} for p in self.points]}


def _folds(labels: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Stratified: each label's rows dealt round-robin into k folds after a seeded shuffle."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(labels), dtype=int)
    for label in sorted(set(labels.tolist())):
        idx = np.flatnonzero(labels == label)
        rng.shuffle(idx)
        fold[idx] = np.arange(len(idx)) % k
    return fold


def _held_out(x: np.ndarray, labels: np.ndarray, fold: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the label and the margin a head fitted without the row's fold gives it."""
    predicted = np.empty(len(labels), dtype=object)
    margin = np.empty(len(labels))
    for f in range(k):
        train, test = fold != f, fold == f
        head = fit_linear_head(x[train], labels[train].tolist(), temperature=DEFAULT_TEMPERATURE)
        probs = head.probabilities(x[test])
        top2 = np.sort(probs, axis=1)[:, -2:]
        predicted[test] = np.asarray(head.labels, dtype=object)[probs.argmax(axis=1)]
        margin[test] = top2[:, 1] - top2[:, 0]
    return predicted, margin


def cross_validated_sweep(
    texts: Sequence[str], labels: Sequence[str], fast: Embedder, accurate: Embedder,
    cache_dir: Path | None = None, folds: int = 5, seeds: Sequence[int] = (0, 1, 2),
    grid: Sequence[float] = DEFAULT_GRID,
) -> CascadeSweep:
    if len(texts) != len(labels) or len(set(labels)) < 2:
        raise ValueError("need as many labels as texts, and at least two labels")
    y = np.asarray(labels, dtype=object)
    x_fast = cached_embed(fast, texts, cache_dir)
    x_accurate = cached_embed(accurate, texts, cache_dir)
    fast_acc, accurate_acc = [], []
    per_bar: dict[float, list[tuple[float, float, float]]] = {m: [] for m in grid}
    for seed in seeds:
        fold = _folds(y, folds, seed)
        fast_pred, margin = _held_out(x_fast, y, fold, folds)
        accurate_pred, _ = _held_out(x_accurate, y, fold, folds)
        fast_ok, accurate_ok = fast_pred == y, accurate_pred == y
        fast_acc.append(fast_ok.mean())
        accurate_acc.append(accurate_ok.mean())
        for bar in grid:
            escalate = margin < bar
            kept = fast_ok[~escalate].mean() if (~escalate).any() else float("nan")
            per_bar[bar].append((escalate.mean(), np.where(escalate, accurate_ok, fast_ok).mean(), kept))
    points = tuple(SweepPoint(bar, *(round(float(np.mean(v)), 4) for v in zip(*per_bar[bar]))) for bar in grid)
    return CascadeSweep(round(float(np.mean(fast_acc)), 4), round(float(np.mean(accurate_acc)), 4), points,
                        len(texts), len(seeds))
