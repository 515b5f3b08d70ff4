"""Decision latency of the real scheduler at 16, 256 and 4,096 endpoints.

    python bench/bench_scheduler.py [--out bench/results/scheduler-latest.json] [--repeat 3]

Targets (issue 5): p50 <= 20 us at 16 endpoints and <= 1 ms at 4,096, default policy.
Each size runs a bounded number of decisions (and at most --max-s seconds), after a warm-up, and
the whole measurement is repeated --repeat times; the table shows the median of the repeats'
percentiles (every repeat is in the JSON). Views are built outside the timed region: the
director's snapshot cost is separate. "metrics on" is the gateway's setting: counters on every
decision, plugin timings on one decision in 16 (scheduling/metrics.py). The load average is
recorded because the host is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path

from sits.scheduling.metrics import SchedulingMetrics
from sits.scheduling.policy import DEFAULT_POLICY, RoutingPolicy, build_scheduler
from sits.scheduling.types import EndpointView, SchedulingRequest

SIZES = (16, 256, 4096)
DECISIONS = {16: 20_000, 256: 5_000, 4096: 1_000}
POLICIES = {
    "default": DEFAULT_POLICY,
    # the default profile without its candidate sample: what a full pass over every endpoint costs
    "default-full-pass": RoutingPolicy.model_validate({"profiles": {"default": {
        **DEFAULT_POLICY.profiles["default"].model_dump(exclude={"sample"})}}}),
    "p2c-peak-ewma": RoutingPolicy.model_validate({"profiles": {"default": {
        "filters": [{"type": "random-sample-filter", "params": {"size": 2}}],
        "scorers": [{"type": "peak-ewma-scorer"}]}}}),
    "weighted-least-connections": RoutingPolicy.model_validate(
        {"profiles": {"default": {"scorers": [{"type": "least-inflight-scorer"}]}}}),
}


def views(n: int, rng: random.Random) -> list[EndpointView]:
    return [
        EndpointView(f"ep-{i}", "m", rng.choice([1.0, 2.0, 4.0]), rng.random() > 0.02, rng.randrange(32),
                     rng.uniform(0.05, 2.0), latency_p95_s=rng.uniform(0.1, 3.0), latency_peak_ewma_s=rng.uniform(0.05, 3),
                     qps=rng.uniform(0, 50), queue_depth=rng.randrange(8), kv_cache_usage=rng.random(),
                     dynamic_weight=rng.uniform(0.1, 2), context_window=32768)
        for i in range(n)
    ]


def bench(policy: RoutingPolicy, n: int, max_s: float, with_metrics: bool) -> dict[str, float]:
    rng = random.Random(n)
    endpoints = views(n, rng)
    metrics = SchedulingMetrics(time.perf_counter_ns) if with_metrics else None
    scheduler = build_scheduler(policy, metrics=metrics)
    requests = [SchedulingRequest("m", "/chat/completions", False, rng.randrange(4000), 512,
                                  prefix_hash=rng.getrandbits(64) if i % 2 else None) for i in range(64)]
    pick_rng = random.Random(1)
    for r in requests:  # warm-up: caches (prefix rings), branch predictors, allocator
        scheduler.schedule(r, endpoints, pick_rng)
    samples = []
    deadline = time.perf_counter() + max_s
    for i in range(DECISIONS[n]):
        request = requests[i % len(requests)]
        t0 = time.perf_counter_ns()
        scheduler.schedule(request, endpoints, pick_rng)
        samples.append(time.perf_counter_ns() - t0)
        if i % 256 == 0 and time.perf_counter() > deadline:
            break
    samples.sort()
    q = statistics.quantiles(samples, n=100)
    return {"decisions": len(samples), "p50_us": q[49] / 1000, "p90_us": q[89] / 1000, "p99_us": q[98] / 1000}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("bench/results/scheduler-latest.json"))
    parser.add_argument("--max-s", type=float, default=20.0, help="wall-clock bound per (policy, size)")
    parser.add_argument("--repeat", type=int, default=3, help="measurements per (policy, metrics, size)")
    args = parser.parse_args()
    rows = []
    load_before = os.getloadavg()
    print(f"{'policy':<28} {'metrics':>7} {'endpoints':>9} {'p50 us':>9} {'p90 us':>9} {'p99 us':>9} {'n':>7}"
          f"   (median of {args.repeat})")
    for name, policy in POLICIES.items():
        for with_metrics in (False, True):
            for n in SIZES:
                runs = [bench(policy, n, args.max_s, with_metrics) for _ in range(args.repeat)]
                r = {k: statistics.median(run[k] for run in runs) for k in ("p50_us", "p90_us", "p99_us")}
                r["decisions"] = sum(run["decisions"] for run in runs)
                rows.append({"policy": name, "metrics": with_metrics, "endpoints": n, **r, "repeats": runs})
                print(f"{name:<28} {'on' if with_metrics else 'off':>7} {n:>9} {r['p50_us']:>9.1f} "
                      f"{r['p90_us']:>9.1f} {r['p99_us']:>9.1f} {r['decisions']:>7}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"python": platform.python_version(), "machine": platform.machine(),
                                    "cpus": os.cpu_count(), "load_average_before": load_before,
                                    "load_average_after": os.getloadavg(),
                                    "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": rows}, indent=1))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
