"""Three real gateway processes switching model versions together, over Redis and over HTTP peers.

Each test starts a real redis-server (Redis transport) on a free port, three `sits serve`
processes, and one test upstream per model version (requests are counted where they land).
Clients are the official openai SDK and plain HTTP for the admin API.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import openai
import pytest

from tests.api.cluster_harness import AdminClient, RedisServer, ReplicaProcess, eventually, free_port
from tests.upstream_server import FakeUpstream

ALIAS = "chat-default"
VERSIONS = ("chat@v1", "chat@v2", "chat@v3")
CONVERGE_S = 2.0  # the bound for conflicting switches
REDIS_OUTAGE_S = 10.0


@dataclass
class Cluster:
    replicas: list[ReplicaProcess]
    upstreams: dict[str, FakeUpstream]
    admin: AdminClient
    redis: RedisServer | None

    def served(self) -> dict[str, int]:
        return {v: len(u.log.requests) for v, u in self.upstreams.items()}

    async def chat(self, replica: ReplicaProcess, n: int) -> list[str]:
        """`n` requests for the alias through `replica`; the model that answered each."""
        client = openai.AsyncOpenAI(base_url=replica.url + "/v1", api_key="k", max_retries=0, timeout=10)
        try:
            answers = await asyncio.gather(*(client.chat.completions.create(
                model=ALIAS, messages=[{"role": "user", "content": f"q{i}"}], max_tokens=4) for i in range(n)))
        finally:
            await client.close()
        return [a.model for a in answers]

    async def routes(self) -> list[tuple[str, Any]]:
        """(target, stamp) of the alias on every replica."""
        views = await asyncio.gather(*(self.admin.alias(r, ALIAS) for r in self.replicas))
        return [(v["target"], v["stamp"]) for v in views]

    async def converged_on(self, within_s: float, what: str) -> tuple[str, Any]:
        async def same() -> tuple[str, Any] | None:
            routes = await self.routes()
            return routes[0] if len(set(map(repr, routes))) == 1 else None
        return await eventually(same, within_s, what)

    async def phase_everywhere(self, phase: str, within_s: float) -> None:
        async def reached() -> bool:
            views = await asyncio.gather(*(self.admin.alias(r, ALIAS) for r in self.replicas))
            return all(v["phase"] == phase for v in views)
        await eventually(reached, within_s, f"phase {phase} on every replica")

    async def members_everywhere(self, n: int, within_s: float) -> None:
        async def formed() -> bool:
            states = await asyncio.gather(*(self.admin.get(r, "/v1/cluster") for r in self.replicas))
            return all(len(s["members"]) == n and s["converged"] for s in states)
        await eventually(formed, within_s, f"{n} members, converged, on every replica")


def replica_config(name: str, upstreams: dict[str, FakeUpstream], cluster: dict[str, Any]) -> dict[str, Any]:
    return {
        "server": {"drain_timeout_s": 1},
        "control": {"allow_loopback": True},  # runtime registrations point at loopback test upstreams
        "resilience": {"breaker_failure_threshold": 2, "breaker_open_s": 30, "max_attempts": 1},
        "models": [{"name": v, "endpoints": [{"url": u.url}]} for v, u in upstreams.items()],
        "aliases": {ALIAS: "chat@v1"},
        "cluster": {"replica_id": name, "anti_entropy_s": 0.5, "heartbeat_s": 0.2, "member_timeout_s": 3.0,
                    "timeout_s": 0.5, **cluster},
    }


@pytest.fixture(params=["redis", "http"])
async def cluster(request, tmp_path) -> AsyncIterator[Cluster]:
    transport = request.param
    upstreams = {v: FakeUpstream(v) for v in VERSIONS}
    for u in upstreams.values():
        await u.start()
    redis = RedisServer() if transport == "redis" else None
    if redis is not None:
        redis.start()
    ports = [free_port() for _ in range(3)]
    replicas = []
    for i, port in enumerate(ports):
        if redis is not None:
            settings: dict[str, Any] = {"redis_url": redis.url}
        else:
            settings = {"peers": [f"http://127.0.0.1:{p}" for p in ports if p != port]}
        replicas.append(ReplicaProcess(f"r{i + 1}", port, tmp_path, replica_config(f"r{i + 1}", upstreams, settings)))
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
    try:
        for r in replicas:
            r.start()
        for r in replicas:
            await r.wait_ready(session)
        c = Cluster(replicas, upstreams, AdminClient(session), redis)
        await c.members_everywhere(3, within_s=10)
        yield c
    finally:
        for r in replicas:
            r.stop()
        await session.close()
        if redis is not None:
            redis.stop()
        for u in upstreams.values():
            await u.stop()


async def test_conflicting_switches_converge_drain_and_retire(cluster):
    r1, r2, r3 = cluster.replicas
    v1 = cluster.upstreams["chat@v1"]

    # A slow stream on the old version is in flight when the switches land: it must finish there.
    v1.chunk_delay = 0.4  # five chunks: the stream lasts about 2 s
    client = openai.AsyncOpenAI(base_url=r1.url + "/v1", api_key="k", max_retries=0, timeout=10)
    stream = await client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "long"}],
                                                  stream=True)

    # Clients keep asking every replica while the switches happen: none of them may fail.
    stop_load = asyncio.Event()

    async def load(replica: ReplicaProcess) -> int:
        served = 0
        while not stop_load.is_set() and served < 200:
            served += len(await cluster.chat(replica, 2))
        return served
    loaders = [asyncio.create_task(load(r)) for r in cluster.replicas]

    # Conflicting switches issued at the same moment on two replicas.
    started = time.monotonic()
    (s1, a1), (s2, a2) = await asyncio.gather(cluster.admin.switch(r1, ALIAS, "chat@v2"),
                                              cluster.admin.switch(r2, ALIAS, "chat@v3"))
    assert (s1, s2) == (202, 202), (a1, a2)
    winner = max((a1, a2), key=lambda a: (a["stamp"][0], a["stamp"][1], a["stamp"][2]))  # (HLC, replica id)
    target, stamp = await cluster.converged_on(CONVERGE_S, "conflicting switches converge")
    assert time.monotonic() - started < CONVERGE_S
    assert (target, stamp) == (winner["target"], winner["stamp"])
    stop_load.set()
    loaded = await asyncio.gather(*loaders)  # an exception here would be a dropped request
    assert all(n > 0 for n in loaded)

    # The old version still has the stream in flight on r1: the switch is draining, not retired.
    async def draining() -> bool:
        views = await asyncio.gather(*(cluster.admin.alias(r, ALIAS) for r in cluster.replicas))
        return all(v["phase"] == "draining" for v in views)
    await eventually(draining, 1.5, "draining while the stream is in flight on the old version")
    chunks = [chunk async for chunk in stream]
    await client.close()
    assert chunks and {c.model for c in chunks} == {"chat@v1"}  # finished on the old version
    v1.chunk_delay = 0.0

    await cluster.phase_everywhere("retired", within_s=5)
    before = cluster.served()
    answered = [m for r in cluster.replicas for m in await cluster.chat(r, 20)]
    after = cluster.served()
    assert set(answered) == {target}
    assert {v: after[v] - before[v] for v in VERSIONS} == {v: 60 if v == target else 0 for v in VERSIONS}

    # The served counter is a G-Counter: every replica ends with the same cluster-wide total.
    async def counters_agree() -> set[int] | None:
        totals = {(await cluster.admin.get(r, "/v1/cluster"))["served"]["total"] for r in cluster.replicas}
        return totals if totals == {1 + sum(loaded) + 60} else None  # every request counted once, cluster-wide
    await eventually(counters_agree, 5, "served counters converge")

    # Each replica exports how long ago it last merged state from its peers.
    async with aiohttp.ClientSession() as session, session.get(cluster.replicas[0].url + "/metrics") as r:
        lag = [line for line in (await r.text()).splitlines() if line.startswith("sits_replication_lag_seconds ")]
    assert len(lag) == 1 and 0.0 <= float(lag[0].split()[1]) < 5.0


async def test_kill_9_during_a_switch_then_restart_converges(cluster):
    r1, r2, r3 = cluster.replicas
    # r1 acknowledges the switch, and dies at once, before it can be sure anyone heard of it.
    status, answer = await cluster.admin.switch(r1, ALIAS, "chat@v2")
    assert status == 202, answer
    r1.kill9()
    # r3 dies mid-switch too, then comes back with whatever it had.
    r3.kill9()
    r3.start()
    r1.start()
    await r1.wait_ready(cluster.admin.session)
    await r3.wait_ready(cluster.admin.session)
    target, stamp = await cluster.converged_on(10, "replicas converge after kill -9 and restart")
    assert (target, stamp) == ("chat@v2", answer["stamp"])  # the acknowledged switch survived
    await cluster.members_everywhere(3, within_s=10)
    await cluster.phase_everywhere("retired", within_s=5)
    before = cluster.served()
    answered = [m for r in cluster.replicas for m in await cluster.chat(r, 10)]
    assert set(answered) == {"chat@v2"}
    assert cluster.served()["chat@v1"] == before["chat@v1"]


async def test_partitioned_replicas_serve_locally_and_converge_after_healing(cluster):
    r1, r2, r3 = cluster.replicas
    if cluster.redis is not None:
        cluster.redis.stop()  # every replica loses its only transport
        outage_started = time.monotonic()
        # Switches on both sides of the partition: they conflict once it heals.
        assert (await cluster.admin.switch(r2, ALIAS, "chat@v2"))[0] == 202
        status, later = await cluster.admin.switch(r3, ALIAS, "chat@v3")
        assert status == 202
        # Each replica keeps serving from its own state.
        assert set(await cluster.chat(r1, 3)) == {"chat@v1"}
        assert set(await cluster.chat(r2, 3)) == {"chat@v2"}
        assert set(await cluster.chat(r3, 3)) == {"chat@v3"}
        await asyncio.sleep(max(0.0, REDIS_OUTAGE_S - (time.monotonic() - outage_started)))
        cluster.redis.start()  # an empty Redis on the same port: nothing survived in it
    else:
        r3.freeze()  # r3 is cut off from its peers (and they from it)
        status, early = await cluster.admin.switch(r1, ALIAS, "chat@v2")
        assert status == 202
        # r2 hears from r1 despite r3's silence (the push is asynchronous: within the convergence bound).
        async def r2_switched() -> bool:
            return (await cluster.admin.alias(r2, ALIAS))["target"] == "chat@v2"
        await eventually(r2_switched, CONVERGE_S, "r2 hears of r1's switch while r3 is frozen")
        assert set(await cluster.chat(r2, 3)) == {"chat@v2"}
        await asyncio.sleep(3.5)  # long enough for r3 to drop out of the others' membership
        assert (await cluster.admin.get(r1, "/v1/cluster"))["members"] == ["r1", "r2"]
        status, later = await cluster.admin.switch(r2, ALIAS, "chat@v3")
        assert status == 202
        r3.thaw()
    target, stamp = await cluster.converged_on(5, "replicas converge after the partition heals")
    assert (target, stamp) == ("chat@v3", later["stamp"])
    await cluster.members_everywhere(3, within_s=5)
    await cluster.phase_everywhere("retired", within_s=5)
    assert {m for r in cluster.replicas for m in await cluster.chat(r, 5)} == {"chat@v3"}


async def test_registrations_and_open_circuits_reach_every_replica(cluster):
    r1, r2, r3 = cluster.replicas
    v3 = cluster.upstreams["chat@v3"]
    async with cluster.admin.session.post(r1.url + "/v1/models/register", headers=cluster.admin.headers,
                                          json={"name": "chat@v4", "endpoint": v3.url, "upstream_model": "v4"}) as r:
        assert r.status == 201, await r.text()

    async def everywhere() -> bool:
        listings = await asyncio.gather(*(cluster.admin.get(r, "/v1/registry") for r in cluster.replicas))
        return all("chat@v4" in {m["name"] for m in listing["data"]} for listing in listings)
    await eventually(everywhere, CONVERGE_S, "registration replicated")

    # A replica that only heard of the model can switch the alias to it, and every replica serves it.
    assert (await cluster.admin.switch(r3, ALIAS, "chat@v4"))[0] == 202
    await cluster.phase_everywhere("retired", within_s=5)
    before = len(v3.log.requests)
    assert {m for r in cluster.replicas for m in await cluster.chat(r, 3)} == {"v4"}  # the upstream echoes its name
    assert [b["model"] for b in v3.log.requests[before:]] == ["v4"] * 9

    # Removal replicates too. The alias's route names a model no replica serves now: each replica falls
    # back to the alias's config target rather than failing requests.
    async with cluster.admin.session.delete(r2.url + "/v1/models/chat@v4", headers=cluster.admin.headers) as r:
        assert r.status == 200, await r.text()

    async def gone() -> bool:
        listings = await asyncio.gather(*(cluster.admin.get(r, "/v1/registry") for r in cluster.replicas))
        return all("chat@v4" not in {m["name"] for m in listing["data"]} for listing in listings)
    await eventually(gone, CONVERGE_S, "removal replicated")
    assert {m for r in cluster.replicas for m in await cluster.chat(r, 2)} == {"chat@v1"}

    # An endpoint's circuit opened by r1's failures opens on r2 and r3 before they send it anything.
    v2 = cluster.upstreams["chat@v2"]
    v2.mode = "error500"

    async def ask(replica: ReplicaProcess) -> None:
        client = openai.AsyncOpenAI(base_url=replica.url + "/v1", api_key="k", max_retries=0, timeout=10)
        try:
            with pytest.raises(openai.APIStatusError):
                await client.chat.completions.create(model="chat@v2", messages=[{"role": "user", "content": "x"}])
        finally:
            await client.close()

    for _ in range(2):  # the threshold: r1's breaker opens
        await ask(r1)
    tried = len(v2.log.requests)

    async def open_everywhere() -> bool:
        listings = await asyncio.gather(*(cluster.admin.get(r, "/v1/registry") for r in cluster.replicas))
        return all(ep["circuit"] == "open" for listing in listings for m in listing["data"]
                   if m["name"] == "chat@v2" for ep in m["endpoints"])
    await eventually(open_everywhere, CONVERGE_S, "circuit open on every replica")
    await ask(r2)
    await ask(r3)
    assert len(v2.log.requests) == tried  # r2 and r3 held back without failing on their own
    circuits = (await cluster.admin.get(r3, "/v1/cluster"))["circuits"]
    assert circuits["chat@v2/ep-0"]["state"] == "open" and circuits["chat@v2/ep-0"]["by"] == "r1"
