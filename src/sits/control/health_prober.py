"""Active health checks: probe each endpoint's health path on an interval; reap drained endpoints."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from sits.backends.openai_upstream import OpenAIUpstream
from sits.errors import SitsError
from sits.state.endpoint_health import HealthBoard
from sits.state.endpoint_stats import StatsStore
from sits.state.routing_table import Endpoint, RoutingTable

log = logging.getLogger("sits.health")


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    interval_s: float = 5.0
    timeout_s: float = 2.0


class HealthProber:
    def __init__(self, table: Callable[[], RoutingTable], backend: OpenAIUpstream, board: HealthBoard,
                 stats: StatsStore, settings: ProbeSettings, clock: Callable[[], float]) -> None:
        self._table = table
        self._backend = backend
        self._board = board
        self._stats = stats
        self._settings = settings
        self._clock = clock
        self._wake = asyncio.Event()

    def poke(self) -> None:
        """Probe now (after a registration), not at the next tick."""
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self.probe_once()
            try:
                await asyncio.wait_for(self._wake.wait(), self._settings.interval_s)
            except TimeoutError:
                pass
            self._wake.clear()

    async def probe_once(self) -> None:
        endpoints = [e for m in self._table().models.values() for e in m.endpoints if e.health_check_path]
        await asyncio.gather(*(self._probe(e) for e in endpoints))
        for endpoint_id in self._board.draining():
            if self._stats.get(endpoint_id).in_flight <= 0:
                self._board.remove(endpoint_id)

    async def _probe(self, endpoint: Endpoint) -> None:
        assert endpoint.health_check_path is not None
        try:
            status = await self._backend.probe(endpoint, endpoint.health_check_path, self._settings.timeout_s)
            ok, error = 200 <= status < 300, None if 200 <= status < 300 else f"HTTP {status}"
        except SitsError as exc:
            ok, error = False, exc.message
        before = self._board.get(endpoint.id)
        phase = before.phase if before else None
        self._board.probe_result(endpoint.id, ok, self._clock(), error)
        after = self._board.get(endpoint.id)
        if after is not None and after.phase != phase:
            log.info("endpoint %s: %s -> %s%s", endpoint.id, phase, after.phase, f" ({error})" if error else "")
