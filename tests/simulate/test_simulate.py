"""The simulator at small scale: deterministic, drives the real scheduler, reports and plots."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sits.errors import ConfigError
from sits.simulate import add_simulate_command
from sits.simulate.engine import simulate_run
from sits.simulate.report import summarize
from sits.simulate.scenario import Scenario, load_scenario

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulate" / "heterogeneous.yaml"


def small() -> Scenario:
    sc = load_scenario(EXAMPLE)
    return Scenario.model_validate({
        **sc.model_dump(),
        "endpoints": [{"name": "fast", "count": 8, "slots": 4, "mean_service_ms": 100, "sigma": 0.3, "weight": 2},
                      {"name": "slow", "count": 8, "slots": 2, "mean_service_ms": 400, "sigma": 0.3}],
        "replicas_per_model": 4,
        "workload": {**sc.workload.model_dump(), "requests_per_run": 3000, "load_levels": [0.5, 0.9]},
    })


@pytest.mark.parametrize("path", sorted(EXAMPLE.parent.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_example_scenario_has_1024_endpoints_and_the_five_strategies(path):
    scenario = load_scenario(path)
    assert scenario.total_endpoints() >= 1000
    assert scenario.workload.requests_per_run * len(scenario.workload.load_levels) * len(scenario.strategies) \
        == 10_000_000
    assert set(scenario.strategies) == {"round-robin", "weighted-least-connections", "dynamic-weight",
                                        "p2c-peak-ewma", "sits-default"}


def test_runs_are_deterministic_given_the_seed():
    a = simulate_run(small(), "p2c-peak-ewma", 0.7)
    b = simulate_run(small(), "p2c-peak-ewma", 0.7)
    assert (a.requests, a.failed, a.mean_ms, a.p99_ms) == (b.requests, b.failed, b.mean_ms, b.p99_ms)
    assert a.requests == 3000


@pytest.mark.parametrize("strategy", ["round-robin", "weighted-least-connections", "dynamic-weight",
                                      "p2c-peak-ewma", "sits-default"])
def test_every_example_strategy_completes(strategy):
    r = simulate_run(small(), strategy, 0.5)
    assert r.requests == 3000 and r.mean_ms > 0 and r.p99_ms >= r.p50_ms


def test_load_aware_beats_round_robin_on_heterogeneous_endpoints():
    rr = simulate_run(small(), "round-robin", 0.9)
    wlc = simulate_run(small(), "weighted-least-connections", 0.9)
    assert wlc.mean_ms < rr.mean_ms


def test_summary_marks_pareto_optimal_strategies():
    runs = [simulate_run(small(), s, lvl) for s in ("round-robin", "weighted-least-connections") for lvl in (0.5, 0.9)]
    rows = {s.strategy: s for s in summarize(runs, reference_load=0.5, slo_p99_ms=3000)}
    assert rows["weighted-least-connections"].pareto


def test_the_command_prints_the_comparison_and_draws_the_png(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(EXAMPLE.read_text())
    parser = argparse.ArgumentParser()
    add_simulate_command(parser.add_subparsers(dest="command"))
    png = tmp_path / "f.png"
    args = parser.parse_args(["simulate", str(scenario), "--requests", "2000", "--loads", "0.5",
                              "--strategies", "round-robin", "sits-default", "--workers", "1",
                              "--plot", str(png), "--no-progress"])
    assert args.run(args) == 0
    out = capsys.readouterr().out
    assert "Pareto" in out and "sits-default" in out and "round-robin" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_without_matplotlib_or_tqdm_the_command_reports_lines_and_skips_the_png(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "tqdm", None)
    parser = argparse.ArgumentParser()
    add_simulate_command(parser.add_subparsers(dest="command"))
    png = tmp_path / "f.png"
    args = parser.parse_args(["simulate", str(EXAMPLE), "--requests", "1000", "--loads", "0.5",
                              "--strategies", "round-robin", "--workers", "1", "--plot", str(png)])
    assert args.run(args) == 0
    captured = capsys.readouterr()
    assert "Pareto" in captured.out and "matplotlib is not installed" in captured.out
    assert not png.exists()
    assert "1,000 / 1,000 requests (100%" in captured.err


def test_line_progress_prints_each_tenth_once():
    import io

    from sits.simulate.command import LineProgress

    out = io.StringIO()
    bar = LineProgress(100, out=out)
    for _ in range(100):
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 10 and lines[0].startswith("  10 / 100 requests (10%")
    quiet = io.StringIO()
    LineProgress(100, enabled=False, out=quiet).update(100)
    assert quiet.getvalue() == ""


def test_unknown_strategy_is_a_config_error(tmp_path):
    parser = argparse.ArgumentParser()
    add_simulate_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["simulate", str(EXAMPLE), "--strategies", "nope"])
    with pytest.raises(ConfigError):
        args.run(args)
