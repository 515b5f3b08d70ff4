"""Worker metrics share: counters and histograms add up across workers, gauges stay per worker."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from sits.telemetry.metrics import GatewayMetrics
from sits.telemetry.worker_share import WorkerMetricsShare


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


def two_workers(tmp_path: Path) -> tuple[GatewayMetrics, GatewayMetrics, WorkerMetricsShare, WorkerMetricsShare]:
    a, b = GatewayMetrics(), GatewayMetrics()
    a.registry.register(InFlight(3))
    b.registry.register(InFlight(5))
    tmp_path.mkdir(exist_ok=True)
    return a, b, WorkerMetricsShare(a.registry, tmp_path, 0), WorkerMetricsShare(b.registry, tmp_path, 1)


def test_a_scrape_of_either_worker_sums_counters_and_histograms(tmp_path: Path):
    a, b, share_a, share_b = two_workers(tmp_path)
    for _ in range(3):
        a.served("m", "m#0", 200, 0.01, 0.005)
    for _ in range(4):
        b.served("m", "m#0", 200, 0.2, 0.1)
    b.served("m", "m#0", 502, 0.2, None)
    share_b.publish()
    merged = samples(share_a.exposition())  # worker 0 answers: its own live figures plus worker 1's file
    ok = (("endpoint", "m#0"), ("model", "m"), ("status", "200"))
    assert merged[("sits_requests_total", ok)] == 7
    assert merged[("sits_requests_total", (("endpoint", "m#0"), ("model", "m"), ("status", "502")))] == 1
    me = (("endpoint", "m#0"), ("model", "m"))
    assert merged[("sits_request_duration_seconds_count", me)] == 8
    assert abs(merged[("sits_request_duration_seconds_sum", me)] - (0.03 + 1.0)) < 1e-9
    # buckets add up bucket by bucket: 3 answers took 10 ms, 5 took 200 ms
    assert merged[("sits_request_duration_seconds_bucket", (*me[:1], ("le", "0.025"), *me[1:]))] == 3
    assert merged[("sits_request_duration_seconds_bucket", (*me[:1], ("le", "+Inf"), *me[1:]))] == 8
    # the other worker answers with the same totals
    share_a.publish()
    assert samples(share_b.exposition())[("sits_requests_total", ok)] == 7


def test_gauges_are_per_worker_with_a_worker_label(tmp_path: Path):
    _, _, share_a, share_b = two_workers(tmp_path)
    share_b.publish()
    merged = samples(share_a.exposition())
    assert merged[("sits_test_in_flight", (("endpoint", "e1"), ("worker", "0")))] == 3
    assert merged[("sits_test_in_flight", (("endpoint", "e1"), ("worker", "1")))] == 5
    assert not any(name == "sits_test_in_flight" and "worker" not in dict(labels) for name, labels in merged)


def test_live_figures_of_the_scraped_worker_and_a_broken_file_skipped(tmp_path: Path):
    a, _, share_a, _ = two_workers(tmp_path)
    share_a.publish()
    a.served("m", "m#0", 200, 0.01, None)  # after its last publish: a scrape still counts it
    (tmp_path / "worker-7.json").write_text("{not json")
    merged = samples(share_a.exposition())
    assert merged[("sits_requests_total", (("endpoint", "m#0"), ("model", "m"), ("status", "200")))] == 1
