"""The cluster document: everything the replicas share, as one CRDT (a product of CRDTs,
merged field by field, so it is one too). A delta is a document holding only what changed."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import orjson

from sits.state.crdt.gcounter import GCounter
from sits.state.crdt.hlc import Stamp
from sits.state.crdt.lww_map import LWWMap
from sits.state.replication.records import AliasRoute, CircuitNote, ReplicaStatus


@dataclass(frozen=True, slots=True)
class ClusterDoc:
    aliases: LWWMap[AliasRoute] = field(default_factory=LWWMap)  # alias -> route; switch epochs ride along
    replicas: LWWMap[ReplicaStatus] = field(default_factory=LWWMap)  # replica id -> its own status
    served: GCounter = field(default_factory=GCounter)  # requests served, per replica
    circuits: LWWMap[CircuitNote] = field(default_factory=LWWMap)  # endpoint id -> last circuit transition
    registry: LWWMap[str] = field(default_factory=LWWMap)  # model name -> registration (JSON) or tombstone
    # replica id -> the tenant store version its last key or team change committed (tenants/key_notices.py)
    key_versions: LWWMap[int] = field(default_factory=LWWMap)

    def merge(self, other: ClusterDoc) -> ClusterDoc:
        if other is self:
            return self
        merged = ClusterDoc(
            self.aliases.merge(other.aliases),
            self.replicas.merge(other.replicas),
            self.served.merge(other.served),
            self.circuits.merge(other.circuits),
            self.registry.merge(other.registry),
            self.key_versions.merge(other.key_versions),
        )
        return self if merged == self else merged

    def max_stamp(self) -> Stamp | None:
        stamps = [m.max_stamp() for m in (self.aliases, self.replicas, self.circuits, self.registry, self.key_versions)]
        return max((s for s in stamps if s is not None), default=None)

    def state_hash(self) -> str:
        """A digest of what every replica must agree on (aliases, registry): equal on converged replicas.
        Statuses, counters, circuits and key-store versions move all the time and are left out."""
        canonical = {
            "aliases": {k: [r.stamp.to_wire(), _route(r.value)] for k, r in sorted(self.aliases.entries.items())},
            "registry": {k: [r.stamp.to_wire(), r.value] for k, r in sorted(self.registry.entries.items())},
        }
        return hashlib.sha256(orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _route(route: AliasRoute | None) -> list[object] | None:
    if route is None:
        return None
    return [route.target, route.previous, route.canary_weight, route.epoch]
