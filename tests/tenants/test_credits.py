"""Per-replica credits (tenants/credits.py) against the machine's real Redis: requests of a plan whose
limits are all large are admitted in memory on a grant taken in advance, replicas sharing one limit stay
within the bounds of per-request admission, and what a credit did not use goes back to Redis exactly."""

from __future__ import annotations

import asyncio
import math
import re
import time
import uuid
from collections.abc import Sequence

import aiohttp
import redis.asyncio as aioredis

from sits.tenants.credits import FIRST_GRANT, FIRST_SLOTS
from sits.tenants.limit_plan import BUDGET, CONCURRENCY, RATE, TOKENS, WINDOW_MS, Check, Denied, Reservation
from sits.tenants.limit_scripts import BATCH
from sits.tenants.limiter import Limiter
from sits.tenants.redis_wire import RedisWire
from tests.api.cluster_harness import RedisServer
from sits.tenants.records import Budget, Limits
from tests.tenants.conftest import REDIS_URL, Keys, Spend, client, tenant_config
from tests.tenants.test_limit_batching import CountingRelay

_REPLICAS = ["replica-a", "replica-b", "replica-c"]


def _prefix() -> str:
    return f"sits:test:{uuid.uuid4().hex}:"


def _limiter(url: str = REDIS_URL, replicas: Sequence[str] = ("replica-a",), **args: float | None) -> Limiter:
    """A limiter on `url`; its credits live 5 s unless told (longer than any of these tests' steps, however
    slow the machine: a credit that ended early would only send requests to Redis one by one)."""
    args.setdefault("credit_s", 5.0)
    return Limiter(RedisWire(url), lambda: list(replicas), **args)  # type: ignore[arg-type]


async def _clean(prefix: str) -> None:
    plain = aioredis.from_url(REDIS_URL)
    try:
        keys = [k async for k in plain.scan_iter(match=prefix + "*")]
        if keys:
            await plain.delete(*keys)
    finally:
        await plain.aclose()


async def test_large_limits_are_admitted_on_credit_and_what_it_did_not_use_goes_back_exactly():
    prefix = _prefix()
    budget = f"{prefix}b"
    limiter = _limiter()
    plain = aioredis.from_url(REDIS_URL)
    try:
        plan = limiter.plan([Check(RATE, "key", f"{prefix}r", 60_000), Check(TOKENS, "key", f"{prefix}t", 10_000_000),
                             Check(CONCURRENCY, "key", f"{prefix}c", 100),
                             Check(BUDGET, "key", budget, 10**12, period_end_ms=0)])
        assert plan.creditable
        first = await limiter.admit(plan, 100, 1_000)
        assert isinstance(first, Reservation) and first.backend == "redis"  # the grant rode with it
        assert plan.credit is not None and plan.credit.granted == FIRST_GRANT
        # The grant's slots are leases like any other: the set counts them with the first request's.
        assert await plain.zcard(f"{prefix}c") == 1 + FIRST_SLOTS
        assert int(await plain.get(budget)) == 1_000 + FIRST_GRANT * 1_000
        on_credit = [limiter.reserve(plan, 100, 1_000) for _ in range(5)]
        assert all(isinstance(r, Reservation) and r.backend == "credit" for r in on_credit)
        # Each used 60 tokens and 700 nano-USD of what it reserved; the first request the same, on Redis.
        for r in [first, *on_credit]:
            limiter.settle(r, -40, -300)  # type: ignore[arg-type]
        await limiter.close()  # the credit ends: what it did not use goes back with the last settlement
        assert await plain.zcard(f"{prefix}c") == 0
        assert int(await plain.get(budget)) == 6 * 700  # exactly what the six requests cost
        usage = await _limiter().usage([Check(TOKENS, "key", f"{prefix}t", 10_000_000),
                                        Check(RATE, "key", f"{prefix}r", 60_000)])
        assert usage[0] is not None and usage[0] <= 6 * 60 + 1  # tokens in use over the minute: what was used
        assert usage[1] is not None and usage[1] <= 6 + 1
        assert limiter.describe()["credits"]["requests_on_credit"] == 5
    finally:
        await limiter.close()
        await plain.aclose()
        await _clean(prefix)


