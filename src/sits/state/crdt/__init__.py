"""Conflict-free replicated values: pure, frozen, each with a `merge()` that is commutative,
associative and idempotent, so replicas that have seen the same updates hold equal values,
in whatever order, how often and by whatever route the updates arrived.

Order is (hybrid logical clock, replica id), never wall clock alone.
"""

from sits.state.crdt.gcounter import GCounter, VersionVector
from sits.state.crdt.hlc import HybridClock, Stamp
from sits.state.crdt.lww_map import LWWMap
from sits.state.crdt.lww_register import LWWRegister
from sits.state.crdt.or_set import ORSet
from sits.state.crdt.pncounter import PNCounter

__all__ = ["GCounter", "HybridClock", "LWWMap", "LWWRegister", "ORSet", "PNCounter", "Stamp", "VersionVector"]
