"""The `sits simulate` command: every (strategy, load) run, in worker processes, with progress on stderr.

The progress bar is tqdm's when tqdm is installed, otherwise a line every tenth of the requests; the
frontier PNG needs matplotlib. Both are optional (the `research` extra, or `pip install` them).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sits.errors import ConfigError
from sits.simulate.engine import RunResult, simulate_run
from sits.simulate.report import format_runs, format_table, plot_frontier, summarize
from sits.simulate.scenario import Scenario

_progress_queue: Any = None  # set in each worker process by _init_worker


def add_simulate_command(subparsers: Any) -> None:
    p = subparsers.add_parser("simulate", help="compare load-balancing strategies in a capacity simulation")
    p.add_argument("scenario", type=Path, help="scenario YAML (see examples/simulate/)")
    p.add_argument("--requests", type=int, help="requests per (strategy, load) run (overrides the scenario)")
    p.add_argument("--loads", type=float, nargs="+", help="offered loads as multiples of capacity")
    p.add_argument("--strategies", nargs="+", help="run only these strategies")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="processes (default 2)")
    p.add_argument("--plot", type=Path, default=Path("simulate-frontier.png"), help="frontier PNG path")
    p.add_argument("--json", type=Path, help="also write every run's numbers here")
    p.add_argument("--max-wall-s", type=float, default=600.0, help="wall-clock bound per run (default 600)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(run=run_simulate)


def load(args: argparse.Namespace) -> Scenario:
    try:
        raw = yaml.safe_load(args.scenario.read_text(encoding="utf-8"))
        scenario = Scenario.model_validate(raw)
    except OSError as exc:
        raise ConfigError(f"cannot read scenario {args.scenario}: {exc.strerror or exc}") from None
    except (yaml.YAMLError, ValidationError) as exc:
        raise ConfigError(f"{args.scenario}: invalid scenario: {exc}") from None
    workload = scenario.workload
    if args.requests:
        workload = workload.model_copy(update={"requests_per_run": args.requests})
    if args.loads:
        workload = workload.model_copy(update={"load_levels": args.loads})
    strategies = scenario.strategies
    if args.strategies:
        unknown = set(args.strategies) - set(strategies)
        if unknown:
            raise ConfigError(f"unknown strategies {sorted(unknown)}; the scenario has {sorted(strategies)}")
        strategies = {k: v for k, v in strategies.items() if k in args.strategies}
    return scenario.model_copy(update={"workload": workload, "strategies": strategies})


def run_simulate(args: argparse.Namespace) -> int:
    scenario = load(args)
    tasks = [(s, lvl) for lvl in scenario.workload.load_levels for s in scenario.strategies]
    total = len(tasks) * scenario.workload.requests_per_run
    print(f"{scenario.name}: {scenario.total_endpoints():,} endpoints, {len(scenario.strategies)} strategies x "
          f"{len(scenario.workload.load_levels)} loads x {scenario.workload.requests_per_run:,} = {total:,} requests",
          file=sys.stderr)
    t0 = time.perf_counter()
    results = run_all(scenario, tasks, args.workers, args.max_wall_s, not args.no_progress, total)
    wall = time.perf_counter() - t0
    simulated = sum(r.requests for r in results)
    print(f"\nsimulated {simulated:,} requests in {wall:.1f} s wall ({simulated / wall:,.0f} requests/s, "
          f"{args.workers} worker(s))\n")
    print(format_runs(results) + "\n")
    ref = scenario.workload.reference_load
    print(format_table(summarize(results, ref, scenario.slo_p99_ms), ref))
    if plot_frontier(results, args.plot, scenario.slo_p99_ms, scenario.name):
        print(f"\nfrontier: {args.plot}")
    else:
        print(f"\nfrontier plot not written to {args.plot}: matplotlib is not installed "
              f"(pip install matplotlib, or the 'research' extra)")
    if args.json:
        args.json.write_text(json.dumps({"scenario": scenario.name, "wall_s": wall,
                                         "runs": [asdict(r) for r in results]}, indent=1))
    return 0


def run_all(scenario: Scenario, tasks: list[tuple[str, float]], workers: int, max_wall_s: float,
            show_progress: bool, total: int) -> list[RunResult]:
    if workers <= 1:
        bar = _progress_bar(total, show_progress)
        try:
            return [simulate_run(scenario, s, lvl, progress=bar.update, max_wall_s=max_wall_s) for s, lvl in tasks]
        finally:
            bar.close()
    # fork, not spawn: spawn re-imports the __main__ module, which `python -m sits` does not guard.
    # The pool is forked before tqdm (if used) starts its monitor thread, so no thread is forked mid-flight.
    ctx = mp.get_context("fork")
    progress: Any = ctx.Queue()
    with ctx.Pool(workers, initializer=_init_worker, initargs=(progress,)) as pool:
        bar = _progress_bar(total, show_progress)
        try:
            pending = [pool.apply_async(_run_one, (scenario.model_dump(), s, lvl, max_wall_s)) for s, lvl in tasks]
            while not all(p.ready() for p in pending):
                _drain(progress, bar, 0.2)
            _drain(progress, bar, 0.0)
            return [p.get() for p in pending]
        finally:
            bar.close()


def _progress_bar(total: int, show: bool) -> Any:
    """tqdm's bar on stderr when tqdm is installed, else `LineProgress`; either has update(n) and close()."""
    try:
        from tqdm import tqdm
    except ImportError:
        return LineProgress(total, enabled=show)
    return tqdm(total=total, unit="req", unit_scale=True, disable=not show, file=sys.stderr)


class LineProgress:
    """Progress without tqdm: one stderr line each time another tenth of `total` is done."""

    def __init__(self, total: int, enabled: bool = True, steps: int = 10, out: Any = None) -> None:
        self.total, self.enabled, self.steps = total, enabled, steps
        self.out = out if out is not None else sys.stderr
        self.done = 0
        self._shown = 0  # tenths already reported
        self._t0 = time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled or self.total <= 0:
            return
        step = min(self.steps, self.done * self.steps // self.total)
        if step > self._shown:
            self._shown = step
            print(f"  {self.done:,} / {self.total:,} requests ({self.done / self.total:.0%}, "
                  f"{time.perf_counter() - self._t0:.1f} s)", file=self.out, flush=True)

    def close(self) -> None:
        pass


def _drain(progress: Any, bar: Any, wait_s: float) -> None:
    try:
        bar.update(progress.get(timeout=wait_s) if wait_s else progress.get_nowait())
        while True:
            bar.update(progress.get_nowait())
    except queue.Empty:
        pass


def _init_worker(progress: Any) -> None:
    global _progress_queue  # per worker process, set once at its start
    _progress_queue = progress


def _run_one(scenario: dict[str, Any], strategy: str, level: float, max_wall_s: float) -> RunResult:
    return simulate_run(Scenario.model_validate(scenario), strategy, level, progress=_progress_queue.put,
                        max_wall_s=max_wall_s)
