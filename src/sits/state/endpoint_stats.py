"""Live per-endpoint statistics observed by this gateway process."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class EndpointStats:
    in_flight: int = 0
    requests: int = 0
    errors: int = 0
    consecutive_errors: int = 0
    latency_ewma_s: float = 0.0

    def started(self) -> None:
        self.in_flight += 1
        self.requests += 1

    def finished(self, latency_s: float, ok: bool, alpha: float = 0.2) -> None:
        self.in_flight -= 1
        if ok:
            self.consecutive_errors = 0
            ewma = self.latency_ewma_s
            self.latency_ewma_s = latency_s if ewma == 0.0 else ewma + alpha * (latency_s - ewma)
        else:
            self.errors += 1
            self.consecutive_errors += 1


class StatsStore:
    """Stats by endpoint id; entries appear on first use and outlive table swaps."""

    def __init__(self) -> None:
        self._by_endpoint: dict[str, EndpointStats] = {}

    def get(self, endpoint_id: str) -> EndpointStats:
        stats = self._by_endpoint.get(endpoint_id)
        if stats is None:
            stats = self._by_endpoint[endpoint_id] = EndpointStats()
        return stats

    def snapshot(self) -> dict[str, EndpointStats]:
        return dict(self._by_endpoint)