async def test_small_limits_are_admitted_request_by_request():
    prefix = _prefix()
    limiter = _limiter()
    try:
        plan = limiter.plan([Check(RATE, "key", f"{prefix}r", 599)])
        assert not plan.creditable
        for _ in range(3):
            admitted = await limiter.admit(plan, 0, 0)
            assert isinstance(admitted, Reservation) and admitted.backend == "redis"
        assert limiter.describe()["credits"]["grants"] == 0 and plan.credit is None
    finally:
        await limiter.close()
        await _clean(prefix)


async def test_a_grant_is_refused_near_the_limit_and_requests_go_one_by_one():
    prefix = _prefix()
    check = Check(RATE, "key", f"{prefix}r", 600)
    alone = _limiter(credit_s=None)
    # The 5 s lifetime keeps 5 s of the minute from grants: the refusal does not depend on how long the
    # 590 admissions took (the minute gives back one unit a 100 ms meanwhile).
    limiter = _limiter()
    try:
        plan = alone.plan([check])
        taken = await asyncio.gather(*(alone.admit(plan, 0, 0) for _ in range(590)))  # 590 of the minute's 600
        assert all(isinstance(t, Reservation) for t in taken)
        credited = limiter.plan([check])
        admitted = await limiter.admit(credited, 0, 0)
        # about 9 left, less the 5 s margin: nothing a grant may take
        assert isinstance(admitted, Reservation) and admitted.backend == "redis"
        assert limiter.describe()["credits"]["grants_refused"] == 1 and credited.credit is None
        again = await limiter.admit(credited, 0, 0)
        assert isinstance(again, Reservation) and again.backend == "redis"
        assert limiter.describe()["credits"]["grants"] == 1  # not asked again within credit_s of the refusal
    finally:
        await alone.close()
        await limiter.close()
        await _clean(prefix)


async def test_three_replicas_on_credit_admit_no_more_than_the_shared_rate_limit():
    prefix = _prefix()
    limit = 600
    limiters = [_limiter(replicas=_REPLICAS) for _ in _REPLICAS]
    try:
        plans = [lim.plan([Check(RATE, "key", f"{prefix}r", limit)]) for lim in limiters]
        started = time.monotonic()
        admitted = on_credit = 0
        for _ in range(40):  # bounded: 40 rounds of 10 requests on each replica, 1,200 in all
            outcomes = await asyncio.gather(*(lim.admit(plan, 0, 0) for lim, plan in zip(limiters, plans)
                                              for _ in range(10)))
            admitted += sum(isinstance(o, Reservation) for o in outcomes)
            on_credit += sum(isinstance(o, Reservation) and o.backend == "credit" for o in outcomes)
        for lim in limiters:
            await lim.close()  # their credits' unused units go back
        # What is left of the minute goes to requests one by one (a limiter without credits).
        last = _limiter(replicas=_REPLICAS, credit_s=None)
        try:
            plan = last.plan([Check(RATE, "key", f"{prefix}r", limit)])
            for _ in range(limit):
                if isinstance(await last.admit(plan, 0, 0), Denied):
                    break
                admitted += 1
        finally:
            await last.close()
        elapsed_ms = (time.monotonic() - started) * 1000
        # Per-request GCRA admits at most the limit at once plus what the minute gives back meanwhile;
        # credits keep that bound, and nothing they held is lost: the limit is reached.
        assert on_credit > 0
        assert limit <= admitted <= limit + math.ceil(limit * elapsed_ms / WINDOW_MS) + 1
    finally:
        for lim in limiters:
            await lim.close()
        await _clean(prefix)


async def test_concurrency_on_credit_across_three_replicas_holds_the_limit_and_every_slot_comes_back():
    prefix = _prefix()
    key = f"{prefix}c"
    limiters = [_limiter(replicas=_REPLICAS) for _ in _REPLICAS]
    plain = aioredis.from_url(REDIS_URL)
    try:
        plans = [lim.plan([Check(CONCURRENCY, "key", key, 40)]) for lim in limiters]
        held: list[tuple[Limiter, Reservation]] = []
        for _ in range(10):  # bounded: 10 rounds of 10 on each replica, none settled
            outcomes = await asyncio.gather(*(lim.admit(plan, 0, 0) for lim, plan in zip(limiters, plans)
                                              for _ in range(10)))
            held += [(lim, o) for lim, o in zip([lim for lim in limiters for _ in range(10)], outcomes)
                     if isinstance(o, Reservation)]
        assert 0 < len(held) <= 40
        assert any(r.backend == "credit" for _, r in held)
        assert await plain.zcard(key) <= 40
        for lim, r in held:
            lim.settle(r, 0, 0)
        for lim in limiters:
            await lim.close()
        assert await plain.zcard(key) == 0
    finally:
        for lim in limiters:
            await lim.close()
        await plain.aclose()
        await _clean(prefix)


