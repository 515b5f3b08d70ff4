"""The default-policy change, measured in every example scenario: the previous default profile
(peak-EWMA scorer and memory-headroom filter) against today's, with weighted least connections
as the reference.

    python bench/simulate_default_change.py [--requests 80000] [--out bench/results/simulate-default-change.json]

Each scenario runs its own seed and loads; the strategies see identical workloads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from sits.scheduling.policy import RoutingPolicy
from sits.simulate.command import run_all
from sits.simulate.report import format_table, summarize
from sits.simulate.scenario import load_scenario

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "simulate"
PREVIOUS_DEFAULT = RoutingPolicy.model_validate({"profiles": {"default": {
    "filters": [{"type": t} for t in ("model-match-filter", "healthy-filter", "capability-filter",
                                      "context-window-filter", "memory-headroom-filter", "sla-filter")],
    "scorers": [{"type": "queue-depth-scorer", "weight": 1.0}, {"type": "peak-ewma-scorer", "weight": 1.0},
                {"type": "kv-cache-scorer", "weight": 0.5}, {"type": "prefix-affinity-scorer", "weight": 1.0},
                {"type": "adapter-affinity-scorer", "weight": 4.0}],
}}})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=80_000, help="requests per (strategy, load) run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench/results/simulate-default-change.json"))
    args = parser.parse_args()
    out: dict[str, object] = {"requests_per_run": args.requests, "load_average_before": os.getloadavg(),
                              "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "scenarios": {}}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        scenario = load_scenario(path)
        strategies = {"sits-default": scenario.strategies["sits-default"], "previous-default": PREVIOUS_DEFAULT,
                      "weighted-least-connections": scenario.strategies["weighted-least-connections"]}
        scenario = scenario.model_copy(update={
            "strategies": strategies,
            "workload": scenario.workload.model_copy(update={"requests_per_run": args.requests})})
        tasks = [(s, lvl) for lvl in scenario.workload.load_levels for s in strategies]
        t0 = time.perf_counter()
        results = run_all(scenario, tasks, args.workers, 1200.0, False, len(tasks) * args.requests)
        ref = scenario.workload.reference_load
        table = format_table(summarize(results, ref, scenario.slo_p99_ms), ref)
        print(f"\n{scenario.name} ({time.perf_counter() - t0:.0f} s)\n{table}", file=sys.stderr)
        out["scenarios"][scenario.name] = {  # type: ignore[index]
            "summary": [asdict(s) for s in summarize(results, ref, scenario.slo_p99_ms)],
            "runs": [asdict(r) for r in results]}
    out["load_average_after"] = os.getloadavg()
    args.out.write_text(json.dumps(out, indent=1))
    print(f"written {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
