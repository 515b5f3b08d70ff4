"""The `sits intent` / `sits router` commands end to end on tiny fixtures with the free char-n-gram embedder."""

from __future__ import annotations

import argparse
import json

import pytest

from sits.understanding.cli_commands import add_intent_commands, add_router_commands


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sits")
    sub = parser.add_subparsers(dest="command")
    add_intent_commands(sub)
    add_router_commands(sub)
    args = parser.parse_args(argv)
    return int(args.run(args))


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SITS_CACHE_DIR", str(tmp_path / "cache"))


def _rows(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


TRAIN = [{"prompt": p, "label": label} for p, label in [
    ("write a python function to sort a list", "coding"), ("fix this javascript bug", "coding"),
    ("implement a linked list class", "coding"), ("what is 12 times 7", "math"),
    ("solve for x: 2x + 3 = 7", "math"), ("compute the area of a circle of radius 2", "math"),
]]
TEST = [{"prompt": "write a python function to reverse a string", "label": "coding"},
        {"prompt": "what is 15 times 4", "label": "math"}]


def test_intent_eval_json(tmp_path, capsys):
    code = _run(["intent", "eval", "--train", str(_rows(tmp_path / "tr.jsonl", TRAIN)),
                 "--test", str(_rows(tmp_path / "te.jsonl", TEST)), "--embedder", "charngram", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["accuracy"] == 1.0 and set(out["per_label"]) == {"coding", "math"}
    assert 0.0 <= out["macro_f1"] <= 1.0


def test_intent_classify_text_and_file(tmp_path, capsys):
    assert _run(["intent", "classify", "请把这句话翻译成英文：你好", "--embedder", "charngram", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["label"] == "translation" and 0 < first["confidence"] <= 1
    f = _rows(tmp_path / "p.jsonl", [{"prompt": "Tell me a joke"}, {"prompt": "```\nx = 1\n```"}])
    assert _run(["intent", "classify", "--file", str(f), "--embedder", "charngram", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 2 and lines[1]["label"] == "coding"
    assert all(set(row) == {"label", "confidence"} for row in lines)


def test_router_train_and_eval(tmp_path, capsys):
    rows = []
    for i in range(120):
        hard = i % 2 == 0
        rows.append({"id": str(i), "prompt": f"{'prove the theorem about primes' if hard else 'say hi'} {i}",
                     "scores": {"big": 1.0, "small": 0.0 if hard else 1.0},
                     "costs": {"big": 0.01, "small": 0.001}})
    data = _rows(tmp_path / "r.jsonl", rows)
    out_dir = tmp_path / "router"
    assert _run(["router", "train", "--data", str(data), "--out", str(out_dir), "--embedder", "charngram",
                 "--holdout", "0.5", "--model-kind", "knn"]) == 0
    capsys.readouterr()
    assert _run(["router", "eval", "--router", str(out_dir), "--data", str(data), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["skipped_seen_in_training"] == 60 and out["rows"] == 60
    assert {"random", "prompt_length", "best_single", "oracle"} <= set(out["baselines"])
    # Only the hard half has a gap, so even the oracle's APGR is 0.75.
    assert out["apgr"] > out["baselines"]["oracle"]["apgr"] - 0.05 > out["baselines"]["random"]["apgr"]
    assert out["frontier"] and all(set(p) == {"cost", "quality"} for p in out["frontier"])
    png = tmp_path / "frontier.png"
    assert _run(["router", "eval", "--router", str(out_dir), "--data", str(data), "--plot", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_router_eval_plot_without_matplotlib_is_a_config_error(tmp_path, monkeypatch):
    from sits.errors import ConfigError
    from sits.understanding.quality_router import evaluation

    real_find_spec = evaluation.importlib.util.find_spec
    monkeypatch.setattr(evaluation.importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real_find_spec(name, *a))
    with pytest.raises(ConfigError, match="--plot needs matplotlib"):
        _run(["router", "eval", "--router", str(tmp_path / "none"), "--data", str(tmp_path / "none.jsonl"),
              "--plot", str(tmp_path / "f.png")])


@pytest.mark.parametrize(("min_margin", "share"), [(1.0, 1.0), (0.0, 0.0)])
def test_intent_eval_cascade_reports_escalations(tmp_path, capsys, min_margin, share):
    code = _run(["intent", "eval", "--train", str(_rows(tmp_path / "tr.jsonl", TRAIN)),
                 "--test", str(_rows(tmp_path / "te.jsonl", TEST)), "--embedder", "cascade",
                 "--min-margin", str(min_margin), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["accuracy"] == 1.0
    assert out["escalated"] == {"prompts": int(share * len(TEST)), "share": share, "min_margin": min_margin}


def test_intent_tune_sweeps_and_chooses_a_bar(tmp_path, capsys):
    rows = TRAIN + [{"prompt": f"{r['prompt']} please", "label": r["label"]} for r in TRAIN]
    code = _run(["intent", "tune", "--train", str(_rows(tmp_path / "tr.jsonl", rows)), "--target", "0.5", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["rows"] == len(rows) and out["target"] == 0.5
    assert out["chosen"] == next(p["min_margin"] for p in out["points"] if p["accuracy"] >= 0.5)


def test_intent_tune_rejects_one_model_twice(capsys):
    from sits.errors import ConfigError

    with pytest.raises(ConfigError, match="'fast' and 'accurate' must be different"):
        _run(["intent", "tune", "--fast", "e5", "--accurate", "e5"])
