"""Budgets against a real Redis: a concurrent burst over two replicas cannot overspend a hard budget
by more than one request's reservation; streams settle on the usage of their last event (or on the
text they streamed, counted, when the upstream sends no usage); a period's counter starts from what the
spend log says."""

from __future__ import annotations

import asyncio
import time

import openai
import pytest
import redis.asyncio as redis_async

from sits.tenants.budget import NANO, period_window
from sits.tenants.pricing import cost_usd
from sits.tenants.records import Budget, Price, Usage
from tests.api.cluster_harness import eventually
from tests.conftest import PER_STREAM, left_for_the_collector
from tests.tenants.conftest import REDIS_URL, Keys, Spend, client, tenant_config

PRICE = Price(input=3.0, output=15.0)
PROMPT = "x" * 40  # 11 tokens by the chars/4 estimate; the upstream reports 10


async def _counter(prefix: str, key_id: str, period: str = "daily") -> float:
    window = period_window(period, time.time())  # type: ignore[arg-type]
    r = redis_async.from_url(REDIS_URL)
    try:
        value = await r.get(f"{prefix}b:key:{key_id}:{window.label}")
    finally:
        await r.aclose()
    return int(value) / NANO if value is not None else 0.0


async def test_a_concurrent_burst_overspends_a_hard_budget_by_at_most_one_reservation(usage_upstream,
                                                                                     tenant_gateway):
    usage_upstream.usage.update(prompt_tokens=10, completion_tokens=500, total_tokens=510)
    usage_upstream.delay_s = 0.3  # every request of the burst is admitted before any settles
    keys, spend = Keys(), Spend()
    hard = 0.05
    keys.add("sk-burst", "key_burst", budget=Budget("daily", hard_usd=hard))
    raw = tenant_config(usage_upstream.url, price={"input": 3.0, "output": 15.0})
    prefix = raw["tenants"]["limits"]["key_prefix"]
    replicas = [await tenant_gateway(raw, keys, spend, name=f"r{i}") for i in range(2)]
    clients = [client(g, "sk-burst") for g in replicas]
    try:
        async def one(i: int) -> bool:
            try:
                await clients[i % 2].chat.completions.create(
                    model="m1", messages=[{"role": "user", "content": PROMPT}], max_tokens=500)
                return True
            except openai.RateLimitError as exc:
                assert exc.body["param"] == "budget"
                return False
        admitted = sum(await asyncio.gather(*(one(i) for i in range(30))))
    finally:
        for c in clients:
            await c.close()
    reservation = cost_usd(PRICE, Usage(11, 0, 500, 0))
    actual = cost_usd(PRICE, Usage(10, 0, 500, 0))
    records = await spend.wait_for(30)
    spent = sum(r.cost_usd for r in records)
    assert spent == pytest.approx(admitted * actual)
    assert spent <= hard + reservation  # the bound
    assert admitted == 7  # admitted while spend + reservations < hard: 7 x $0.0075 (not 30, not 6)
    assert sum(1 for r in records if r.status == 429) == 30 - admitted
    await asyncio.sleep(0.3)  # settlements are batched off the request path
    assert await _counter(prefix, "key_burst") == pytest.approx(spent, abs=1e-8)


async def test_streams_settle_on_their_usage_asked_for_if_need_be_or_on_their_counted_text(usage_upstream, tenant_gateway):
    usage_upstream.usage.update(prompt_tokens=10, completion_tokens=3, total_tokens=13)
    keys, spend = Keys(), Spend()
    keys.add("sk-s", "key_s", budget=Budget("monthly", soft_usd=100.0))
    raw = tenant_config(usage_upstream.url, price={"input": 3.0, "output": 15.0})
    prefix = raw["tenants"]["limits"]["key_prefix"]
    gateway = await tenant_gateway(raw, keys, spend)
    async with client(gateway, "sk-s") as c:
        stream = await c.chat.completions.create(model="m1", messages=[{"role": "user", "content": PROMPT}],
                                                 stream=True, stream_options={"include_usage": True},
                                                 max_tokens=400)
        chunks = [chunk async for chunk in stream]
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
        records = await spend.wait_for(1)
        assert records[0].usage == Usage(10, 0, 3, 0)
        assert records[0].cost_usd == pytest.approx(cost_usd(PRICE, Usage(10, 0, 3, 0)))
        # the reservation (11 prompt + 400 output tokens) was corrected to the actual cost (batched off the
        # request path; the grant of the key's credit taken with it given back when the credit ends)
        first_cost = records[0].cost_usd

        async def corrected() -> bool:
            return await _counter(prefix, "key_s", "monthly") == pytest.approx(first_cost, abs=1e-8)
        await eventually(corrected, 5, "the first stream's reservation corrected")
        # the client did not ask for usage: the gateway asks the upstream for it, settles on it, and
        # takes the usage event out of what the client gets
        stream = await c.chat.completions.create(model="m1", messages=[{"role": "user", "content": PROMPT}],
                                                 stream=True, max_tokens=400)
        chunks = [chunk async for chunk in stream]
        assert len(chunks) == 3 and all(chunk.usage is None and chunk.choices for chunk in chunks)
        assert usage_upstream.bodies[-1]["stream_options"] == {"include_usage": True}
        records = await spend.wait_for(2)
        assert records[1].usage == Usage(10, 0, 3, 0) and records[1].status == 200
        # an upstream that sends no usage at all: the streamed text is counted ("t0 t1 t2 ": 3 tokens by
        # the chars / 4 estimate, no tokenizer loaded here), not the 400 reserved
        usage_upstream.streams_usage = False
        stream = await c.chat.completions.create(model="m1", messages=[{"role": "user", "content": PROMPT}],
                                                 stream=True, max_tokens=400)
        assert len([chunk async for chunk in stream]) == 3
        records = await spend.wait_for(3)
        assert records[2].usage == Usage(11, 0, 3, 0) and records[2].status == 200
        spent = sum(r.cost_usd for r in records)

        async def settled() -> bool:  # batched off the request path; a credit's remainder back when it ends
            return await _counter(prefix, "key_s", "monthly") == pytest.approx(spent, abs=1e-8)
        await eventually(settled, 5, "the counter settled to the spend")


