"""Reads the live state of every endpoint in one pass, for /metrics and the dashboard (never per request)."""

from __future__ import annotations

from collections.abc import Callable

from sits.pipeline.admission_step import Admission
from sits.state.circuit_breaker import CircuitBreakers
from sits.state.endpoint_health import HealthBoard
from sits.state.endpoint_stats import StatsStore
from sits.state.routing_table import RoutingTable
from sits.scheduling.metrics import SchedulingMetrics
from sits.telemetry.live_state import EndpointRow, LiveState, PluginRow


class LiveSnapshot:
    def __init__(self, table: Callable[[], RoutingTable], stats: StatsStore, health: HealthBoard,
                 breakers: CircuitBreakers, admission: Admission | None, clock: Callable[[], float],
                 replication_lag: Callable[[], float | None] | None = None,
                 scheduling: SchedulingMetrics | None = None) -> None:
        self._scheduling = scheduling
        self._table = table
        self._stats = stats
        self._health = health
        self._breakers = breakers
        self._admission = admission
        self._clock = clock
        self.replication_lag = replication_lag  # set by the composition root when replication runs

    def __call__(self) -> LiveState:
        now = self._clock()
        rows = []
        limits = self._admission.limits.snapshot() if self._admission is not None else {}
        for model in self._table().models.values():
            for e in model.endpoints:
                s = self._stats.get(e.id)
                h = self._health.get(e.id)
                circuit = self._breakers.state(e.id, now)
                rows.append(EndpointRow(
                    model=model.name, endpoint=e.id, phase=h.phase if h is not None else "ready",
                    available=self._health.available(e.id, now) and circuit != "open", circuit=circuit,
                    weight=e.weight, dynamic_weight=s.dynamic_weight, in_flight=s.in_flight,
                    latency_ewma_s=s.latency_ewma_s, latency_p95_s=s.latency_p95_s, ttft_ewma_s=s.ttft_ewma_s,
                    error_rate=s.error_rate, qps=s.qps, ejections=h.ejection_count if h is not None else 0,
                    circuit_opens=self._breakers.opened_count(e.id),
                    concurrency_limit=float(limits[e.id]) if e.id in limits else None,
                ))
        queued: dict[int, int] = {}
        if self._admission is not None:
            for gate in self._admission.gates.snapshot().values():
                for cls in gate.classes:
                    queued[int(cls.priority)] = queued.get(int(cls.priority), 0) + cls.queued
        lag = self.replication_lag() if self.replication_lag is not None else None
        s = self._scheduling
        if s is None:
            return LiveState(tuple(rows), queued, lag)
        plugins = tuple(PluginRow(t.name, t.calls, t.total_ns, t.clamped, t.broken) for t in s.snapshot())
        return LiveState(tuple(rows), queued, lag, plugins, dict(s.decisions), dict(s.empty))
