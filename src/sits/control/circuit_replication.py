"""Circuit breakers shared across replicas: when one replica's breaker opens on an endpoint, the
others open theirs too instead of each spending its own failures to find out; when one replica's
trial request succeeds, the others close theirs.

The transitions ride in the cluster document as a last-writer-wins map (endpoint id -> the last
transition, stamped). An `open` older than its open period (judged on the hybrid clock) is
history, not news: a replica that joins late does not trip on it.
"""

from __future__ import annotations

from collections.abc import Callable

from sits.state.circuit_breaker import CircuitBreakers, CircuitState
from sits.state.crdt.hlc import Stamp
from sits.state.crdt.lww_map import LWWMap
from sits.state.replication.document import ClusterDoc
from sits.state.replication.records import CircuitNote
from sits.state.replication.replica import Replica


class CircuitReplication:
    def __init__(self, replica: Replica, breakers: CircuitBreakers, monotonic: Callable[[], float]) -> None:
        self._replica = replica
        self._breakers = breakers
        self._monotonic = monotonic
        self._applied: dict[str, Stamp] = {}
        breakers.on_transition = self._publish

    def _publish(self, endpoint_id: str, state: CircuitState) -> None:
        stamp = self._replica.stamp()
        self._applied[endpoint_id] = stamp
        note = CircuitNote(state, self._breakers.policy.open_s if state == "open" else 0.0)
        self._replica.commit(ClusterDoc(circuits=LWWMap[CircuitNote]().put(endpoint_id, note, stamp)))

    def on_document(self, doc: ClusterDoc) -> None:
        now_ms = self._replica.clock.peek().wall_ms
        for endpoint_id, register in doc.circuits.entries.items():
            known = self._applied.get(endpoint_id)
            if known is not None and register.stamp <= known:
                continue
            self._applied[endpoint_id] = register.stamp
            note = register.value
            if note is None:
                continue
            if note.state == "closed":
                self._breakers.reset(endpoint_id)
            elif now_ms - register.stamp.wall_ms < note.open_s * 1000:
                self._breakers.trip(endpoint_id, self._monotonic())

    def describe(self) -> dict[str, dict[str, object]]:
        """The last transition seen per endpoint, for GET /v1/cluster."""
        now_ms = self._replica.clock.peek().wall_ms
        return {ep: {"state": note.state, "by": stamp.replica, "age_ms": max(0, now_ms - stamp.wall_ms)}
                for ep, note in self._replica.doc.circuits.items()
                if (stamp := self._replica.doc.circuits.stamp(ep)) is not None}
