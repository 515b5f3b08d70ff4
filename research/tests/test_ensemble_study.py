from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from research.ensemble_study import (
    cross_validate, knn_gain, main, rank01, rankers, subjects_of,
)
from sits.understanding.quality_router.outcomes import load_outcomes
from sits.understanding.quality_router.training import split_indices
from tests.understanding.quality_router.synthetic_outcomes import two_clusters


def test_rank01_spans_zero_to_one_and_ties_share_their_mean_rank():
    r = rank01(np.array([3.0, 1.0, 2.0, 2.0]))
    assert r.tolist() == [1.0, 0.0, 0.5, 0.5]


def test_a_cold_softmax_knn_is_the_nearest_neighbour_and_k_is_capped():
    x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]], dtype=np.float32)
    gain = np.array([1.0, 0.0, -1.0])
    num, den = knn_gain(x, gain, np.array([1, 2]), np.array([0]), 50, temperature=0.001)
    assert num[0] / den[0] == pytest.approx(0.0)  # row 1 (cosine 0.8) beats row 2 (cosine 0)
    num, den = knn_gain(x, gain, np.array([1, 2]), np.array([0]), 50)
    assert num[0] / den[0] == pytest.approx((0.8 * 0 + 1e-6 * -1) / (0.8 + 2e-6))


def _synthetic(n=240, seed=0):
    return two_clusters(n, seed, spread=0.5)


def test_every_ranker_ranks_the_hard_subject_first_and_cv_reads_only_training_rows():
    x, scores, group = _synthetic()
    subjects = np.where(group == 1, "b", "a")
    cands = rankers({"f": x, "g": x[:, ::-1].copy()}, scores, subjects)
    assert {"gap3-l2=0.01@f", "knn-soft0.05-k400@f", "subject-prior@f", "knn-k100+subject-b25@f",
            "true-subject", "rank-mean(knn-k100,logistic-l2=0.01,gap3-l2=0.01)@f,g"} <= set(cands)
    fi, vi = np.arange(160), np.arange(160, 240)
    for name, ranker in cands.items():
        s = ranker(fi, vi)
        assert s.shape == (80,) and np.isfinite(s).all(), name
        assert s[group[vi] == 1].mean() > s[group[vi] == 0].mean(), name
    train_idx = np.arange(0, 240, 2)
    seen: set[int] = set()

    def spy(f: np.ndarray, v: np.ndarray) -> np.ndarray:
        seen.update(f.tolist() + v.tolist())
        assert not set(f) & set(v)
        return cands["knn-k100@f"](f, v)

    per_fold = cross_validate(spy, scores, train_idx)
    assert len(per_fold) == 5 and seen == set(train_idx.tolist()) and np.mean(per_fold) > 0.6


def _write(path: Path, n: int = 120) -> None:
    _, scores, group = _synthetic(n)
    with path.open("w") as f:
        for i in range(n):
            subject = "algebra" if group[i] else "chat"
            f.write(json.dumps({"id": f"q{i}", "dataset": f"mmlu:{subject}",
                                "prompt": f"{'hard algebra' if group[i] else 'easy chat'} question {i}",
                                "scores": {"big": scores[i, 0], "small": scores[i, 1]}}) + "\n")


def test_cv_then_one_held_out_evaluation_of_the_choice_and_the_product(tmp_path: Path, monkeypatch):
    _write(tmp_path / "d.jsonl")
    monkeypatch.setenv("SITS_CACHE_DIR", str(tmp_path / "cache"))
    o = load_outcomes(tmp_path / "d.jsonl")
    assert subjects_of(tmp_path / "d.jsonl", o) is not None
    only = "knn-k40@charngram,logistic-l2=0.01@charngram,true-subject"
    assert main(["--data", str(tmp_path / "d.jsonl"), "--embedders", "charngram", "--only", only,
                 "--out", str(tmp_path / "cv.json")]) == 0
    cv = json.loads((tmp_path / "cv.json").read_text())
    assert set(cv["cv_apgr"]) == set(only.split(",")) and "heldout" not in cv
    assert cv["chosen"] != "true-subject"  # a diagnostic: the prompt does not name its subject
    assert cv["chosen"] == max(("knn-k40@charngram", "logistic-l2=0.01@charngram"),
                               key=lambda n: cv["cv_apgr"][n]["mean"])
    assert main(["--data", str(tmp_path / "d.jsonl"), "--embedders", "charngram", "--evaluate",
                 str(tmp_path / "cv.json"), "--product-embedder", "charngram", "--out", str(tmp_path / "ho.json")]) == 0
    held = json.loads((tmp_path / "ho.json").read_text())["heldout"]
    _, held_idx = split_indices(120, 0.5, 0)
    assert held["rows"] == len(held_idx)
    product = next(k for k in held if k.startswith("product"))
    assert 0.0 <= held[cv["chosen"]]["apgr"] <= 1.5 and 0.0 <= held[product]["apgr"] <= 1.5
