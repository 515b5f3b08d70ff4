"""Polls each endpoint's engine /metrics (vLLM, SGLang) and records the load in `StatsStore`.

A background runnable: `start()` after the routing table exists, `stop()` at shutdown.
An endpoint whose server exposes no engine metrics (404, or neither vLLM nor SGLang
names) is left alone for a while instead of being polled every interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from sits.runtime.tasks import cancel_and_wait
from sits.backends.engine_metrics import parse_engine_metrics
from sits.backends.http_client import ConnectionPool, Origin, Timeouts
from sits.errors import SitsError
from sits.state.endpoint_stats import StatsStore
from sits.state.routing_table import Endpoint

log = logging.getLogger("sits.engine_metrics")

NOT_AN_ENGINE_BACKOFF_S = 60.0
MAX_METRICS_BYTES = 8 * 1024 * 1024


class EngineMetricsScraper:
    def __init__(
        self,
        pool: ConnectionPool,
        stats: StatsStore,
        endpoints: Callable[[], Iterable[Endpoint]],
        clock: Callable[[], float],
        interval_s: float = 1.0,
        timeout_s: float = 2.0,
    ) -> None:
        self._pool = pool
        self._stats = stats
        self._endpoints = endpoints
        self._clock = clock
        self._interval = interval_s
        self._timeouts = Timeouts(connect=timeout_s, first_byte=timeout_s, total=timeout_s)
        self._skip_until: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sits-engine-metrics")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait([task])

    async def scrape_all(self) -> None:
        """One round over every endpoint, concurrently; failures are logged, never raised."""
        now = self._clock()
        due = [e for e in self._endpoints() if self._skip_until.get(e.id, 0.0) <= now]
        await asyncio.gather(*(self._scrape_logged(e) for e in due))

    async def scrape(self, endpoint: Endpoint) -> bool:
        """Scrape one endpoint; True if it reported engine load."""
        host = endpoint.host if ":" not in endpoint.host else f"[{endpoint.host}]"
        request = (f"GET /metrics HTTP/1.1\r\nhost: {host}:{endpoint.port}\r\nuser-agent: sits\r\n"
                   "accept: text/plain\r\n\r\n").encode("latin-1")
        response = await self._pool.request(Origin(endpoint.scheme, endpoint.host, endpoint.port), request,
                                            self._timeouts)
        body = await response.read()
        if response.status != 200 or len(body) > MAX_METRICS_BYTES:
            self._skip_until[endpoint.id] = self._clock() + NOT_AN_ENGINE_BACKOFF_S
            return False
        load = parse_engine_metrics(body.decode("utf-8", "replace"), observed_at=self._clock())
        if load is None:
            self._skip_until[endpoint.id] = self._clock() + NOT_AN_ENGINE_BACKOFF_S
            return False
        self._stats.record_engine(endpoint.id, load)
        return True

    async def _scrape_logged(self, endpoint: Endpoint) -> None:
        try:
            await asyncio.wait_for(self.scrape(endpoint), self._timeouts.total)
        except (SitsError, OSError, asyncio.TimeoutError) as exc:
            log.debug("engine metrics of %s unavailable: %s", endpoint.id, exc)

    async def _run(self) -> None:
        while True:
            await self.scrape_all()
            await asyncio.sleep(self._interval)
