"""`/metrics` across `sits serve --workers N`: every worker's figures, whichever worker is scraped.

The kernel hands each connection to one worker process, so a scrape reaches one registry. Each
worker therefore publishes its metric families to a folder the workers share (one JSON file each,
replaced atomically), and a scrape answers with its own live families merged with the others'
latest files. Counters and histograms add up across workers: the totals one process would have
counted. Gauges describe one process (its in-flight requests, its view of an endpoint), so each
worker's gauges carry a `worker` label instead of being summed. Another worker's figures are at
most `interval_s` old (plus the time to write a file).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

log = logging.getLogger("sits.telemetry")

WORKER_LABEL = "worker"
_FILE_PREFIX = "worker-"

Family = dict[str, Any]  # {"name", "doc", "type", "samples": [[sample name, labels, value], ...]}


class WorkerMetricsShare:
    def __init__(self, registry: CollectorRegistry, folder: Path, worker: int, interval_s: float = 1.0) -> None:
        self._registry = registry
        self._folder = folder
        self._worker = worker
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._folder.mkdir(parents=True, exist_ok=True)
        self.publish()
        self._task = asyncio.get_running_loop().create_task(self._publish_every_interval(), name="sits-metrics-share")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.publish()  # the last figures stay for the workers still serving scrapes

    def publish(self) -> list[Family]:
        """Write this worker's families to its file; returns them."""
        families = [_family(m) for m in self._registry.collect()]
        path = self._folder / f"{_FILE_PREFIX}{self._worker}.json"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            tmp.write_bytes(orjson.dumps({"worker": self._worker, "families": families}))
            tmp.replace(path)
        except OSError as exc:  # a full disk must not break scrapes of this worker's own figures
            log.warning("could not publish worker metrics to %s: %s", path, exc)
        return families

    def exposition(self) -> bytes:
        """The Prometheus text of every worker's families, this one's live."""
        workers = {self._worker: self.publish()}
        for path in sorted(self._folder.glob(f"{_FILE_PREFIX}*.json")):
            try:
                doc = orjson.loads(path.read_bytes())
                workers.setdefault(int(doc["worker"]), doc["families"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a file being replaced or from an older layout: skip it this time
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Fixed(merge(workers)))
        return generate_latest(registry)

    async def _publish_every_interval(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            self.publish()


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


def _family(metric: Metric) -> Family:
    return {"name": metric.name, "doc": metric.documentation, "type": metric.type,
            "samples": [[s.name, s.labels, s.value] for s in metric.samples]}


class _Fixed(Collector):
    def __init__(self, metrics: Iterable[Metric]) -> None:
        self._metrics = list(metrics)

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)
