"""The dashboard's state of every worker in one answer (`sits serve --workers N`).

Per endpoint: in-flight requests, QPS, ejections, circuit opens and concurrency limits add up (each
worker holds its own slots and limiter); latencies and the error rate are averaged weighted by each
worker's QPS; the endpoint counts as available only if every worker would send it traffic, and its
circuit shows the most open state any worker has. Counter totals and queued requests add up; recent
decisions are merged newest first.
"""

from __future__ import annotations

from typing import Any

KIND = "dashboard"
_CIRCUIT_SEVERITY = {"closed": 0, "half-open": 1, "open": 2}
_SUMMED = ("in_flight", "qps", "ejections", "circuit_opens")
_QPS_WEIGHTED = ("latency_ewma_ms", "latency_p95_ms", "ttft_ewma_ms", "error_rate", "dynamic_weight")


def merge_dashboards(states: dict[int, dict[str, Any]], own: int, recent: int = 50) -> dict[str, Any]:
    """`states`: each worker's dashboard state by worker index; `own`: the answering worker's (its
    clock, registry version and tracing status are the answer's)."""
    merged = dict(states[own])
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    order: list[str] = []
    for worker in sorted(states):
        for model in states[worker]["models"]:
            if model["name"] not in order:
                order.append(model["name"])
            for row in model["endpoints"]:
                rows.setdefault((model["name"], row["id"]), []).append(row)
    merged["models"] = [{"name": name, "endpoints": [_merge_rows(group) for (m, _), group in rows.items() if m == name]}
                        for name in order]
    merged["totals"] = _sum_maps(s["totals"] for s in states.values())
    merged["admission_queued"] = _sum_maps(s["admission_queued"] for s in states.values())
    lags = [s["replication_lag_s"] for s in states.values() if s.get("replication_lag_s") is not None]
    merged["replication_lag_s"] = max(lags) if lags else None
    decisions = [d for s in states.values() for d in s["decisions"]]
    merged["decisions"] = sorted(decisions, key=lambda d: d["at"], reverse=True)[:recent]
    merged["workers"] = len(states)
    return merged


def _merge_rows(group: list[dict[str, Any]]) -> dict[str, Any]:
    row = dict(group[0])
    if len(group) == 1:
        return row
    for key in _SUMMED:
        row[key] = sum(r[key] for r in group)
    total_qps = sum(r["qps"] for r in group)
    for key in _QPS_WEIGHTED:
        if total_qps > 0:
            row[key] = round(sum(r[key] * r["qps"] for r in group) / total_qps, 4)
        else:
            row[key] = round(sum(r[key] for r in group) / len(group), 4)
    limits = [r["concurrency_limit"] for r in group if r["concurrency_limit"] is not None]
    row["concurrency_limit"] = sum(limits) if limits else None
    row["available"] = all(r["available"] for r in group)
    row["circuit"] = max((r["circuit"] for r in group), key=lambda c: _CIRCUIT_SEVERITY.get(c, 0))
    return row


def _sum_maps(maps: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in maps:
        for key, value in m.items():
            out[key] = out.get(key, 0) + value
    return out
