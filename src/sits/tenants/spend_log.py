"""The spend log: what each finished request cost, written off the hot path in batches.

`record` appends to a bounded in-memory queue and returns (no I/O, no await; a full queue counts the
row as dropped instead of blocking the request). A background task writes the queue in batches of
`batch_rows` every `flush_interval_s`, sooner when a batch is full, and everything left on graceful
stop. Rows leave the queue in the order they came (FIFO), each batch in one transaction.

What a crash can lose (kill -9, power loss after the OS acknowledged nothing): only rows not yet in a
committed batch, i.e. those recorded since the start of the last flush that committed: at most
`flush_interval_s` of traffic plus one batch in flight when the database keeps up, and never more than
`queue_rows`. Nothing is counted twice: a batch retried after an error whose commit state is unknown,
or rows replayed after a restart, meet the unique `request_id` and are skipped, roll-ups included.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Literal

from sits.tenants.config import SpendLogConfig
from sits.tenants.periods import SECONDS_PER_DAY, day_of, first_day
from sits.tenants.records import Period, SpendRecord
from sits.tenants.spend_store import SpendStore, spend_row
from sits.tenants.spend_totals import PERIODS, SpendTotals

log = logging.getLogger("sits.tenants")

RETENTION_EVERY_S = 3600.0
TOTALS_RELOAD_S = 60.0  # what other replicas committed reaches this replica's period totals within this
RETENTION_CHUNK_ROWS = 10_000
RETENTION_MAX_CHUNKS = 100  # per run: a large backlog is worked off over several runs
STOP_TIMEOUT_S = 30.0


class SpendLog:
    """A `SpendSink` (tenants/records.py) and a `Runnable` (runtime/runnable.py)."""

    name = "sits-spend-log"

    def __init__(self, store: SpendStore, config: SpendLogConfig, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._config = config
        self._clock = clock
        self._queue_rows = config.queue_rows
        self._batch_rows = config.batch_rows
        self._pending: deque[SpendRecord] = deque()
        self._in_flight: list[SpendRecord] = []  # the batch being written (popped from the queue)
        self._flush_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._next_retention = 0.0
        self._totals = SpendTotals()
        self._next_reload = 0.0
        self.written = 0  # rows committed (new ones; a replayed row is not counted again)
        self.dropped = 0  # rows refused because the queue was full
        self.failed_flushes = 0
        self._dropped_logged = 0

    # -- the hot path -----------------------------------------------------------

    def record(self, spend: SpendRecord) -> None:
        pending = self._pending
        if len(pending) >= self._queue_rows:
            self.dropped += 1
            return
        pending.append(spend)
        if len(pending) == self._batch_rows:
            self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._pending)

    # -- writing ----------------------------------------------------------------

    async def flush(self) -> int:
        """Write what is queued now, batch by batch; the rows committed. Stops at the first failed batch
        (its rows go back to the front of the queue, for the next flush)."""
        committed = 0
        for _ in range(len(self._pending) // self._batch_rows + 1):
            if not self._pending:
                break
            committed += await self._flush_batch()
        return committed

    async def _flush_batch(self) -> int:
        async with self._flush_lock:
            pending = self._pending
            batch = self._in_flight = [pending.popleft() for _ in range(min(self._batch_rows, len(pending)))]
            try:
                fresh = await self._store.write([spend_row(s) for s in batch])
            except BaseException:
                self.failed_flushes += 1
                room = self._queue_rows - len(pending)
                self.dropped += max(0, len(batch) - room)
                pending.extendleft(reversed(batch[:max(0, room)]))  # retried first; the oldest kept
                raise
            else:
                self.written += fresh
                self._totals.add(batch, self._clock())  # with no await since the commit: never counted twice
            finally:
                self._in_flight = []
            return len(batch)

    def period_spend(self, scope: Literal["key", "team"], ident: str, period: Period) -> float:
        """USD spent by a key or team in the current period, without I/O (what a budget counter starts
        from, on the request path): the period totals in memory plus rows still queued here."""
        now = self._clock()
        since = first_day(period, now)
        return self._totals.get(scope, ident, period, now) + self._queued(scope, ident, since)

    def spend_by(self, scope: Literal["key", "team"], period: Period) -> dict[str, float]:
        """`period_spend` of every key or team at once, in one pass over the rows queued here (the
        dashboard's spend panel; not for the request path)."""
        now = self._clock()
        since = first_day(period, now)
        totals = self._totals.all_of(scope, period, now)
        for rows in (self._pending, self._in_flight):
            for s in rows:
                ident = s.key_id if scope == "key" else s.team_id
                if ident is not None and s.cost_usd and day_of(s.at) >= since:
                    totals[ident] = totals.get(ident, 0.0) + s.cost_usd
        return totals

    def _queued(self, scope: str, ident: str, since: int) -> float:
        """Rows not in the period totals yet: queued, or in the batch being written."""
        return sum(s.cost_usd for rows in (self._pending, self._in_flight) for s in rows
                   if (s.key_id if scope == "key" else s.team_id) == ident and day_of(s.at) >= since)

    async def reload_totals(self) -> None:
        """The period totals from the roll-ups (which include other replicas' rows); no batch commits meanwhile."""
        now = self._clock()
        firsts = {period: first_day(period, now) for period in PERIODS}
        async with self._flush_lock:
            self._totals.replace(firsts, await self._store.period_totals(firsts))  # type: ignore[arg-type]
        self._next_reload = now + TOTALS_RELOAD_S

    async def period_spend_exact(self, scope: Literal["key", "team"], ident: str, period: Period) -> float:
        """`period_spend` read from the database now: the roll-ups plus rows still queued here.
        Consistent: no batch commits while it reads."""
        since = first_day(period, self._clock())
        async with self._flush_lock:
            stored = await self._store.period_total(scope, ident, since)
            queued = self._queued(scope, ident, since)
        return stored + queued

    async def purge_expired(self) -> int:
        """Delete request rows older than `retention_days` (roll-ups stay); the rows deleted."""
        days = self._config.retention_days
        if days is None:
            return 0
        return await self._store.purge_before(self._clock() - days * SECONDS_PER_DAY, RETENTION_CHUNK_ROWS,
                                              RETENTION_MAX_CHUNKS)

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        self._stopping = False
        await self.reload_totals()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Write everything still queued (graceful shutdown), then close the writer."""
        task, self._task = self._task, None
        if task is not None:
            self._stopping = True
            self._wake.set()
            try:
                await asyncio.wait_for(task, STOP_TIMEOUT_S)
            except Exception:
                log.exception("spend log: %d rows not written at shutdown", len(self._pending))
        await self._store.close()

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await asyncio.wait_for(self._wake.wait(), self._config.flush_interval_s)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.flush()
                if len(self._pending) >= self._batch_rows:
                    self._wake.set()  # a full batch came in meanwhile: write it without waiting a tick
                if self._clock() >= self._next_reload:
                    await self.reload_totals()
                if self._clock() >= self._next_retention:
                    self._next_retention = self._clock() + RETENTION_EVERY_S
                    await self.purge_expired()
            except Exception:  # the database is away: rows wait in the queue (bounded) for the next tick
                log.exception("spend log: flush failed, %d rows queued", len(self._pending))
            if self.dropped != self._dropped_logged:
                log.warning("spend log: %d rows dropped so far (queue full at %d rows)", self.dropped,
                            self._queue_rows)
                self._dropped_logged = self.dropped
        await self.flush()
