"""Live per-endpoint statistics observed by this gateway process (and read from engine /metrics).

Per request (`started`, `first_token`, `finished`) the updates are O(1); the costlier
derived signals (p95, QPS, dynamic weight) are recomputed by `StatsStore.refresh` at most
once per refresh interval, 200 ms by default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from sits.state.dynamic_weight import SurgeGuard, dynamic_weight
from sits.state.engine_load import EngineLoad

RECENT_LATENCIES: Final = 256  # window for the p95; at 1k QPS that is the last quarter second


@dataclass(slots=True)
class EndpointStats:
    in_flight: int = 0
    requests: int = 0
    errors: int = 0
    consecutive_errors: int = 0
    latency_ewma_s: float = 0.0
    latency_peak_ewma_s: float = 0.0
    ttft_ewma_s: float = 0.0
    error_rate: float = 0.0  # EWMA of failures, 0..1
    latency_p95_s: float = 0.0  # over the recent window, as of the last refresh
    qps: float = 0.0  # starts per second over the last refresh interval
    dynamic_weight: float = field(default_factory=lambda: dynamic_weight(0.0, 0.0))
    surging: bool = False
    engine: EngineLoad | None = None
    _recent: list[float] = field(default_factory=list)
    _next_slot: int = 0
    _requests_at_refresh: int = 0
    _qps_baseline: float = 0.0

    def started(self) -> None:
        self.in_flight += 1
        self.requests += 1

    def first_token(self, ttft_s: float, alpha: float = 0.2) -> None:
        ewma = self.ttft_ewma_s
        self.ttft_ewma_s = ttft_s if ewma == 0.0 else ewma + alpha * (ttft_s - ewma)

    def finished(self, latency_s: float, ok: bool, alpha: float = 0.2) -> None:
        self.in_flight -= 1
        if ok:
            self.consecutive_errors = 0
            self.error_rate -= alpha * self.error_rate
            ewma = self.latency_ewma_s
            self.latency_ewma_s = latency_s if ewma == 0.0 else ewma + alpha * (latency_s - ewma)
            # Peak EWMA (Finagle): jump to a slower sample at once, decay towards faster ones.
            peak = self.latency_peak_ewma_s
            self.latency_peak_ewma_s = latency_s if latency_s > peak else peak + alpha * (latency_s - peak)
            recent = self._recent
            if len(recent) < RECENT_LATENCIES:
                recent.append(latency_s)
            else:
                recent[self._next_slot] = latency_s
                self._next_slot = (self._next_slot + 1) % RECENT_LATENCIES
        else:
            self.errors += 1
            self.consecutive_errors += 1
            self.error_rate += alpha * (1.0 - self.error_rate)

    def refresh(self, interval_s: float, surge: SurgeGuard) -> None:
        """Recompute p95, QPS and the dynamic weight over the `interval_s` since the last refresh."""
        recent = self._recent
        if recent:
            ordered = sorted(recent)
            self.latency_p95_s = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        self.qps = (self.requests - self._requests_at_refresh) / interval_s if interval_s > 0 else 0.0
        self._requests_at_refresh = self.requests
        self.dynamic_weight, self._qps_baseline, self.surging = surge.next(
            self.dynamic_weight, self.latency_ewma_s * 1000.0, self.qps, self._qps_baseline
        )


class StatsStore:
    """Stats by endpoint id; entries appear on first use and outlive table swaps."""

    def __init__(
        self,
        refresh_interval_s: float = 0.2,
        surge: SurgeGuard = SurgeGuard(),
        engine_max_age_s: float = 10.0,
    ) -> None:
        self._by_endpoint: dict[str, EndpointStats] = {}
        self._interval = refresh_interval_s
        self._surge = surge
        self._engine_max_age = engine_max_age_s
        self._last_refresh: float | None = None

    def get(self, endpoint_id: str) -> EndpointStats:
        stats = self._by_endpoint.get(endpoint_id)
        if stats is None:
            stats = self._by_endpoint[endpoint_id] = EndpointStats()
        return stats

    def snapshot(self) -> dict[str, EndpointStats]:
        return dict(self._by_endpoint)

    def record_engine(self, endpoint_id: str, load: EngineLoad) -> None:
        self.get(endpoint_id).engine = load

    def refresh(self, now: float) -> bool:
        """Recompute derived signals if a refresh interval has passed since the last; True if it did.

        Cheap to call per request: the director calls it with its clock, so no background task is needed.
        """
        last = self._last_refresh
        if last is None:
            self._last_refresh = now
            return False
        elapsed = now - last
        if elapsed < self._interval - 1e-9:  # tolerate float drift in a clock summed from steps
            return False
        self._last_refresh = now
        max_age = self._engine_max_age
        for stats in self._by_endpoint.values():
            stats.refresh(elapsed, self._surge)
            if stats.engine is not None and now - stats.engine.observed_at > max_age:
                stats.engine = None  # a stale engine reading is worse than none
        return True