async def test_a_hard_budget_across_three_replicas_on_credit_is_overspent_by_at_most_one_reservation():
    prefix = _prefix()
    key = f"{prefix}b"
    hard, reserve, cost = 2_000_000, 10_000, 7_000
    limiters = [_limiter(replicas=_REPLICAS) for _ in _REPLICAS]
    plain = aioredis.from_url(REDIS_URL)
    try:
        plans = [lim.plan([Check(BUDGET, "key", key, hard, period_end_ms=0)]) for lim in limiters]
        admitted = on_credit = 0
        for _ in range(20):  # bounded: 20 rounds of 10 on each replica, each settled at its actual cost
            pairs = [(lim, plan) for lim, plan in zip(limiters, plans) for _ in range(10)]
            outcomes = await asyncio.gather(*(lim.admit(plan, 0, reserve) for lim, plan in pairs))
            for (lim, _), o in zip(pairs, outcomes):
                if isinstance(o, Reservation):
                    admitted += 1
                    on_credit += o.backend == "credit"
                    lim.settle(o, 0, cost - reserve)
        for lim in limiters:
            await lim.close()
        spent = int(await plain.get(key))
        assert on_credit > 0
        assert spent == admitted * cost  # every grant and give-back added up: the counter is the spend
        assert spent <= hard + reserve
    finally:
        for lim in limiters:
            await lim.close()
        await plain.aclose()
        await _clean(prefix)


async def test_a_changed_limit_is_not_admitted_on_the_old_plans_credit():
    prefix = _prefix()
    limiter = _limiter()
    try:
        old = limiter.plan([Check(RATE, "key", f"{prefix}r", 6_000)])
        await limiter.admit(old, 0, 0)
        assert old.credit is not None
        new = limiter.plan([Check(RATE, "key", f"{prefix}r", 3_000)])  # the key's record changed: a new plan
        admitted = await limiter.admit(new, 0, 0)
        assert isinstance(admitted, Reservation) and admitted.backend == "redis"
    finally:
        await limiter.close()
        await _clean(prefix)


async def test_requests_on_credit_make_few_script_calls():
    plain = aioredis.from_url(REDIS_URL)
    await plain.script_load(BATCH.source)
    await plain.aclose()
    relay = CountingRelay()
    await relay.start()
    prefix = _prefix()
    limiter = _limiter(f"redis://127.0.0.1:{relay.port}/0")
    try:
        plan = limiter.plan([Check(RATE, "key", f"{prefix}r", 1_000_000), Check(CONCURRENCY, "key", f"{prefix}c", 1_000)])
        for _ in range(400):
            admitted = await asyncio.wait_for(limiter.admit(plan, 0, 0), 5)
            assert isinstance(admitted, Reservation)
            limiter.settle(admitted, 0, 0)
        # Grants double while each is half used in time (16, 32, ... 1,024): a few calls, not 400.
        assert relay.calls <= 20, (relay.calls, limiter.describe()["credits"], plan.grant_size, plan.slot_size)
    finally:
        await limiter.close()
        await relay.close()
        await _clean(prefix)


async def test_credits_are_dropped_when_redis_is_lost_and_come_back_with_it():
    server = RedisServer()
    server.start()
    prefix = _prefix()
    limiter = Limiter(RedisWire(server.url, timeout_s=0.3), lambda: ["replica-a"], retry_redis_s=0.2, credit_s=0.3)
    try:
        plan = limiter.plan([Check(RATE, "key", f"{prefix}r", 60_000)])
        await limiter.admit(plan, 0, 0)
        assert plan.credit is not None
        server.stop()
        # On credit until it ends (its units were taken in Redis), then on this replica's share alone.
        deadline = time.monotonic() + 5
        while (await limiter.admit(plan, 0, 0)).backend != "local":  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        assert limiter.mode == "fallback" and plan.credit is None
        server.start()
        while limiter.mode != "redis":
            assert time.monotonic() < deadline + 5
            await asyncio.sleep(0.05)
        await limiter.admit(plan, 0, 0)
        assert plan.credit is not None  # a new grant on the Redis that came back
        assert isinstance(limiter.reserve(plan, 0, 0), Reservation)
    finally:
        await limiter.close()
        server.stop()


