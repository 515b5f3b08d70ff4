"""Limits shared across replicas through a real Redis: three gateways enforce one rpm limit together;
when Redis dies each replica enforces its share (limit / live replicas from the cluster view), says so
in /v1/cluster and in a metric, and goes back to Redis when it returns, without a restart."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import openai
import pytest

from sits.tenants.records import Limits, TeamRecord
from tests.api.cluster_harness import RedisServer, eventually
from tests.tenants.conftest import REDIS_URL, Keys, Spend, client, tenant_config

ADMIN = {"SITS_ADMIN_KEY": "admin-key"}


async def _admitted(clients: list[openai.AsyncOpenAI], requests: int) -> int:
    async def one(i: int) -> bool:
        try:
            await clients[i % len(clients)].chat.completions.create(
                model="m1", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
            return True
        except openai.RateLimitError as exc:
            assert exc.body["param"] == "rpm"
            return False
    return sum(await asyncio.gather(*(one(i) for i in range(requests))))


async def _cluster(gateway) -> dict:  # type: ignore[no-untyped-def]
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer admin-key"}) as s:
        async with s.get(f"http://127.0.0.1:{gateway.bound_port}/v1/cluster") as r:
            assert r.status == 200
            return await r.json()


async def test_three_replicas_enforce_one_rpm_limit_together(usage_upstream, tenant_gateway):
    keys, spend = Keys(), Spend()
    keys.add("sk-one", "key_one", limits=Limits(rpm=12))
    keys.add("sk-two", "key_two", team_id="team-t")
    keys.add("sk-three", "key_three", team_id="team-t")
    keys.teams["team-t"] = TeamRecord("team-t", "team-t", limits=Limits(rpm=5))
    raw = tenant_config(usage_upstream.url)
    replicas = [await tenant_gateway(raw, keys, spend, name=f"r{i}", secrets=ADMIN) for i in range(3)]
    clients = [client(g, "sk-one") for g in replicas]
    team_clients = [client(g, secret) for g in replicas for secret in ("sk-two", "sk-three")]
    try:
        # 36 requests over three replicas: the key's 12 per minute, not 3 x 12
        admitted = await _admitted(clients, 36)
        assert admitted == 12, [g.tenant_gate.gate.limiter.describe() for g in replicas]
        # two keys of one team over three replicas: the team's 5
        assert await _admitted(team_clients, 30) == 5
    finally:
        for c in clients + team_clients:
            await c.close()
    described = await _cluster(replicas[0])
    assert described["limits"]["mode"] == "redis" and described["limits"]["shared"] is True


async def test_without_redis_each_replica_enforces_its_share_then_goes_back(usage_upstream, tenant_gateway):
    limits_redis = RedisServer()  # our own: this test kills it
    limits_redis.start()
    keys, spend = Keys(), Spend()
    keys.add("sk-f", "key_f", limits=Limits(rpm=10))
    raw = tenant_config(usage_upstream.url, redis_url=limits_redis.url,
                        limits={"retry_redis_s": 0.2, "redis_timeout_s": 1.0})
    # the cluster view (who is live) comes from the shared Redis the replicas replicate through
    raw["cluster"] = {"redis_url": REDIS_URL, "namespace": f"sits:test:{uuid.uuid4().hex[:8]}",
                      "heartbeat_s": 0.2, "anti_entropy_s": 0.5, "persist": False}
    try:
        replicas = [await tenant_gateway(raw, keys, spend, name=f"f{i}", secrets=ADMIN) for i in range(2)]
        await eventually(lambda: _members(replicas), 10, "both replicas see each other")
        clients = [client(g, "sk-f") for g in replicas]
        try:
            assert await _admitted(clients, 6) == 6  # shared in Redis: 6 of the 10
            limits_redis.stop()
            # Redis gone: each of the 2 live replicas admits its share, 10 / 2 = 5, whatever Redis counted
            admitted = [await _admitted([c], 8) for c in clients]
            assert admitted == [5, 5]
            described = await _cluster(replicas[0])
            assert described["limits"]["mode"] == "fallback" and described["limits"]["live_replicas"] == 2
            assert described["limits"]["share"] == 0.5
            metrics = await _metrics(replicas[0])
            assert "sits_limits_shared 0.0" in metrics and "sits_limits_redis_losses_total 1.0" in metrics
            assert 'sits_limits_local_admissions_total{mode="fallback"}' in metrics
            # Redis back (empty: no persistence): shared again after retry_redis_s, no restart
            limits_redis.start()
            for g in replicas:
                await eventually(lambda g=g: _shared(g), 5, "back on Redis")
            assert await _admitted(clients, 14) == 10
            assert "sits_limits_shared 1.0" in await _metrics(replicas[1])
        finally:
            for c in clients:
                await c.close()
    finally:
        limits_redis.stop()


async def _shared(gateway) -> bool:  # type: ignore[no-untyped-def]
    return (await _cluster(gateway))["limits"]["mode"] == "redis"


async def _members(replicas) -> bool:  # type: ignore[no-untyped-def]
    return all(len(g.cluster.members()) == 2 for g in replicas)


async def _metrics(gateway) -> str:  # type: ignore[no-untyped-def]
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{gateway.bound_port}/metrics") as r:
            return await r.text()


@pytest.fixture(autouse=True)
def _quiet_redis_loss_logs(caplog):  # type: ignore[no-untyped-def]
    caplog.set_level("ERROR", "sits.tenants")


async def test_a_frozen_redis_times_out_to_local_counting_and_the_spend_joins_redis_after(usage_upstream,
                                                                                         tenant_gateway):
    import os
    import signal

    import redis.asyncio as redis_async

    from sits.tenants.budget import NANO, period_window
    from sits.tenants.records import Budget

    limits_redis = RedisServer()
    limits_redis.start()
    keys, spend = Keys(), Spend()
    keys.add("sk-z", "key_z", budget=Budget("daily", hard_usd=10.0))
    raw = tenant_config(usage_upstream.url, redis_url=limits_redis.url,
                        limits={"retry_redis_s": 0.2, "redis_timeout_s": 0.3})
    prefix = raw["tenants"]["limits"]["key_prefix"]
    counter = f"{prefix}b:key:key_z:{period_window('daily', __import__('time').time()).label}"
    process = limits_redis._proc
    assert process is not None
    try:
        gateway = await tenant_gateway(raw, keys, spend)
        async with client(gateway, "sk-z") as c:
            await c.chat.completions.create(model="m1", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
            os.kill(process.pid, signal.SIGSTOP)  # alive but silent: only the timeout can tell
            try:
                for _ in range(3):
                    await c.chat.completions.create(model="m1", messages=[{"role": "user", "content": "hi"}],
                                                    max_tokens=5)
                assert (await _cluster_open(gateway))["mode"] == "fallback"
            finally:
                os.kill(process.pid, signal.SIGCONT)
            await eventually(lambda: _shared_open(gateway), 5, "back on Redis")
        records = await spend.wait_for(4)
        total = sum(r.cost_usd for r in records)

        async def settled() -> bool:
            r = redis_async.from_url(limits_redis.url)
            try:
                value = await r.get(counter)
            finally:
                await r.aclose()
            # the spend made alone joined the shared counter; a timed-out admission Redis ran late may add
            # its reservation on top (counted over, never under)
            return value is not None and int(value) / NANO >= total - 1e-9
        await eventually(settled, 5, "the local spend in Redis")
    finally:
        limits_redis.stop()


async def _cluster_open(gateway) -> dict:  # type: ignore[no-untyped-def]
    return gateway.tenant_gate.gate.limiter.describe()


async def _shared_open(gateway) -> bool:  # type: ignore[no-untyped-def]
    return gateway.tenant_gate.gate.limiter.mode == "redis"
