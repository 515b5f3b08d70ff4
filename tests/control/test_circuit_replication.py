"""Circuit transitions travel between replicas; stale ones do not trip anyone."""

from __future__ import annotations

from sits.control.circuit_replication import CircuitReplication
from sits.state.circuit_breaker import BreakerPolicy, CircuitBreakers
from sits.state.crdt import HybridClock, LWWMap, Stamp
from sits.state.replication.document import ClusterDoc
from sits.state.replication.records import CircuitNote
from sits.state.replication.replica import Replica


class Node:
    def __init__(self, name: str, wall: list[int]) -> None:
        self.now = 0.0
        self.replica = Replica(name, HybridClock(name, lambda: wall[0]), lambda: self.now)
        self.breakers = CircuitBreakers(BreakerPolicy(failure_threshold=2, open_s=5.0))
        self.sync = CircuitReplication(self.replica, self.breakers, lambda: self.now)
        self.replica.watch(self.sync.on_document)


def exchange(a: Node, b: Node) -> None:
    b.replica.receive(a.replica.doc, "test")
    a.replica.receive(b.replica.doc, "test")


def test_an_open_circuit_spreads_and_a_successful_trial_closes_it_everywhere():
    wall = [10_000]
    a, b = Node("a", wall), Node("b", wall)
    a.breakers.on_failure("m/ep-0", 0.0)
    exchange(a, b)
    assert b.breakers.state("m/ep-0", 0.0) == "closed"  # one failure is not news
    a.breakers.on_failure("m/ep-0", 0.0)
    exchange(a, b)
    assert a.breakers.state("m/ep-0", 0.0) == b.breakers.state("m/ep-0", 0.0) == "open"
    assert not b.breakers.allows("m/ep-0", 1.0)  # b holds traffic back without failing once itself

    b.now = a.now = 6.0  # open period over: b sends the trial, and it succeeds
    assert b.breakers.allows("m/ep-0", 6.0)
    b.breakers.on_attempt("m/ep-0", 6.0)
    b.breakers.on_success("m/ep-0")
    exchange(a, b)
    assert a.breakers.state("m/ep-0", 6.0) == "closed"
    assert not a.replica.doc.circuits.get("m/ep-0") == CircuitNote("open", 5.0)


def test_an_open_older_than_its_period_does_not_trip_a_late_joiner():
    wall = [100_000]
    late = Node("late", wall)
    old_open = ClusterDoc(circuits=LWWMap[CircuitNote]().put("m/ep-0", CircuitNote("open", 5.0),
                                                             Stamp(100_000 - 6_000, 0, "a")))
    late.replica.receive(old_open, "test")
    assert late.breakers.state("m/ep-0", 0.0) == "closed"
    fresh_open = ClusterDoc(circuits=LWWMap[CircuitNote]().put("m/ep-1", CircuitNote("open", 5.0),
                                                               Stamp(100_000 - 1_000, 0, "a")))
    late.replica.receive(fresh_open, "test")
    assert late.breakers.state("m/ep-1", 0.0) == "open"


def test_a_replicated_transition_is_not_announced_again():
    wall = [10_000]
    a, b = Node("a", wall), Node("b", wall)
    sent: list[ClusterDoc] = []
    b.replica.add_outbox(sent.append)
    a.breakers.on_failure("m/ep-0", 0.0)
    a.breakers.on_failure("m/ep-0", 0.0)
    b.replica.receive(a.replica.doc, "test")
    assert b.breakers.state("m/ep-0", 0.0) == "open"
    assert all(not d.circuits.entries for d in sent)
