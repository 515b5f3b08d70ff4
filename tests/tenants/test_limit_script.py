"""The limiter's batch script against the machine's real Redis: a budget counter keeps the expiry it was
created with while requests count on it, and a concurrency lease whose holder never gave it back is
swept once the set is full and the lease has expired."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import redis.asyncio as aioredis

from sits.tenants.limit_plan import BUDGET, CONCURRENCY, Check, Denied, Reservation
from sits.tenants.limiter import Limiter
from sits.tenants.redis_wire import RedisWire
from tests.api.cluster_harness import RedisServer
from tests.tenants.conftest import REDIS_URL


def _prefix() -> str:
    return f"sits:test:{uuid.uuid4().hex}:"


@asynccontextmanager
async def _on_redis(key: str, **limiter_args: float) -> AsyncIterator[tuple[Limiter, aioredis.Redis]]:
    """A limiter on the real Redis and a plain client to look at `key` with; `key` deleted after."""
    # Every request on Redis (no credits): these tests are of the script's per-request admission.
    limiter = Limiter(RedisWire(REDIS_URL), lambda: ["replica-a"], credit_s=None,  # type: ignore[arg-type]
                      **limiter_args)
    plain = aioredis.from_url(REDIS_URL)
    try:
        yield limiter, plain
    finally:
        await plain.delete(key)
        await plain.aclose()
        await limiter.close()


async def test_a_budget_counter_counts_in_place_and_keeps_the_expiry_it_was_created_with():
    key = _prefix() + "b"
    period_end_ms = int(time.time() * 1000) + 3_600_000
    async with _on_redis(key) as (limiter, plain):
        plan = limiter.plan([Check(BUDGET, "key", key, 10_000, seed=500, period_end_ms=period_end_ms)])
        first = await limiter.admit(plan, 0, 1_000)
        assert isinstance(first, Reservation) and list(first.budget_spent) == [500]  # seeded from the spend log
        created_ttl = await plain.pttl(key)
        expected = period_end_ms + 86_400_000 - int(time.time() * 1000)
        assert abs(created_ttl - expected) < 5_000
        second = await limiter.admit(plan, 0, 2_000)
        assert isinstance(second, Reservation) and list(second.budget_spent) == [1_500]
        assert int(await plain.get(key)) == 3_500
        assert abs(await plain.pttl(key) - created_ttl) < 5_000  # counted in place: the expiry stays
        # 3,500 of 10,000 spent: a request is admitted on what is spent before it, the next one refused
        assert isinstance(await limiter.admit(plan, 0, 7_000), Reservation)
        assert isinstance(await limiter.admit(plan, 0, 1), Denied)


async def test_counting_alone_starts_from_the_budget_redis_last_answered():
    # The budget values of Redis's answers are read only when Redis is lost: counting alone then starts
    # from the last one (with its reservation), not from the period's seed.
    server = RedisServer()
    server.start()
    limiter = Limiter(RedisWire(server.url, timeout_s=0.3), lambda: ["replica-a"], retry_redis_s=60,
                      credit_s=None)
    try:
        plan = limiter.plan([Check(BUDGET, "key", _prefix() + "b", 10_000, period_end_ms=0)])
        assert isinstance(await limiter.admit(plan, 0, 1_000), Reservation)
        second = await limiter.admit(plan, 0, 3_000)
        assert isinstance(second, Reservation) and second.budget_spent == [1_000]
        server.stop()
        # 4,000 spent on Redis: alone, 6,000 more are admitted (the request starts under the limit), then none
        third = await limiter.admit(plan, 0, 7_000)
        assert limiter.mode == "fallback"
        assert isinstance(third, Reservation) and third.backend == "local" and third.budget_spent == [4_000]
        assert isinstance(await limiter.admit(plan, 0, 1), Denied)
    finally:
        server.stop()
        await limiter.close()


async def test_an_expired_lease_is_swept_when_the_set_is_full():
    key = _prefix() + "c"
    async with _on_redis(key, lease_s=0.3) as (limiter, plain):
        plan = limiter.plan([Check(CONCURRENCY, "key", key, 2)])
        # two requests whose replica died with them: their leases are never given back
        assert isinstance(await limiter.admit(plan, 0, 0), Reservation)
        assert isinstance(await limiter.admit(plan, 0, 0), Reservation)
        assert isinstance(await limiter.admit(plan, 0, 0), Denied)  # both leases still alive
        await asyncio.sleep(0.4)  # past the lease
        fourth = await limiter.admit(plan, 0, 0)
        assert isinstance(fourth, Reservation)
        assert await plain.zrange(key, 0, -1) == [limiter.lease_id(fourth).encode()]  # the dead leases were swept


async def _script_calls(plain: aioredis.Redis) -> int:
    stats = await plain.info("commandstats")
    return sum(int((stats.get(name) or {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval"))


async def test_a_full_batch_goes_at_once_and_the_rest_with_the_loop_turn():
    # Redis works on a full batch while the gateway reads on: five admissions of one loop turn with
    # max_batch 2 are three script calls (2, 2, then the last one at the turn's end), all admitted.
    key = _prefix() + "c"
    async with _on_redis(key, max_batch=2) as (limiter, plain):
        plan = limiter.plan([Check(CONCURRENCY, "key", key, 100)])
        assert isinstance(await limiter.admit(plan, 0, 0), Reservation)  # the script is loaded
        before = await _script_calls(plain)
        outcomes = await asyncio.gather(*(limiter.admit(plan, 0, 0) for _ in range(5)))
        assert all(isinstance(o, Reservation) for o in outcomes)
        assert await _script_calls(plain) - before == 3


async def test_an_admission_whose_request_went_away_gives_back_what_it_took():
    # A request cancelled while its batch is on the way to Redis (its client gone): the script has taken its
    # lease and its budget by the time the answer comes, so the limiter gives them back at once, instead of
    # holding the lease until it expires and the reservation for good.
    key, budget = _prefix() + "c", _prefix() + "b"
    async with _on_redis(key) as (limiter, plain):
        plan = limiter.plan([Check(CONCURRENCY, "key", key, 1), Check(BUDGET, "key", budget, 1e12, period_end_ms=0)])
        warm = await limiter.admit(plan, 0, 0)  # the script loaded
        assert isinstance(warm, Reservation)
        limiter.settle(warm, 0, 0)  # its lease given back (with the next call)
        gone = asyncio.get_running_loop().create_task(limiter.admit(plan, 0, 5_000))
        await asyncio.sleep(0)  # it waits for its batch's answer, which is on its way
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        # Once its answer is back, the lease goes back with the next call: concurrency 1 admits again (without
        # the give-back, not for the lease's 600 s).
        deadline = time.monotonic() + 5.0
        while isinstance(outcome := await limiter.admit(plan, 0, 0), Denied) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert isinstance(outcome, Reservation)
        assert int(await plain.get(budget)) == 0  # the 5,000 nano-USD it reserved were given back
        await plain.delete(budget)
