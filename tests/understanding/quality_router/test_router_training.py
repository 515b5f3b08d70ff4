from __future__ import annotations

import json
from pathlib import Path

import pytest

from sits.errors import ConfigError
from sits.understanding.quality_router.artifact import load_router, save_router
from sits.understanding.quality_router.evaluation import evaluate
from sits.understanding.quality_router.outcomes import load_outcomes, prompt_key
from sits.understanding.quality_router.predictors import fit_bilinear, fit_knn
from sits.understanding.quality_router.request_router import QualityRouting
from sits.understanding.quality_router.training import train_router
from tests.understanding.quality_router.synthetic_outcomes import two_clusters


def _synthetic(n=300, seed=0):
    return two_clusters(n, seed, spread=0.3)


@pytest.mark.parametrize("fit", [lambda x, y: fit_knn(x, y, 20), lambda x, y: fit_bilinear(x, y, None, 1e-3),
                                 lambda x, y: fit_bilinear(x, y, 4, 1e-3)])
def test_every_predictor_learns_the_cluster_and_stays_in_range(fit):
    x, y, group = _synthetic()
    pred = fit(x[:200], y[:200]).predict(x[200:])
    assert pred.shape == (100, 2) and (pred >= 0).all() and (pred <= 1).all()
    gain = pred[:, 0] - pred[:, 1]
    assert gain[group[200:] == 1].mean() > gain[group[200:] == 0].mean() + 0.2


def _write(path: Path, x_rows: int, with_costs: bool) -> None:
    _, y, group = _synthetic(x_rows)
    with path.open("w") as f:
        for i in range(x_rows):
            row = {"id": str(i), "prompt": f"{'hard algebra' if group[i] else 'easy chat'} prompt number {i}",
                   "scores": {"big": y[i, 0], "small": y[i, 1]}}
            if with_costs:
                row["costs"] = {"big": 0.01, "small": 0.001}
            f.write(json.dumps(row) + "\n")
        f.write(json.dumps({"id": "x", "prompt": "partial", "scores": {"big": 1.0}}) + "\n")


def test_outcomes_loader_drops_partial_rows_and_keeps_costs(tmp_path):
    _write(tmp_path / "d.jsonl", 20, True)
    o = load_outcomes(tmp_path / "d.jsonl")
    assert len(o) == 20 and o.dropped == 1 and o.models == ("big", "small") and o.costs is not None


def test_outcomes_loader_names_bad_lines(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"prompt": "x"}\n')
    with pytest.raises(ConfigError, match="bad.jsonl:1"):
        load_outcomes(tmp_path / "bad.jsonl")


def test_train_save_load_evaluate_route(tmp_path):
    from sits.understanding.embedders import CharNgramEmbedder

    _write(tmp_path / "d.jsonl", 200, True)
    o = load_outcomes(tmp_path / "d.jsonl")
    emb = CharNgramEmbedder(dim=256)
    x = emb.embed(list(o.prompts))
    train = o.subset(range(150))
    router = train_router(train, x[:150], emb.name, kind="knn")
    save_router(router, tmp_path / "r")
    loaded = load_router(tmp_path / "r")
    assert loaded.models == ("big", "small") and prompt_key(o.prompts[0]) in loaded.train_keys
    report = evaluate(o.subset(range(150, 200)), loaded.predict(x[150:]), None, None)
    assert report.strong == "big" and report.pair["router"].apgr > report.pair["random"].apgr
    assert report.pair["oracle"].apgr >= report.pair["router"].apgr - 1e-9
    out = report.as_json()
    assert {"apgr", "cpt50", "cpt80", "frontier", "baselines"} <= set(out)
    assert all({"cost", "quality"} == set(p) for p in out["frontier"])
    at_quarter = out["quality_at_cost_fraction_of_best_single"]["0.25"]
    assert set(at_quarter) == {"router", "random", "prompt_length", "best_single", "oracle"}
    assert at_quarter["best_single"] is None  # its one point costs 100%
    assert all(0.0 <= q <= 1.0 for name, q in at_quarter.items() if name != "best_single")

    hard = emb.embed(["hard algebra prompt number 999"])
    choice = QualityRouting(loaded, cost_weight=0.0).choose(hard, ["big", "small", "unknown"])
    assert choice is not None and choice.model == "big"
    assert all(0.0 <= s <= 1.0 for _, s in choice.scores)
    cheap = QualityRouting(loaded, cost_weight=1000.0).choose(hard)
    assert cheap is not None and cheap.model == "small"
    assert QualityRouting(loaded).choose(hard, ["unknown"]) is None
    target = QualityRouting(loaded, quality_target=0.01).choose(hard)
    assert target is not None and target.model == "small"


def test_load_router_errors_are_config_errors(tmp_path):
    with pytest.raises(ConfigError):
        load_router(tmp_path / "missing")


def test_quality_within_takes_the_best_point_at_or_below_the_cost():
    from sits.understanding.quality_router.metrics import Point, quality_within

    pts = [Point(1.0, 0.5), Point(2.0, 0.7), Point(4.0, 0.9)]
    assert quality_within(pts, 2.0) == 0.7 and quality_within(pts, 0.5) is None and quality_within(pts, 9) == 0.9
