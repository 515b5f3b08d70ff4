"""What the gateway already knows about its endpoints, read at scrape time (nothing on the hot path).

The composition root supplies `snapshot`, a function that reads `state/`; this module only
turns the rows into Prometheus families and the dashboard's JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

CIRCUIT_STATES = ("closed", "half-open", "open")


@dataclass(frozen=True, slots=True)
class EndpointRow:
    model: str
    endpoint: str
    phase: str  # pending, ready, unhealthy, draining
    available: bool
    circuit: str  # closed, half-open, open
    weight: float
    dynamic_weight: float
    in_flight: int
    latency_ewma_s: float
    latency_p95_s: float
    ttft_ewma_s: float
    error_rate: float
    qps: float
    ejections: int
    circuit_opens: int
    concurrency_limit: float | None = None


@dataclass(frozen=True, slots=True)
class PluginRow:
    """One scheduling plugin's counters; its calls are timed one decision in N (scheduling/metrics.py)."""

    plugin: str
    timed_calls: int
    timed_ns: int
    clamped: int
    broken: int


@dataclass(frozen=True, slots=True)
class LiveState:
    endpoints: tuple[EndpointRow, ...]
    admission_queued: dict[int, int] = field(default_factory=dict)  # priority -> waiting requests
    replication_lag_s: float | None = None  # None: replication is off
    plugins: tuple[PluginRow, ...] = ()
    decisions_by_profile: dict[str, int] = field(default_factory=dict)
    empty_by_filter: dict[tuple[str, str], int] = field(default_factory=dict)  # (profile, filter) -> count


class LiveStateCollector(Collector):
    def __init__(self, snapshot: Callable[[], LiveState]) -> None:
        self._snapshot = snapshot

    def describe(self) -> list[object]:
        return []  # families are produced per scrape

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        state = self._snapshot()
        labels = ["model", "endpoint"]
        in_flight = GaugeMetricFamily("sits_endpoint_in_flight_requests", "Requests in flight to the endpoint.",
                                      labels=labels)
        available = GaugeMetricFamily("sits_endpoint_available", "1 when the endpoint takes traffic (ready, not "
                                      "ejected, circuit not open).", labels=labels)
        weight = GaugeMetricFamily("sits_endpoint_dynamic_weight", "The endpoint's live dynamic weight.",
                                   labels=labels)
        latency = GaugeMetricFamily("sits_endpoint_latency_ewma_seconds", "EWMA of the endpoint's latency.",
                                    labels=labels)
        circuit = GaugeMetricFamily("sits_circuit_state", "1 for the circuit's current state.",
                                    labels=[*labels, "state"])
        ejections = CounterMetricFamily("sits_endpoint_ejections", "Outlier ejections of the endpoint.",
                                        labels=labels)
        opens = CounterMetricFamily("sits_circuit_opens", "Times the endpoint's circuit opened.", labels=labels)
        for row in state.endpoints:
            values = [row.model, row.endpoint]
            in_flight.add_metric(values, row.in_flight)
            available.add_metric(values, 1.0 if row.available else 0.0)
            weight.add_metric(values, row.dynamic_weight)
            latency.add_metric(values, row.latency_ewma_s)
            for name in CIRCUIT_STATES:
                circuit.add_metric([*values, name], 1.0 if row.circuit == name else 0.0)
            ejections.add_metric(values, row.ejections)
            opens.add_metric(values, row.circuit_opens)
        yield from (in_flight, available, weight, latency, circuit, ejections, opens)
        queued = GaugeMetricFamily("sits_admission_queued_requests", "Requests waiting for admission, by priority.",
                                   labels=["priority"])
        for priority, count in sorted(state.admission_queued.items()):
            queued.add_metric([str(priority)], count)
        yield queued
        yield from _scheduler_families(state)
        if state.replication_lag_s is not None:
            yield GaugeMetricFamily("sits_replication_lag_seconds", "Seconds since this replica last merged "
                                    "state from its peers.", value=state.replication_lag_s)


def _scheduler_families(state: LiveState) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    decisions = CounterMetricFamily("sits_scheduler_decisions", "Scheduling decisions, by profile.",
                                    labels=["profile"])
    for profile, count in sorted(state.decisions_by_profile.items()):
        decisions.add_metric([profile], count)
    empty = CounterMetricFamily("sits_scheduler_no_candidate", "Decisions a filter left without a candidate.",
                                labels=["profile", "filter"])
    for (profile, name), count in sorted(state.empty_by_filter.items()):
        empty.add_metric([profile, name], count)
    calls = CounterMetricFamily("sits_scheduler_plugin_timed_calls", "Plugin calls that were timed (one "
                                "decision in N is timed).", labels=["plugin"])
    seconds = CounterMetricFamily("sits_scheduler_plugin_timed_seconds", "Time spent in the timed plugin calls; "
                                  "divide by the timed calls for the mean cost per call.", labels=["plugin"])
    clamped = CounterMetricFamily("sits_scheduler_clamped_scores", "Scorer calls whose scores were forced into "
                                  "[0, 1].", labels=["plugin"])
    broken = CounterMetricFamily("sits_scheduler_broken_scores", "Scorer calls that returned the wrong number of "
                                 "scores (the scorer abstained).", labels=["plugin"])
    for row in state.plugins:
        calls.add_metric([row.plugin], row.timed_calls)
        seconds.add_metric([row.plugin], row.timed_ns / 1e9)
        clamped.add_metric([row.plugin], row.clamped)
        broken.add_metric([row.plugin], row.broken)
    yield from (decisions, empty, calls, seconds, clamped, broken)

