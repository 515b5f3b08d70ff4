"""Key and team changes pushed to every replica through the cluster document, not only polled.

A replica that changes a key or a team (create, rotate, revoke, any edit) reloads its own directory
before it answers, then announces the store version that change committed: its entry in the
document's `key_versions` map (replica id -> version, last writer wins per replica, so no replica's
notice can hide another's). Every other replica's watcher sees an entry newer than the version its
directory holds and pokes the directory, which reads the store's version and reloads. The change
therefore reaches every replica within the replication bound (a Redis pub/sub or HTTP peer delta,
milliseconds) plus one snapshot load; the directory's own polling every `refresh_s` stays as the
backstop for a lost message or a replica without a cluster transport.
"""

from __future__ import annotations

from typing import Protocol

from sits.state.crdt.hlc import Stamp
from sits.state.crdt.lww_map import LWWMap
from sits.state.replication.document import ClusterDoc
from sits.state.replication.replica import Replica


class Reloadable(Protocol):
    version: int  # the store version the directory reflects

    def poke(self) -> None: ...


class KeyNotices:
    def __init__(self, replica: Replica, directory: Reloadable) -> None:
        self._replica = replica
        self._directory = directory
        self._seen: dict[str, Stamp] = {}  # per replica, the newest notice acted on
        self.received = 0  # notices that made this replica reload (GET /v1/cluster, tests)
        replica.watch(self.on_document)

    def announce(self, version: int) -> None:
        """This replica committed a change and holds store `version`: tell the others."""
        stamp = self._replica.stamp()
        self._seen[self._replica.id] = stamp
        self._replica.commit(ClusterDoc(key_versions=LWWMap[int]().put(self._replica.id, version, stamp)))

    def on_document(self, doc: ClusterDoc) -> None:
        stale = False
        for replica_id, register in doc.key_versions.entries.items():
            known = self._seen.get(replica_id)
            if known is not None and register.stamp <= known:
                continue
            self._seen[replica_id] = register.stamp
            if register.value is not None and register.value > self._directory.version:
                stale = True
        if stale:
            self.received += 1
            self._directory.poke()  # the reload reads the store (the announced version or a later one)
