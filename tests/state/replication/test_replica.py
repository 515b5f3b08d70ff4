"""A replica's bookkeeping: local commits go out as deltas, remote documents come in, clocks follow."""

from __future__ import annotations

from sits.state.crdt import HybridClock, LWWMap, Stamp
from sits.state.replication.document import ClusterDoc
from sits.state.replication.records import AliasRoute, ReplicaStatus
from sits.state.replication.replica import Replica
from tests.state.replication.docs import alias_doc


class Clocks:
    def __init__(self) -> None:
        self.wall = 1_000
        self.mono = 0.0


def make(name: str, clocks: Clocks) -> Replica:
    return Replica(name, HybridClock(name, lambda: clocks.wall, max_ahead_ms=10_000), lambda: clocks.mono)


def test_commit_sends_the_delta_and_tells_watchers():
    clocks = Clocks()
    r = make("r1", clocks)
    sent, seen = [], []
    r.add_outbox(sent.append)
    r.watch(seen.append)
    delta = alias_doc("chat", AliasRoute("m@v2", "m@v1"), r.stamp())
    r.commit(delta)
    assert sent == [delta] and seen == [r.doc] and r.doc.aliases.get("chat") == AliasRoute("m@v2", "m@v1")
    r.commit(delta)  # nothing new: still sent (cheap), but watchers are not woken
    assert len(seen) == 1


def test_receive_merges_observes_the_clock_and_notes_contacts():
    clocks = Clocks()
    r = make("r1", clocks)
    remote_stamp = Stamp(5_000, 3, "r2")  # r2's clock is ahead of ours
    status = ClusterDoc(replicas=LWWMap[ReplicaStatus]().put("r2", ReplicaStatus("h"), remote_stamp))
    assert r.receive(status, "redis")
    assert r.stamp() > remote_stamp  # our next event orders after what we saw
    assert r.contacts["r2"].via == "redis" and r.live_peers(1.0) == ["r2"]
    clocks.mono = 5.0
    assert r.live_peers(1.0) == []  # not heard from for too long
    assert not r.receive(status, "http")  # a duplicate teaches nothing


def test_a_stamp_from_a_clock_far_ahead_is_refused_whole():
    clocks = Clocks()
    r = make("r1", clocks)
    future = alias_doc("chat", AliasRoute("m@v9"), Stamp(clocks.wall + 60_000, 0, "r2"))
    assert not r.receive(future, "http")
    assert r.doc == ClusterDoc() and r.rejected == 1


def test_restore_does_not_count_as_hearing_from_anyone():
    clocks = Clocks()
    r = make("r1", clocks)
    saved = ClusterDoc(replicas=LWWMap[ReplicaStatus]().put("r2", ReplicaStatus("h"), Stamp(900, 0, "r2")))
    r.restore(saved)
    assert r.doc == saved and r.live_peers(100.0) == []
