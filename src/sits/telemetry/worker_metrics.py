"""Prometheus families of every worker in one exposition (`sits serve --workers N`).

Counters and histograms add up across workers: the totals one process would have counted. Gauges
describe one process (its in-flight requests, its view of an endpoint), so each worker's gauges carry
a `worker` label instead of being summed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

WORKER_LABEL = "worker"
KIND = "metrics"

Family = dict[str, Any]  # {"name", "doc", "type", "samples": [[sample name, labels, value], ...]}


def families_of(registry: CollectorRegistry) -> list[Family]:
    return [{"name": m.name, "doc": m.documentation, "type": m.type,
             "samples": [[s.name, s.labels, s.value] for s in m.samples]} for m in registry.collect()]


def exposition(workers: dict[int, list[Family]]) -> bytes:
    """The Prometheus text of every worker's families (gathered by runtime/worker_share.py)."""
    merged = CollectorRegistry(auto_describe=False)
    merged.register(_Fixed(merge(workers)))
    return generate_latest(merged)


def merge(workers: dict[int, list[Family]]) -> list[Metric]:
    """Counters and histograms summed per (sample, labels); gauges kept apart by a `worker` label."""
    merged: dict[str, tuple[str, str, dict[tuple[str, tuple[tuple[str, str], ...]], list[Any]]]] = {}
    for worker in sorted(workers):
        for family in workers[worker]:
            name, kind = family["name"], family["type"]
            _, _, samples = merged.setdefault(name, (family["doc"], kind, {}))
            for sample_name, labels, value in family["samples"]:
                if kind == "gauge":
                    labels = {**labels, WORKER_LABEL: str(worker)}
                key = (sample_name, tuple(labels.items()))
                entry = samples.get(key)
                if entry is None:
                    samples[key] = [labels, value]
                else:
                    entry[1] += value
    metrics = []
    for name, (doc, kind, samples) in merged.items():
        metric = Metric(name, doc, kind)
        for (sample_name, _), (labels, value) in samples.items():
            metric.add_sample(sample_name, labels, value)
        metrics.append(metric)
    return metrics


class _Fixed(Collector):
    def __init__(self, metrics: Iterable[Metric]) -> None:
        self._metrics = list(metrics)

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)
