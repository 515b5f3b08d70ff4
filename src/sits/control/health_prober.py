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
        every = [e for m in self._table().models.values() for e in m.endpoints]
        gone = [e for e in every if not e.health_check_path and self._board.went_away(e.id)]
        await asyncio.gather(*(self._probe(e) for e in every if e.health_check_path),
                             *(self._recovery_probe(e) for e in gone))
        for endpoint_id in self._board.draining():
            if self._stats.get(endpoint_id).in_flight <= 0:
                self._board.remove(endpoint_id)

    async def _recovery_probe(self, endpoint: Endpoint) -> None:
        """An endpoint without a health check that went away (refused or dropped connections) is asked for
        its model list until it answers at all: any HTTP answer below 500 means the server is back (the
        question is reachability, not health, so a server without /models still counts), and it is
        readmitted then instead of after its whole ejection."""
        try:
            status = await self._backend.probe(endpoint, endpoint.base_path + "/models", self._settings.timeout_s)
        except SitsError:
            return
        if status < 500:
            self._board.answered(endpoint.id, self._clock())
            log.info("endpoint %s answers again: readmitted", endpoint.id)

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
