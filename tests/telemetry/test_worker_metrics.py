"""Metrics of several workers in one exposition: counters and histograms add up, gauges stay per worker."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from sits.telemetry.metrics import GatewayMetrics
from sits.telemetry.worker_metrics import KIND, exposition, families_of
from sits.runtime.worker_share import WorkerShare


class InFlight(Collector):
    def __init__(self, value: float) -> None:
        self.value = value

    def collect(self):
        family = GaugeMetricFamily("sits_test_in_flight", "In flight.", labels=["endpoint"])
        family.add_metric(["e1"], self.value)
        yield family


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text.decode()) for s in family.samples}


def two_workers(tmp_path: Path) -> tuple[GatewayMetrics, GatewayMetrics, WorkerShare, WorkerShare]:
    a, b = GatewayMetrics(), GatewayMetrics()
    a.registry.register(InFlight(3))
    b.registry.register(InFlight(5))
    return a, b, WorkerShare(tmp_path, 0), WorkerShare(tmp_path, 1)


def test_a_scrape_of_either_worker_sums_counters_and_histograms(tmp_path: Path):
    a, b, share_a, share_b = two_workers(tmp_path)
    for _ in range(3):
        a.served("m", "m#0", 200, 0.01, 0.005)
    for _ in range(4):
        b.served("m", "m#0", 200, 0.2, 0.1)
    b.served("m", "m#0", 502, 0.2, None)
    share_b.write(KIND, families_of(b.registry))
    # worker 0 answers: its live figures plus worker 1's file
    merged = samples(exposition(share_a.gather(KIND, families_of(a.registry))))
    ok = (("endpoint", "m#0"), ("model", "m"), ("status", "200"))
    assert merged[("sits_requests_total", ok)] == 7
    assert merged[("sits_requests_total", (("endpoint", "m#0"), ("model", "m"), ("status", "502")))] == 1
    me = (("endpoint", "m#0"), ("model", "m"))
    assert merged[("sits_request_duration_seconds_count", me)] == 8
    assert abs(merged[("sits_request_duration_seconds_sum", me)] - (0.03 + 1.0)) < 1e-9
    # buckets add up bucket by bucket: 3 answers took 10 ms, 5 took 200 ms
    assert merged[("sits_request_duration_seconds_bucket", (me[0], ("le", "0.025"), me[1]))] == 3
    assert merged[("sits_request_duration_seconds_bucket", (me[0], ("le", "+Inf"), me[1]))] == 8
    # the other worker answers with the same totals (worker 0's figures were published by its scrape)
    assert samples(exposition(share_b.gather(KIND, families_of(b.registry))))[("sits_requests_total", ok)] == 7


def test_gauges_are_per_worker_with_a_worker_label(tmp_path: Path):
    a, b, share_a, share_b = two_workers(tmp_path)
    share_b.write(KIND, families_of(b.registry))
    merged = samples(exposition(share_a.gather(KIND, families_of(a.registry))))
    assert merged[("sits_test_in_flight", (("endpoint", "e1"), ("worker", "0")))] == 3
    assert merged[("sits_test_in_flight", (("endpoint", "e1"), ("worker", "1")))] == 5
    assert not any(name == "sits_test_in_flight" and "worker" not in dict(labels) for name, labels in merged)


def test_the_scraped_worker_counts_live_and_a_broken_file_is_skipped(tmp_path: Path):
    a, _, share_a, _ = two_workers(tmp_path)
    share_a.write(KIND, families_of(a.registry))
    a.served("m", "m#0", 200, 0.01, None)  # after its last publish: a scrape still counts it
    (tmp_path / f"{KIND}-7.json").write_text("{not json")
    merged = samples(exposition(share_a.gather(KIND, families_of(a.registry))))
    assert merged[("sits_requests_total", (("endpoint", "m#0"), ("model", "m"), ("status", "200")))] == 1
