"""Comparing strategies: the table, Pareto optimality, and the latency-throughput frontier PNG."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sits.simulate.engine import RunResult


@dataclass(frozen=True, slots=True)
class StrategySummary:
    strategy: str
    mean_ms: float  # at the reference load
    p99_ms: float  # at the reference load
    max_sustainable_qps: float  # highest offered load whose p99 met the SLO with < 1% errors
    pareto: bool  # no other strategy is at least as good on both p99 and max QPS, and better on one
    prefix_hit_rate: float  # at the reference load


def summarize(results: Sequence[RunResult], reference_load: float, slo_p99_ms: float) -> list[StrategySummary]:
    by_strategy: dict[str, list[RunResult]] = {}
    for r in results:
        by_strategy.setdefault(r.strategy, []).append(r)
    rows = []
    for name, runs in by_strategy.items():
        ref = min(runs, key=lambda r: abs(r.load - reference_load))
        ok = [r.offered_qps for r in runs if r.sustainable(slo_p99_ms)]
        rows.append((name, ref.mean_ms, ref.p99_ms, max(ok, default=0.0), ref.prefix_hit_rate))
    out = []
    for name, mean, p99, qps, hit in rows:
        dominated = any(
            o[2] <= p99 and o[3] >= qps and (o[2] < p99 or o[3] > qps) for o in rows if o[0] != name
        )
        out.append(StrategySummary(name, mean, p99, qps, not dominated, hit))
    return out


def format_table(summaries: Sequence[StrategySummary], reference_load: float) -> str:
    head = (f"{'strategy':<28} {'avg ms':>9} {'p99 ms':>9} {'max sustainable QPS':>20} {'prefix hits':>11}  Pareto"
            f"\n{'':<28} {'(at ' + format(reference_load, 'g') + 'x capacity)':>19}")
    lines = [head, "-" * 88]
    for s in summaries:
        lines.append(f"{s.strategy:<28} {_ms(s.mean_ms):>9} {_ms(s.p99_ms):>9} {s.max_sustainable_qps:>20,.0f} "
                     f"{s.prefix_hit_rate:>10.0%}  {'yes' if s.pareto else 'no'}")
    return "\n".join(lines)


def format_runs(results: Sequence[RunResult]) -> str:
    lines = [f"{'strategy':<28} {'load':>5} {'offered':>9} {'achieved':>9} {'avg ms':>9} {'p99 ms':>9} {'failed':>7}"]
    for r in sorted(results, key=lambda r: (r.strategy, r.load)):
        lines.append(f"{r.strategy:<28} {r.load:>5.2f} {r.offered_qps:>9,.0f} {r.achieved_qps:>9,.0f} "
                     f"{_ms(r.mean_ms):>9} {_ms(r.p99_ms):>9} {r.failed:>7}{'  (truncated)' if r.truncated else ''}")
    return "\n".join(lines)


def _ms(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:,.0f}"


def plot_frontier(results: Sequence[RunResult], path: Path, slo_p99_ms: float, title: str) -> bool:
    """Writes the p99-throughput frontier as a PNG; False (nothing written) when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return False

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    by_strategy: dict[str, list[RunResult]] = {}
    for r in results:
        by_strategy.setdefault(r.strategy, []).append(r)
    for name, runs in sorted(by_strategy.items()):
        runs.sort(key=lambda r: r.load)
        ax.plot([r.achieved_qps for r in runs], [r.p99_ms for r in runs], marker="o", label=name)
    ax.axhline(slo_p99_ms, color="grey", linestyle="--", linewidth=1, label=f"SLO p99 {slo_p99_ms:g} ms")
    ax.set_yscale("log")
    ax.set_xlabel("throughput (completed requests / simulated s)")
    ax.set_ylabel("p99 latency (ms, log)")
    ax.set_title(f"Latency-throughput frontier: {title}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True
