"""Polls each endpoint's engine /metrics (vLLM, SGLang, llama.cpp's server, SITS's embedded workers;
llama.cpp's /slots too) and records the load in `StatsStore`.

A background runnable: `start()` after the routing table exists, `stop()` at shutdown. Every endpoint
of the live table is polled, runtime registrations included (through the guarded pool, so the address
policy applies to the scrape as to the traffic). An endpoint whose server exposes no engine metrics
(404, unknown names, unreachable) is left alone for a backoff that doubles up to 10 minutes, so the
cost of polling servers without metrics stays bounded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from sits.runtime.tasks import cancel_and_wait
from sits.backends.engine_metrics import LLAMA_CPP, parse_engine_metrics, with_llama_cpp_slots
from sits.backends.endpoint_call import endpoint_call
from sits.backends.http_client import ConnectionPool, Timeouts
from sits.errors import SitsError
from sits.state.endpoint_stats import StatsStore
from sits.state.routing_table import Endpoint

log = logging.getLogger("sits.engine_metrics")

NOT_AN_ENGINE_BACKOFF_S = 30.0  # the first pause after a scrape found no engine metrics; doubles each time
MAX_BACKOFF_S = 600.0
MAX_METRICS_BYTES = 8 * 1024 * 1024


class EngineMetricsScraper:
    def __init__(
        self,
        pool: ConnectionPool,
        guarded_pool: ConnectionPool,
        stats: StatsStore,
        endpoints: Callable[[], Iterable[Endpoint]],
        clock: Callable[[], float],
        interval_s: float = 1.0,
        timeout_s: float = 2.0,
    ) -> None:
        self._pool = pool
        self._guarded_pool = guarded_pool  # for endpoints registered at runtime (address policy)
        self._stats = stats
        self._endpoints = endpoints
        self._clock = clock
        self._interval = interval_s
        self._timeouts = Timeouts(connect=timeout_s, first_byte=timeout_s, total=timeout_s)
        self._skip_until: dict[str, float] = {}
        self._misses: dict[str, int] = {}  # consecutive scrapes without engine metrics
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
        status, body = await self._get(endpoint, "/metrics")
        load = parse_engine_metrics(body.decode("utf-8", "replace"), observed_at=self._clock()) \
            if status == 200 else None
        if load is None:
            self._back_off(endpoint.id)
            return False
        if load.engine == LLAMA_CPP and load.kv_cache_usage is None:
            status, body = await self._get(endpoint, "/slots")
            if status == 200:
                load = with_llama_cpp_slots(load, body)
        self._misses.pop(endpoint.id, None)
        self._stats.record_engine(endpoint.id, load)
        return True

    async def _get(self, endpoint: Endpoint, path: str) -> tuple[int, bytes]:
        pool = self._guarded_pool if endpoint.guarded else self._pool
        status, body = await endpoint_call(pool, endpoint, "GET", path, self._timeouts,
                                           accept="text/plain, application/json")
        return (status, body) if len(body) <= MAX_METRICS_BYTES else (413, b"")

    def _back_off(self, endpoint_id: str) -> None:
        misses = self._misses[endpoint_id] = self._misses.get(endpoint_id, 0) + 1
        pause = min(MAX_BACKOFF_S, NOT_AN_ENGINE_BACKOFF_S * 2 ** (misses - 1))
        self._skip_until[endpoint_id] = self._clock() + pause

    async def _scrape_logged(self, endpoint: Endpoint) -> None:
        try:
            await asyncio.wait_for(self.scrape(endpoint), self._timeouts.total)
        except (SitsError, OSError, asyncio.TimeoutError) as exc:
            self._back_off(endpoint.id)
            log.debug("engine metrics of %s unavailable: %s", endpoint.id, exc)

    async def _run(self) -> None:
        while True:
            await self.scrape_all()
            await asyncio.sleep(self._interval)
