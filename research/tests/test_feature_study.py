from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from research.feature_study import benchmarks, cross_validate, main, roc_auc
from sits.understanding.quality_router.outcomes import load_outcomes


def test_roc_auc_is_one_for_a_perfect_ranking_and_a_half_for_none():
    y = np.array([0, 0, 1, 1.0])
    assert roc_auc(y, np.array([0.1, 0.2, 0.8, 0.9])) == 1.0
    assert roc_auc(y, np.array([0.9, 0.8, 0.2, 0.1])) == 0.0
    assert roc_auc(y, np.zeros(4)) == 0.5
    assert np.isnan(roc_auc(np.ones(3), np.zeros(3)))


def _write(path: Path, n: int = 80) -> None:
    rng = np.random.default_rng(0)
    with path.open("w") as f:
        for i in range(n):
            bench = "code" if i % 2 else "chat"
            strong, weak = float(rng.random() < 0.9), float(rng.random() < (0.2 if bench == "code" else 0.8))
            f.write(json.dumps({"dataset": bench, "prompt": f"{bench} question {i}\n\nask {i}",
                                "scores": {"big": strong, "small": weak},
                                "costs": {"big": 0.01, "small": 0.001}}) + "\n")


def test_the_benchmark_prior_routes_hard_benchmarks_to_the_strong_model(tmp_path: Path):
    _write(tmp_path / "d.jsonl")
    o = load_outcomes(tmp_path / "d.jsonl")
    bench = benchmarks(tmp_path / "d.jsonl", o.prompts)
    assert bench is not None and set(bench) == {"code", "chat"}

    def prior(fi: np.ndarray, vi: np.ndarray) -> np.ndarray:
        return np.stack([o.scores[fi][bench[fi] == bench[i]].mean(0) for i in vi])

    r = cross_validate(o, prior)
    assert set(r) == {"frontier_auc", "quality_at_25pct_cost", "cost_fraction_to_reach_best"}
    assert 0.0 <= r["quality_at_25pct_cost"] <= 1.0 and r["frontier_auc"] > 0.5


def test_the_study_never_reads_the_held_out_half(tmp_path: Path, monkeypatch):
    _write(tmp_path / "d.jsonl")
    monkeypatch.setenv("SITS_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["--data", str(tmp_path / "d.jsonl"), "--embedders", "charngram,charngram@last",
                 "--out", str(tmp_path / "out.json")]) == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["training_rows"] == 40 and set(out["features"]) == {"charngram", "charngram@last"}
    assert "benchmark_prior" in out and "within_benchmark_roc_auc_knn100" in out["features"]["charngram"]