async def test_a_gateway_admits_a_keys_requests_on_credit_and_its_budget_counter_is_the_spend(
        usage_upstream, tenant_gateway):
    # Each answer costs less than it reserved (1 prompt token as estimated, 500 of the 600 output tokens):
    # a request costing more than it reserved ends its plan's credit (a hard budget applies).
    usage_upstream.usage.update(prompt_tokens=1, completion_tokens=500, total_tokens=501)
    keys, spend = Keys(), Spend()
    keys.add("sk-big", "key_big", limits=Limits(rpm=60_000, tpm=100_000_000, concurrency=200),
             budget=Budget("total", hard_usd=1_000.0))
    prefix = _prefix()
    # A lifetime longer than a round of requests on a slow machine: the later rounds find the credit alive.
    raw = tenant_config(usage_upstream.url, prefix=prefix, limits={"credit_s": 5.0})
    gateway = await tenant_gateway(raw, keys, spend)
    sdk = client(gateway, "sk-big")
    try:
        for _ in range(5):  # bounded: 5 rounds of 8 concurrent requests
            answers = await asyncio.gather(*(sdk.chat.completions.create(
                model="m1", messages=[{"role": "user", "content": "hi"}], max_tokens=600) for _ in range(8)))
            assert all(a.usage is not None and a.usage.completion_tokens == 500 for a in answers)
        described = gateway.tenant_gate.gate.limiter.describe()["credits"]
        assert described["grants"] >= 1 and described["requests_on_credit"] > 0
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{gateway.bound_port}/metrics") as r:
                metrics = await r.text()
        on_credit = re.search(r"^sits_limits_credit_admissions_total (\S+)$", metrics, re.M)
        assert on_credit is not None and float(on_credit.group(1)) == described["requests_on_credit"]
        assert re.search(r'^sits_limits_credit_grants_total\{outcome="given"\} [1-9]', metrics, re.M)
    finally:
        await sdk.close()
    await gateway.stop()  # the credit's remainder goes back at shutdown
    records = await spend.wait_for(40)
    plain = aioredis.from_url(REDIS_URL)
    try:
        counters = [k async for k in plain.scan_iter(match=prefix + "b:key:key_big:*")]
        assert len(counters) == 1
        # every request's cost in whole nano-USD: the sum of the records' costs to within a nano-USD each
        assert abs(int(await plain.get(counters[0])) - sum(r.cost_usd for r in records) * 1e9) <= len(records)
    finally:
        await plain.aclose()
        await _clean(prefix)


async def test_a_request_that_cost_more_than_it_reserved_ends_its_plans_credit():
    prefix = _prefix()
    key = f"{prefix}b"
    limiter = _limiter()
    plain = aioredis.from_url(REDIS_URL)
    try:
        plan = limiter.plan([Check(BUDGET, "key", key, 10**12, period_end_ms=0)])
        first = await limiter.admit(plan, 0, 1_000)
        on_credit = limiter.reserve(plan, 0, 1_000)
        assert isinstance(first, Reservation) and isinstance(on_credit, Reservation) and on_credit.backend == "credit"
        limiter.settle(on_credit, 0, 4_000)  # it cost 5,000: the budget may be spent, which only Redis knows
        assert plan.credit is None
        after = await limiter.admit(plan, 0, 1_000)
        assert isinstance(after, Reservation) and after.backend == "redis"
        assert plan.credit is None and limiter.describe()["credits"]["grants"] == 1  # none asked for credit_s
        limiter.settle(first, 0, 0)
        limiter.settle(after, 0, 0)
        await limiter.close()
        assert int(await plain.get(key)) == 1_000 + 5_000 + 1_000  # the credit's remainder back, the overrun charged
    finally:
        await limiter.close()
        await plain.aclose()
        await _clean(prefix)
