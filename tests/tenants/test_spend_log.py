"""The spend log on SQLite and PostgreSQL: batches, roll-ups, replays counted once, flush on stop, a
full queue that drops instead of blocking, period sums with queued rows, retention, report pages, and a
kill -9 of a process holding rows that were never flushed."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from sits.errors import InvalidRequest
from sits.tenants.config import SpendLogConfig
from sits.tenants.periods import day_of
from sits.tenants.records import SpendRecord, Usage
from sits.tenants.spend_log import SpendLog
from sits.tenants.spend_store import SpendStore
from sits.tenants.store import TenantStore, open_database
from tests.tenants.databases import database_url_fixture, pg_database_fixture  # noqa: F401  (fixtures)
from tests.tenants.spend_child import spend as child_spend

NOW = 1_800_000_000.0  # 2027-01-15, a Friday
REPO = Path(__file__).resolve().parents[2]


def spend(i: int, *, key: str = "key_a", team: str = "team_a", model: str = "m1", at: float = NOW,
          cost: float = 0.01) -> SpendRecord:
    return SpendRecord(request_id=f"r{i}", at=at, key_id=key, team_id=team, user="u1", model=model, endpoint="e1",
                       usage=Usage(input_tokens=100, cached_input_tokens=40, output_tokens=20, reasoning_tokens=5),
                       cost_usd=cost, latency_ms=50.0, status=200, cache_hit=i % 2 == 0, fallback=False)


@pytest.fixture
async def spend_store(database_url):
    store = TenantStore(open_database(database_url))
    await store.start()
    yield SpendStore(store.db)
    await store.close()


class CountingStore:
    """A SpendStore that counts the batches it was handed."""

    def __init__(self, inner: SpendStore) -> None:
        self.inner = inner
        self.batches: list[int] = []

    async def write(self, rows):  # type: ignore[no-untyped-def]
        self.batches.append(len(rows))
        return await self.inner.write(rows)

    def __getattr__(self, name):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)


async def totals(store: SpendStore) -> tuple[int, int, float, int, float]:
    """(spend rows, their input tokens, their cost, roll-up requests, roll-up cost)."""
    (rows, tokens, cost), = await store.db.fetch("SELECT count(*), coalesce(sum(input_tokens), 0), "
                                                 "coalesce(sum(cost_usd), 0) FROM spend")
    (requests, rolled), = await store.db.fetch("SELECT coalesce(sum(requests), 0), coalesce(sum(cost_usd), 0) "
                                               "FROM spend_daily")
    return int(rows), int(tokens), round(float(cost), 6), int(requests), round(float(rolled), 6)


async def test_batches_and_roll_ups_and_a_replay_counts_once(spend_store):
    counting = CountingStore(spend_store)
    log = SpendLog(counting, SpendLogConfig(batch_rows=10), clock=lambda: NOW)  # type: ignore[arg-type]
    for i in range(25):
        log.record(spend(i, model="m1" if i < 20 else "m2"))
    assert log.pending == 25
    assert await log.flush() == 25
    assert counting.batches == [10, 10, 5] and log.pending == 0 and log.written == 25
    assert await totals(spend_store) == (25, 2500, 0.25, 25, 0.25)
    for i in range(20, 30):  # r20..r24 again (a replay) and five new ones
        log.record(spend(i, model="m2"))
    log.record(spend(29, model="m2"))  # twice in one batch
    await log.flush()
    assert log.written == 30
    assert await totals(spend_store) == (30, 3000, 0.30, 30, 0.30)
    page = await spend_store.report("model")
    assert [(r["model"], r["requests"], r["cached_input_tokens"], r["reasoning_tokens"]) for r in page.rows] == \
        [("m1", 20, 800, 100), ("m2", 10, 400, 50)]


async def test_graceful_stop_writes_everything_queued(spend_store):
    log = SpendLog(spend_store, SpendLogConfig(flush_interval_s=3600, batch_rows=7))
    await log.start()
    for i in range(30):
        log.record(spend(i))
    await log.stop()
    assert log.pending == 0
    assert (await totals(spend_store))[0] == 30


async def test_a_full_queue_drops_and_counts_and_never_blocks(spend_store):
    log = SpendLog(spend_store, SpendLogConfig(queue_rows=5, batch_rows=2))
    for i in range(8):
        log.record(spend(i))  # synchronous: returns at once, full or not
    assert (log.pending, log.dropped) == (5, 3)
    await log.flush()
    assert (await totals(spend_store))[0] == 5


async def test_a_failed_batch_goes_back_to_the_front_of_the_queue(spend_store):
    class Failing:
        def __init__(self) -> None:
            self.fail = True

        async def write(self, rows):  # type: ignore[no-untyped-def]
            if self.fail:
                raise ConnectionError("database away")
            return await spend_store.write(rows)

    failing = Failing()
    log = SpendLog(failing, SpendLogConfig(batch_rows=3))  # type: ignore[arg-type]
    for i in range(5):
        log.record(spend(i))
    with pytest.raises(ConnectionError):
        await log.flush()
    assert log.pending == 5 and log.failed_flushes == 1
    failing.fail = False
    await log.flush()
    rows = await spend_store.db.fetch("SELECT request_id FROM spend ORDER BY request_id")
    assert [r[0] for r in rows] == ["r0", "r1", "r2", "r3", "r4"]


async def test_period_spend_sums_roll_ups_and_rows_still_queued(spend_store):
    log = SpendLog(spend_store, SpendLogConfig(), clock=lambda: NOW)
    other = SpendLog(spend_store, SpendLogConfig(), clock=lambda: NOW)  # another replica on the same database
    day = 86_400
    other.record(spend(0, at=NOW, cost=32.0))
    await other.flush()
    await log.reload_totals()  # what a start does
    log.record(spend(1, at=NOW, cost=1.0))
    log.record(spend(2, at=NOW - 2 * day, cost=2.0))  # Wednesday: this week, this month
    log.record(spend(3, at=NOW - 20 * day, cost=4.0))  # last month
    log.record(spend(4, at=NOW, cost=8.0, key="key_b", team="team_b"))
    await log.flush()
    log.record(spend(5, at=NOW, cost=16.0))  # queued, not yet written
    expected = {("key", "key_a", "daily"): 49.0, ("key", "key_a", "weekly"): 51.0,
                ("key", "key_a", "monthly"): 51.0, ("key", "key_a", "total"): 55.0,
                ("team", "team_b", "daily"): 8.0, ("team", "nobody", "total"): 0.0}
    for (scope, ident, period), usd in expected.items():
        assert await log.period_spend_exact(scope, ident, period) == usd, (scope, ident, period)
        assert log.period_spend(scope, ident, period) == usd, (scope, ident, period)  # in memory, no I/O
    other.record(spend(6, at=NOW, cost=64.0))
    await other.flush()
    assert log.period_spend("key", "key_a", "daily") == 49.0  # another replica's rows: at the next reload
    await log.reload_totals()
    assert log.period_spend("key", "key_a", "daily") == 113.0


async def test_period_spend_counts_a_batch_while_it_is_being_written(spend_store):
    class Slow:
        def __init__(self) -> None:
            self.go = asyncio.Event()

        async def write(self, rows):  # type: ignore[no-untyped-def]
            await self.go.wait()
            return await spend_store.write(rows)

        async def period_totals(self, first_days):  # type: ignore[no-untyped-def]
            return await spend_store.period_totals(first_days)

    slow = Slow()
    log = SpendLog(slow, SpendLogConfig(), clock=lambda: NOW)  # type: ignore[arg-type]
    await log.reload_totals()
    log.record(spend(1, cost=3.0))
    flushing = asyncio.create_task(log.flush())
    await asyncio.sleep(0.01)
    assert log.pending == 0  # taken off the queue, not committed yet
    assert log.period_spend("key", "key_a", "daily") == 3.0
    slow.go.set()
    await flushing
    assert log.period_spend("key", "key_a", "daily") == 3.0  # committed: counted once


async def test_period_totals_start_again_when_the_period_rolls_over(spend_store):
    now = [NOW]
    log = SpendLog(spend_store, SpendLogConfig(), clock=lambda: now[0])
    await log.reload_totals()
    log.record(spend(1, at=NOW, cost=1.0))
    await log.flush()
    assert log.period_spend("key", "key_a", "daily") == 1.0
    now[0] = NOW + 86_400  # the next day (a Saturday: same week)
    assert log.period_spend("key", "key_a", "daily") == 0.0
    assert log.period_spend("key", "key_a", "weekly") == 1.0
    log.record(spend(2, at=now[0], cost=2.0))
    await log.flush()
    assert (log.period_spend("key", "key_a", "daily"), log.period_spend("key", "key_a", "weekly")) == (2.0, 3.0)


async def test_retention_deletes_old_request_rows_in_chunks_and_keeps_roll_ups(spend_store):
    log = SpendLog(spend_store, SpendLogConfig(retention_days=30), clock=lambda: NOW)
    for i in range(12):
        log.record(spend(i, at=NOW - 40 * 86_400 if i < 9 else NOW))
    await log.flush()
    assert await spend_store.purge_before(NOW - 30 * 86_400, chunk_rows=4, max_chunks=1) == 4  # bounded
    assert await log.purge_expired() == 5
    rows, _, _, requests, _ = await totals(spend_store)
    assert (rows, requests) == (3, 12)


async def test_reports_page_with_a_cursor_and_filter(spend_store):
    log = SpendLog(spend_store, SpendLogConfig(), clock=lambda: NOW)
    for i in range(7):
        log.record(spend(i, key=f"key_{i}", team="team_x" if i < 5 else "team_y", at=NOW - (i % 3) * 86_400))
    await log.flush()
    seen, cursor = [], None
    for _ in range(10):
        page = await spend_store.report("key", team_id="team_x", limit=2, cursor=cursor)
        seen += [(r["key"], r["team"]) for r in page.rows]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [(f"key_{i}", "team_x") for i in range(5)]
    days = await spend_store.report("day", from_day=day_of(NOW) - 1, to_day=day_of(NOW))
    assert [(r["day"], r["requests"]) for r in days.rows] == [(day_of(NOW) - 1, 2), (day_of(NOW), 3)]
    with pytest.raises(InvalidRequest):
        await spend_store.report("day", cursor="not-a-cursor")


async def _lines(stream: asyncio.StreamReader, until: int, seen: dict[str, int]) -> None:
    while seen["commits"] < until:
        line = await stream.readline()
        if not line:
            return
        word, _, number = line.decode().partition(" ")
        seen[word] = max(seen.get(word, 0), int(number))
        seen["commits"] += word == "committed"


async def test_kill_9_loses_only_rows_after_the_last_commit_and_a_restart_counts_nothing_twice(database_url):
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.tenants.spend_child", database_url, cwd=REPO,
        env={**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}, stdout=asyncio.subprocess.PIPE)
    seen = {"commits": 0, "recording": 0, "committed": 0}
    try:
        await asyncio.wait_for(_lines(child.stdout, 5, seen), 60)
    finally:
        child.send_signal(signal.SIGKILL)
        rest, _ = await child.communicate()
    for line in rest.decode().splitlines():  # what it said before it died
        word, _, number = line.partition(" ")
        seen[word] = max(seen.get(word, 0), int(number))
    assert seen["commits"] >= 5, "the child did not commit five batches"
    store = TenantStore(open_database(database_url))
    await store.start()
    spend_store = SpendStore(store.db)
    try:
        ids = [int(r[0].removeprefix("req-")) for r in await store.db.fetch("SELECT request_id FROM spend")]
        stored = len(ids)
        # Every row reported committed is there, and what is there is a prefix: only the tail was lost.
        assert stored >= seen["committed"] and sorted(ids) == list(range(stored))
        announced = seen["recording"]
        assert stored <= announced
        rows, _, cost, requests, rolled = await totals(spend_store)
        assert (requests, rolled) == (rows, cost)  # no batch half in
        # Restart and replay every row the child may have recorded: each counted once.
        log = SpendLog(spend_store, SpendLogConfig(batch_rows=1000))
        for seq in range(announced):
            log.record(child_spend(seq))
        await log.flush()
        assert log.written == announced - stored
        rows, _, cost, requests, rolled = await totals(spend_store)
        assert rows == requests == announced and rolled == cost
    finally:
        await store.close()