async def test_a_period_counter_starts_from_the_spend_already_logged(usage_upstream, tenant_gateway):
    keys, spend = Keys(), Spend()
    keys.add("sk-seed", "key_seed", budget=Budget("weekly", hard_usd=1.0))
    asked: list[tuple[str, str, str]] = []

    def period_spend(scope: str, scope_id: str, period: str) -> float:
        asked.append((scope, scope_id, period))
        return 0.999

    gateway = await tenant_gateway(tenant_config(usage_upstream.url), keys, spend, period_spend=period_spend)
    async with client(gateway, "sk-seed") as c:
        await c.chat.completions.create(model="m1", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
        await spend.wait_for(1)
        await asyncio.sleep(0.3)
        with pytest.raises(openai.RateLimitError) as caught:
            await c.chat.completions.create(model="m1", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    assert caught.value.body["param"] == "budget"
    assert asked == [("key", "key_seed", "weekly")]  # read once per period, not per request


async def test_with_ask_stream_usage_off_the_body_goes_as_sent_and_the_text_is_counted(usage_upstream, tenant_gateway):
    keys, spend = Keys(), Spend()
    keys.add("sk-o", "key_o", budget=Budget("monthly", soft_usd=100.0))
    gateway = await tenant_gateway(tenant_config(usage_upstream.url, limits={"ask_stream_usage": False}), keys, spend)
    async with client(gateway, "sk-o") as c:
        stream = await c.chat.completions.create(model="m1", messages=[{"role": "user", "content": PROMPT}],
                                                 stream=True, max_tokens=400)
        assert len([chunk async for chunk in stream]) == 3
    assert "stream_options" not in usage_upstream.bodies[-1]
    record = (await spend.wait_for(1))[0]
    assert record.usage == Usage(11, 0, 3, 0)


async def test_keyed_requests_and_streams_leave_nothing_for_the_cyclic_garbage_collector(usage_upstream,
                                                                                        tenant_gateway):
    """A keyed request (limits counted in Redis, a budget, a price) is freed by reference counting when
    it ends, streamed or not: a cycle per request would leave it to the collector, whose passes pause
    the gateway for milliseconds under load."""
    import aiohttp

    usage_upstream.usage.update(prompt_tokens=10, completion_tokens=3, total_tokens=13)
    keys, spend = Keys(), Spend()
    keys.add("sk-g", "key_g", budget=Budget("monthly", soft_usd=100.0))
    gateway = await tenant_gateway(tenant_config(usage_upstream.url, price={"input": 3.0, "output": 15.0}), keys,
                                   spend)
    url = f"http://127.0.0.1:{gateway.bound_port}/v1/chat/completions"
    per_request = PER_STREAM | {"Ticket"}
    async with aiohttp.ClientSession(headers={"authorization": "Bearer sk-g"}) as session:
        async def requests(count: int) -> None:
            for i in range(count):
                body = {"model": "m1", "messages": [{"role": "user", "content": PROMPT}], "stream": i % 2 == 0}
                async with session.post(url, json=body) as r:
                    assert r.status == 200
                    await r.read()

        await requests(4)  # warm-up
        await spend.wait_for(4)

        async def measured() -> None:
            await requests(20)
            await spend.wait_for(24)
            await asyncio.sleep(0.3)  # settlements ride with a later Redis call

        left = await left_for_the_collector(measured)
    assert not left & per_request, f"keyed requests left reference cycles through {sorted(left & per_request)}"
