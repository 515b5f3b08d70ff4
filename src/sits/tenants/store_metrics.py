"""Prometheus figures of the spend log and the key directory (read at scrape time, nothing per request)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from sits.tenants.directory import LiveKeyDirectory
from sits.tenants.spend_log import SpendLog


class TenantStoreMetrics(Collector):
    def __init__(self, spend_log: SpendLog, directory: LiveKeyDirectory) -> None:
        self._log = spend_log
        self._directory = directory

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        log = self._log
        for name, text, value in (
                ("sits_spend_log_rows_written", "Spend rows committed to the database (a replayed row counts once).",
                 log.written),
                ("sits_spend_log_rows_dropped", "Spend rows dropped because the queue was full (tenants.spend_log."
                 "queue_rows) or a failed batch found no room to go back.", log.dropped),
                ("sits_spend_log_flush_failures", "Spend batches that failed to commit (retried at the next flush).",
                 log.failed_flushes)):
            counter = CounterMetricFamily(name, text)
            counter.add_metric([], float(value))
            yield counter
        queued = GaugeMetricFamily("sits_spend_log_rows_queued", "Spend rows waiting in memory for the next flush "
                                   "(what a crash now would lose).")
        queued.add_metric([], float(log.pending))
        yield queued
        keys = GaugeMetricFamily("sits_key_directory_secrets", "Key secrets (current and in a rotation overlap) "
                                 "this replica's key directory holds.")
        keys.add_metric([], float(len(self._directory)))
        yield keys
        version = GaugeMetricFamily("sits_key_directory_version", "The tenant store version this replica's key "
                                    "directory reflects (equal on every replica once they caught up).")
        version.add_metric([], float(self._directory.version))
        yield version

    def describe(self) -> list[object]:
        return []
