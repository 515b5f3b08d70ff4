"""The dashboard state of several workers merged into one answer."""

from __future__ import annotations

from typing import Any

from sits.telemetry.worker_dashboard import merge_dashboards


def row(**changes: Any) -> dict[str, Any]:
    base = {"id": "m/ep-0", "phase": "ready", "available": True, "circuit": "closed", "weight": 1.0,
            "dynamic_weight": 1.0, "in_flight": 1, "latency_ewma_ms": 10.0, "latency_p95_ms": 20.0,
            "ttft_ewma_ms": 5.0, "error_rate": 0.0, "qps": 10.0, "ejections": 0, "circuit_opens": 0,
            "concurrency_limit": 16.0}
    return {**base, **changes}


def state(rows: list[dict[str, Any]], requests: float, decisions: list[dict[str, Any]], now: float) -> dict[str, Any]:
    return {"now": now, "registry_version": 3, "models": [{"name": "m", "endpoints": rows}],
            "totals": {"requests": requests, "errors": 1.0}, "admission_queued": {"1": 2},
            "replication_lag_s": None, "decisions": decisions, "tracing": {"enabled": False}}


def test_endpoint_rows_add_up_and_latencies_weigh_by_qps():
    merged = merge_dashboards({
        0: state([row()], 100, [{"at": 1.0, "request_id": "a"}, {"at": 3.0, "request_id": "c"}], now=50.0),
        1: state([row(in_flight=3, qps=30.0, latency_ewma_ms=30.0, circuit="half-open", available=False,
                      concurrency_limit=8.0)], 60, [{"at": 2.0, "request_id": "b"}], now=49.0),
    }, own=0)
    (endpoint,) = merged["models"][0]["endpoints"]
    assert endpoint["in_flight"] == 4 and endpoint["qps"] == 40.0
    assert endpoint["latency_ewma_ms"] == 25.0  # (10 x 10 + 30 x 30) / 40
    assert endpoint["concurrency_limit"] == 24.0
    assert endpoint["available"] is False and endpoint["circuit"] == "half-open"
    assert merged["totals"] == {"requests": 160, "errors": 2.0}
    assert merged["admission_queued"] == {"1": 4}
    assert [d["request_id"] for d in merged["decisions"]] == ["c", "b", "a"]  # newest first, all workers
    assert merged["now"] == 50.0 and merged["workers"] == 2


def test_an_endpoint_one_worker_has_not_seen_yet_is_still_listed():
    merged = merge_dashboards({0: state([row()], 1, [], 1.0), 1: state([row(), row(id="m/ep-1")], 1, [], 1.0)},
                              own=1)
    assert [e["id"] for e in merged["models"][0]["endpoints"]] == ["m/ep-0", "m/ep-1"]
