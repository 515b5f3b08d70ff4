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
class LiveState:
    endpoints: tuple[EndpointRow, ...]
    admission_queued: dict[int, int] = field(default_factory=dict)  # priority -> waiting requests
    replication_lag_s: float | None = None  # None: replication is off


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
        if state.replication_lag_s is not None:
            yield GaugeMetricFamily("sits_replication_lag_seconds", "Seconds since this replica last merged "
                                    "state from its peers.", value=state.replication_lag_s)
