"""One replica's copy of the cluster document, and who it last heard from.

Local changes go through `commit(delta)`: merged here, then handed to every transport's outbox.
Remote documents go through `receive()`. Both notify watchers when the document changed, so
the routing table follows the document. Everything is synchronous and single-threaded (the
event loop); transports do the I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sits.state.crdt.hlc import HybridClock, Stamp
from sits.state.replication.document import ClusterDoc

log = logging.getLogger("sits.cluster")

Watcher = Callable[[ClusterDoc], None]
Outbox = Callable[[ClusterDoc], None]


@dataclass(frozen=True, slots=True)
class Contact:
    """When (our monotonic clock) a replica's own status last advanced, and by which transport."""

    at: float
    via: str
    stamp: Stamp


class Replica:
    def __init__(self, replica_id: str, clock: HybridClock, monotonic: Callable[[], float]) -> None:
        self.id = replica_id
        self.clock = clock
        self._monotonic = monotonic
        self.doc = ClusterDoc()
        self._watchers: list[Watcher] = []
        self._outboxes: list[Outbox] = []
        self.contacts: dict[str, Contact] = {}
        self.last_sync: dict[str, float] = {}  # transport -> monotonic time of its last full exchange
        self.rejected = 0  # messages refused: malformed, or from a clock too far ahead

    def watch(self, watcher: Watcher) -> None:
        self._watchers.append(watcher)

    def add_outbox(self, outbox: Outbox) -> None:
        self._outboxes.append(outbox)

    def stamp(self) -> Stamp:
        return self.clock.tick()

    def commit(self, delta: ClusterDoc) -> None:
        """A local change: apply it, and send the delta on every transport."""
        changed = self._merge(delta)
        for outbox in self._outboxes:
            outbox(delta)
        if changed:
            self._notify()

    def receive(self, doc: ClusterDoc, via: str) -> bool:
        """A remote document or delta; True if it taught us something."""
        newest = doc.max_stamp()
        if newest is not None and not self.clock.observe(newest):
            self.rejected += 1
            log.warning("dropped a cluster message via %s: stamp %s is too far ahead of our clock", via, newest)
            return False
        now = self._monotonic()
        for replica_id, register in doc.replicas.entries.items():
            if replica_id == self.id:
                continue
            known = self.contacts.get(replica_id)
            if known is None or register.stamp > known.stamp:
                self.contacts[replica_id] = Contact(now, via, register.stamp)
        changed = self._merge(doc)
        if changed:
            self._notify()
        return changed

    def restore(self, doc: ClusterDoc) -> None:
        """Our own persisted document, at startup: merged, but it says nothing about who is alive."""
        newest = doc.max_stamp()
        if newest is not None:
            self.clock.observe(newest)
        if self._merge(doc):
            self._notify()

    def note_sync(self, transport: str) -> None:
        self.last_sync[transport] = self._monotonic()

    def live_peers(self, within_s: float) -> list[str]:
        """Replicas whose status advanced within the last `within_s` seconds (not counting us)."""
        now = self._monotonic()
        return sorted(r for r, c in self.contacts.items() if now - c.at <= within_s)

    def _merge(self, delta: ClusterDoc) -> bool:
        merged = self.doc.merge(delta)
        if merged is self.doc:
            return False
        self.doc = merged
        return True

    def _notify(self) -> None:
        for watcher in self._watchers:
            try:
                watcher(self.doc)
            except Exception:  # a watcher's bug must not stop replication
                log.exception("cluster document watcher failed")
