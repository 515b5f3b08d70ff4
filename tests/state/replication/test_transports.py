"""The transports against real servers: a redis-server on a free port, and aiohttp peers on loopback.

Replicas here are in-process `Replica` objects, so the tests can look inside; the end-to-end
tests in tests/api/test_cluster_e2e.py run the same transports in real gateway processes.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from sits.state.crdt import GCounter, HybridClock, Stamp
from sits.state.replication.document import ClusterDoc
from sits.state.replication.folder_transport import FolderTransport
from sits.state.replication.http_peers import SYNC_PATH, HttpPeerTransport
from sits.state.replication.records import AliasRoute
from sits.state.replication.redis_transport import RedisTransport
from sits.state.replication.replica import Replica
from sits.state.replication.wire import decode, encode
from tests.api.cluster_harness import RedisServer, eventually, free_port
from tests.state.replication.docs import alias_doc


def replica(name: str) -> Replica:
    return Replica(name, HybridClock(name, lambda: time.time_ns() // 1_000_000), time.monotonic)


async def converged(replicas: list[Replica], within_s: float, what: str) -> None:
    async def same() -> bool:
        return all(r.doc.aliases == replicas[0].doc.aliases and r.doc.served == replicas[0].doc.served
                   for r in replicas)
    await eventually(same, within_s, what)


@pytest.fixture
def redis_server() -> AsyncIterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


async def test_redis_deltas_reach_every_replica(redis_server):
    replicas = [replica(f"r{i}") for i in range(3)]
    # Anti-entropy far apart: only pub/sub can deliver within the bound below.
    transports = [RedisTransport(r, redis_server.url, "t:one", anti_entropy_s=30.0) for r in replicas]
    for t in transports:
        await t.start()
    try:
        await eventually(lambda: _async(all(t.connected for t in transports)), 5, "connected")
        a, b, _ = replicas
        a.commit(alias_doc("chat", AliasRoute("m@v2", "m@v1"), a.stamp()))
        b.commit(ClusterDoc(served=GCounter({"r1": 4})))
        await converged(replicas, 2, "deltas delivered by pub/sub")
        assert all(r.doc.aliases.get("chat") == AliasRoute("m@v2", "m@v1") for r in replicas)
        assert all(r.last_sync.get("redis") is not None for r in replicas)
    finally:
        for t in transports:
            await t.stop()


async def test_redis_anti_entropy_catches_up_a_late_joiner_and_heals_an_outage(redis_server):
    early, late = replica("early"), replica("late")
    early_t = RedisTransport(early, redis_server.url, "t:two", anti_entropy_s=0.2)
    await early_t.start()
    late_t = RedisTransport(late, redis_server.url, "t:two", anti_entropy_s=0.2)
    try:
        early.commit(alias_doc("chat", AliasRoute("m@v2"), early.stamp()))
        await eventually(lambda: _async(early_t.connected), 5, "connected")
        await late_t.start()  # it missed the delta: anti-entropy must bring it
        await converged([early, late], 3, "late joiner caught up")

        redis_server.stop()
        await eventually(lambda: _async(not early_t.connected and not late_t.connected), 5, "outage noticed")
        late.commit(alias_doc("chat", AliasRoute("m@v3", "m@v2"), late.stamp()))  # lost on the wire
        assert early.doc.aliases.get("chat") == AliasRoute("m@v2")  # still serving its own state
        redis_server.start()  # empty: whatever Redis held is gone
        await converged([early, late], 5, "converged after Redis came back")
        assert early.doc.aliases.get("chat") == AliasRoute("m@v3", "m@v2")
    finally:
        await early_t.stop()
        await late_t.stop()


class PeerServer:
    """A replica behind the sync endpoint, as a gateway serves it."""

    def __init__(self, name: str) -> None:
        self.replica = replica(name)
        self.port = free_port()
        self.requests = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        async def sync(request: web.Request) -> web.Response:
            assert request.headers.get("authorization") == "Bearer peer-token"
            self.requests += 1
            _, doc = decode(await request.read())
            self.replica.receive(doc, "http")
            return web.Response(body=encode(self.replica.doc, self.replica.id), content_type="application/json")

        app = web.Application()
        app.router.add_post(SYNC_PATH, sync)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def test_http_peers_push_deltas_and_pull_state_with_anti_entropy():
    peer = PeerServer("peer")
    await peer.start()
    peer.replica.commit(alias_doc("other", AliasRoute("m@v1"), peer.replica.stamp()))
    local = replica("local")
    transport = HttpPeerTransport(local, [peer.url], "peer-token", interval_s=0.2, timeout_s=0.5)
    await transport.start()
    try:
        local.commit(alias_doc("chat", AliasRoute("m@v2", "m@v1"), local.stamp()))
        await converged([local, peer.replica], 2, "push-pull over HTTP")
        assert local.doc.aliases.get("other") == AliasRoute("m@v1")  # pulled from the answer
        assert transport.reachable == {peer.url: True}
    finally:
        await transport.stop()
        await peer.stop()


async def test_http_peer_down_then_back():
    peer = PeerServer("peer")
    local = replica("local")
    transport = HttpPeerTransport(local, [peer.url], "peer-token", interval_s=0.1, timeout_s=0.3)
    await transport.start()
    try:
        local.commit(alias_doc("chat", AliasRoute("m@v2"), local.stamp()))  # the peer is not up: lost
        await eventually(lambda: _async(local.last_sync.get("http") is None and peer.requests == 0), 1, "no peer")
        await peer.start()
        await converged([local, peer.replica], 3, "converged once the peer came up")
    finally:
        await transport.stop()
        await peer.stop()


async def test_a_stale_stamp_never_overwrites_a_newer_switch():
    a, b = replica("a"), replica("b")
    b.commit(alias_doc("chat", AliasRoute("m@v3"), Stamp(time.time_ns() // 1_000_000 + 1_000, 0, "b")))
    a.commit(alias_doc("chat", AliasRoute("m@v2"), Stamp(1, 0, "a")))
    a.receive(b.doc, "test")
    b.receive(a.doc, "test")
    assert a.doc.aliases.get("chat") == b.doc.aliases.get("chat") == AliasRoute("m@v3")


async def _async(value: bool) -> bool:
    return value


async def test_worker_processes_converge_through_their_shared_folder(tmp_path):
    """`--workers N`: each worker's document in its own file; every round merges the others'."""
    workers = [replica(f"gw#w{i}") for i in range(3)]
    transports = [FolderTransport(r, tmp_path, interval_s=0.05) for r in workers]
    for t in transports:
        await t.start()
    try:
        workers[0].commit(alias_doc("chat", AliasRoute("m@v2", "m@v1"), workers[0].stamp()))
        workers[2].commit(alias_doc("embed", AliasRoute("e@v1"), workers[2].stamp()))
        await converged(workers, 2, "three workers through one folder")
        assert all(w.doc.aliases.get("chat") == AliasRoute("m@v2", "m@v1") for w in workers)
        assert all(w.doc.aliases.get("embed") == AliasRoute("e@v1") for w in workers)
        (tmp_path / "cluster-torn.json").write_bytes(b'{"version": 1, "origin"')  # a torn file is skipped
        transports[1].exchange()
    finally:
        for t in transports:
            await t.stop()
