"""Live endpoint stats: O(1) updates per request, derived signals per refresh."""

from __future__ import annotations

import pytest

from sits.state.dynamic_weight import SurgeGuard, dynamic_weight
from sits.state.endpoint_stats import EndpointStats, StatsStore
from sits.state.engine_load import EngineLoad


def test_ewma_peak_ewma_and_error_rate():
    s = EndpointStats()
    for latency in (0.1, 0.1, 1.0):
        s.started()
        s.finished(latency, ok=True)
    assert s.latency_peak_ewma_s == 1.0  # jumps to the slow sample at once
    assert s.latency_ewma_s == pytest.approx(0.1 + 0.2 * 0.9)
    s.finished(0.1, ok=True)
    assert s.latency_peak_ewma_s == pytest.approx(1.0 - 0.2 * 0.9)  # decays
    s.finished(0.0, ok=False)
    assert s.error_rate == pytest.approx(0.2) and s.consecutive_errors == 1


def test_refresh_computes_p95_qps_and_weight():
    store = StatsStore(refresh_interval_s=0.2)
    s = store.get("e")
    store.refresh(0.0)
    for i in range(100):
        s.started()
        s.finished((i + 1) / 1000, ok=True)
    assert not store.refresh(0.1)  # too soon
    assert store.refresh(0.5)
    assert s.latency_p95_s == pytest.approx(0.096)
    assert s.qps == pytest.approx(100 / 0.5)
    assert s.dynamic_weight == pytest.approx(dynamic_weight(s.latency_ewma_s * 1000, s.qps))


def test_surge_decays_weight_through_the_store():
    store = StatsStore(refresh_interval_s=0.2, surge=SurgeGuard(min_baseline_qps=5.0))
    s = store.get("e")
    now = 0.0
    store.refresh(now)
    for _ in range(5):  # steady 50 QPS
        for _ in range(10):
            s.started()
            s.finished(0.05, ok=True)
        now += 0.2
        store.refresh(now)
    steady = s.dynamic_weight
    for _ in range(200):  # 1,000 QPS
        s.started()
        s.finished(0.05, ok=True)
    now += 0.2
    store.refresh(now)
    assert s.surging and s.dynamic_weight < steady


def test_stale_engine_readings_are_dropped():
    store = StatsStore(refresh_interval_s=0.2, engine_max_age_s=5.0)
    store.record_engine("e", EngineLoad("vllm", running=3, waiting=2, kv_cache_usage=0.4, observed_at=1.0))
    store.refresh(0.0)
    store.refresh(2.0)
    assert store.get("e").engine is not None
    store.refresh(7.0)
    assert store.get("e").engine is None
