"""One replica of a SITS cluster: its copy of the cluster document, the transports that keep it
in sync, its alias switchboard, and the heartbeat that publishes its own status.

Built by the composition root; the gateway hands it each routing table the registry builds
(`overlay`) and gets back, through `publish`, the table with the replicated aliases applied,
again whenever the document changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from sits.control.aliases import AliasSwitchboard, AliasView
from sits.control.circuit_replication import CircuitReplication
from sits.control.cluster_config import ClusterConfig
from sits.control.registry import Registry
from sits.control.registry_replication import RegistryReplication
from sits.errors import ConfigError, SitsError
from sits.state.circuit_breaker import CircuitBreakers
from sits.state.crdt.gcounter import GCounter
from sits.state.crdt.hlc import HybridClock
from sits.state.crdt.lww_map import LWWMap
from sits.state.endpoint_stats import StatsStore
from sits.state.replication import folder_transport, http_peers, redis_transport
from sits.state.replication.document import ClusterDoc
from sits.state.replication.records import ReplicaStatus
from sits.state.replication.replica import Replica
from sits.state.replication.snapshot_file import SnapshotFile
from sits.state.routing_table import RoutingTable

log = logging.getLogger("sits.cluster")
_EMPTY_HASH = ClusterDoc().state_hash()


class Transport(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


class ClusterNode:
    def __init__(self, config: ClusterConfig, replica_id: str, data_dir: Path, admin_token: str | None,
                 stats: StatsStore, publish: Callable[[RoutingTable], None], rng: random.Random,
                 monotonic: Callable[[], float] = time.monotonic,
                 wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
                 workers_folder: Path | None = None, registry: Registry | None = None,
                 breakers: CircuitBreakers | None = None) -> None:
        """`workers_folder`: with `sits serve --workers N`, the folder the run's workers share; they
        replicate through it (folder_transport.py) besides any Redis or HTTP peers. `registry`: the
        models registered through the control API replicate too; `breakers`: so do circuit transitions."""
        self.config = config
        self.replica = Replica(replica_id, HybridClock(replica_id, wall_ms), monotonic)
        self.aliases = AliasSwitchboard(self.replica, rng)
        self._stats = stats
        self._publish = publish
        self._monotonic = monotonic
        self._base: RoutingTable | None = None
        self._served: RoutingTable | None = None
        self._snapshot = SnapshotFile(data_dir / "cluster" / f"{_file_safe(replica_id)}.json") if config.persist else None
        self._saved_hash: str | None = None  # state hash of the document last persisted
        self._save_lock = asyncio.Lock()  # one writer of the snapshot file at a time
        self._served_total = 0  # requests counted into the G-Counter so far
        self._heartbeat: asyncio.Task[None] | None = None
        self.redis: redis_transport.RedisTransport | None = None
        self.http: http_peers.HttpPeerTransport | None = None
        if config.redis_url:
            self.redis = redis_transport.RedisTransport(self.replica, config.redis_url, config.namespace,
                                                        config.anti_entropy_s, config.timeout_s)
        if config.peers:
            if not admin_token:
                raise ConfigError("cluster.peers: replicas authenticate to each other with the admin key; "
                                  "set SITS_ADMIN_KEY (or control.admin_key_env) on every replica")
            self.http = http_peers.HttpPeerTransport(self.replica, config.peers, admin_token, config.anti_entropy_s,
                                                     config.timeout_s)
        self.workers = folder_transport.FolderTransport(self.replica, workers_folder) \
            if workers_folder is not None else None
        self.registry = RegistryReplication(self.replica, registry) if registry is not None else None
        self.circuits = CircuitReplication(self.replica, breakers, monotonic) if breakers is not None else None
        self.replica.watch(self._on_document)

    # -- the routing table -------------------------------------------------------

    def overlay(self, base: RoutingTable) -> RoutingTable:
        """The registry's table with the replicated aliases applied; remembered for later documents."""
        self._base = base
        served = self.aliases.overlay(base)
        self.aliases.note_served(self._served, served)
        self._served = served
        return served

    def _on_document(self, doc: ClusterDoc) -> None:
        if self.circuits is not None:
            self.circuits.on_document(doc)
        if self.registry is not None and self._heartbeat is not None:  # started: the registry is loaded
            self.registry.on_document(doc)
        if self._base is not None:
            served = self.aliases.overlay(self._base)
            if served.aliases != self._served.aliases or served.splits != self._served.splits:  # type: ignore[union-attr]
                self.aliases.note_served(self._served, served)
                self._served = served
                self._publish(served)
        self._refresh_status(heartbeat=False)

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Load the persisted document, then join the cluster. Call after the first routing table."""
        if self._snapshot is not None:
            doc = await asyncio.to_thread(self._snapshot.load)
            self.replica.restore(doc)
            self._saved_hash = doc.state_hash()
        self._refresh_status(heartbeat=True)
        for transport in self._transports():
            await transport.start()
        self._heartbeat = asyncio.create_task(self._heartbeat_loop(), name="sits-cluster-heartbeat")
        if self.registry is not None:
            self.registry.on_document(self.replica.doc)  # what the snapshot holds and we do not
        log.info("cluster replica %s: %s", self.replica.id, ", ".join(self._transport_names()) or "no transport")

    async def stop(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
        for transport in reversed(self._transports()):
            await transport.stop()
        if self.registry is not None:
            await self.registry.settle()
        try:
            # A cluster of one that never switched an alias has nothing worth a file.
            if self._transports() or self.replica.doc.state_hash() != _EMPTY_HASH:
                await self.save(always=True)
        except OSError as exc:  # shutdown goes on; the peers still hold the state
            log.warning("cluster: cannot persist the document at shutdown: %s", exc)

    async def save(self, always: bool = False) -> None:
        """Persist the document (atomic, fsynced) if what replicas agree on changed since the last save;
        statuses and counters alone ride along with the next such save (or the one at shutdown)."""
        async with self._save_lock:
            doc = self.replica.doc
            digest = doc.state_hash()
            if self._snapshot is None or (digest == self._saved_hash and not always):
                return
            await asyncio.to_thread(self._snapshot.save, doc, self.replica.id)
            self._saved_hash = digest

    # -- operations ----------------------------------------------------------------------

    async def switch(self, alias: str, to: str, canary_weight: float | None) -> AliasView:
        """Switch an alias cluster-wide; returns once the switch is durable on this replica."""
        assert self._served is not None, "cluster node not started"
        _, delta = self.aliases.plan_switch(self._served, alias, to, canary_weight)
        async with self._save_lock:  # durable first: a failed write leaves nothing applied
            if self._snapshot is not None:
                doc = self.replica.doc.merge(delta)
                try:
                    await asyncio.to_thread(self._snapshot.save, doc, self.replica.id)
                except OSError as exc:
                    raise SitsError(f"the switch was not applied: cannot persist it ({exc})") from None
                self._saved_hash = doc.state_hash()
            self.replica.commit(delta)
        return next(v for v in self.alias_views() if v.alias == alias)

    def alias_views(self) -> list[AliasView]:
        assert self._served is not None, "cluster node not started"
        return self.aliases.views(self._served, self.members())

    def members(self) -> list[str]:
        """This replica and every replica heard from recently: the ones a switch waits for."""
        return sorted({self.replica.id, *self.replica.live_peers(self.config.member_timeout_s)})

    def describe(self) -> dict[str, Any]:
        """GET /v1/cluster: replicas, state hashes, last sync and lag, as this replica sees them."""
        replica, now = self.replica, self._monotonic()
        own_hash = replica.doc.state_hash()
        wall_now = replica.clock.peek().wall_ms
        live = set(self.members())
        replicas = [{"id": replica.id, "self": True, "live": True, "state_hash": own_hash, "in_sync": True,
                     "last_heard_s": 0.0, "lag_ms": 0, "via": None}]
        for rid, status in replica.doc.replicas.items():
            if rid == replica.id:
                continue
            contact = replica.contacts.get(rid)
            stamp = replica.doc.replicas.stamp(rid)
            replicas.append({
                "id": rid, "self": False, "live": rid in live, "state_hash": status.state_hash,
                "in_sync": status.state_hash == own_hash,
                "last_heard_s": None if contact is None else round(now - contact.at, 3),
                # How old the newest status we hold from it is, in hybrid-clock time.
                "lag_ms": None if stamp is None else max(0, wall_now - stamp.wall_ms),
                "via": None if contact is None else contact.via,
            })
        transports: dict[str, Any] = {}
        if self.redis is not None:
            transports["redis"] = {"connected": self.redis.connected, "last_sync_s": self._since("redis")}
        if self.http is not None:
            transports["http"] = {"peers": dict(self.http.reachable), "last_sync_s": self._since("http")}
        return {
            "replica_id": replica.id,
            "state_hash": own_hash,
            "converged": all(r["in_sync"] for r in replicas if r["live"]),
            "members": sorted(live),
            "replicas": replicas,
            "transports": transports,
            "served": {"total": replica.doc.served.value, "by_replica": dict(replica.doc.served.counts)},
            "rejected_messages": replica.rejected,
            "refused_registry_changes": 0 if self.registry is None else self.registry.refused,
            "circuits": {} if self.circuits is None else self.circuits.describe(),
            "aliases": [v.to_json() for v in self.alias_views()],
        }

    def replication_lag_s(self) -> float | None:
        """Seconds since the last merge from any transport (None: no transport configured or none yet)."""
        syncs = [self.replica.last_sync.get(name) for name in self._transport_names()]
        seen = [at for at in syncs if at is not None]
        return None if not seen else max(0.0, self._monotonic() - max(seen))

    # -- internals ---------------------------------------------------------------------

    def _transports(self) -> list[Transport]:
        return [t for t in (self.redis, self.http, self.workers) if t is not None]

    def _transport_names(self) -> list[str]:
        return [n for n, t in (("redis", self.redis), ("http", self.http), (folder_transport.NAME, self.workers))
                if t is not None]

    def _since(self, transport: str) -> float | None:
        at = self.replica.last_sync.get(transport)
        return None if at is None else round(self._monotonic() - at, 3)

    def _refresh_status(self, heartbeat: bool) -> None:
        """Publish this replica's status if it changed (or on a heartbeat, to show it is alive)."""
        if self._served is None:
            return
        replica = self.replica
        status = ReplicaStatus(replica.doc.state_hash(), self.aliases.progress(self._served, self._stats))
        delta = ClusterDoc()
        if heartbeat or replica.doc.replicas.get(replica.id) != status:
            delta = ClusterDoc(replicas=LWWMap[ReplicaStatus]().put(replica.id, status, replica.stamp()))
        total = sum(s.requests for s in self._stats.snapshot().values())
        if total > self._served_total:
            mine = replica.doc.served.get(replica.id) + total - self._served_total
            delta = delta.merge(ClusterDoc(served=GCounter({replica.id: mine})))
            self._served_total = total
        if delta != ClusterDoc():
            replica.commit(delta)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            try:
                self._refresh_status(heartbeat=True)
                await self.save()
            except Exception:  # the heartbeat must outlive one bad round (a full disk, say)
                log.exception("cluster heartbeat failed")


def _file_safe(replica_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", replica_id)

