"""Random schedules of operations and merges over an unreliable network converge.

Each example: three replicas apply random local operations (stamped by their own hybrid clocks,
whose wall clocks are skewed and may step back) and send deltas or full states to each other over a
network that shuffles, duplicates and drops messages. After one reliable anti-entropy round, every
replica holds the same value, and nothing a replica did is lost.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from sits.state.crdt import GCounter, HybridClock, LWWMap, ORSet, PNCounter

REPLICAS = ("r1", "r2", "r3")


@dataclass(frozen=True)
class State:
    """A bundle of every CRDT kind, merged field by field (a product of semilattices is one)."""

    hits: GCounter = field(default_factory=GCounter)
    balance: PNCounter = field(default_factory=PNCounter)
    aliases: LWWMap[str] = field(default_factory=LWWMap)
    members: ORSet[str] = field(default_factory=ORSet)

    def merge(self, other: State) -> State:
        return State(self.hits.merge(other.hits), self.balance.merge(other.balance),
                     self.aliases.merge(other.aliases), self.members.merge(other.members))


class Wall:
    def __init__(self, start: int) -> None:
        self.ms = start

    def __call__(self) -> int:
        return self.ms


@dataclass
class Node:
    name: str
    wall: Wall
    clock: HybridClock
    state: State = field(default_factory=State)

    def apply(self, op: str, arg: int) -> State:
        """Apply one local operation; return its delta (the part a peer needs)."""
        if op == "count":
            delta = State(hits=GCounter({self.name: self.state.hits.get(self.name) + arg}))
        elif op == "add":
            delta = State(balance=PNCounter().add(self.name, arg - 3).merge(self.state.balance))
        elif op == "switch":
            delta = State(aliases=LWWMap[str]().put(f"alias{arg % 2}", f"m@v{arg}", self.clock.tick()))
        elif op == "unalias":
            delta = State(aliases=LWWMap[str]().remove(f"alias{arg % 2}", self.clock.tick()))
        elif op == "join":
            delta = State(members=self.state.members.add(self.name, f"e{arg}"))
        else:  # leave
            delta = State(members=self.state.members.remove(f"e{arg}"))
        self.state = self.state.merge(delta)
        return delta

    def receive(self, message: State) -> None:
        stamp = message.aliases.max_stamp()
        if stamp is not None:
            self.clock.observe(stamp)
        self.state = self.state.merge(message)


OPS = ("count", "add", "switch", "unalias", "join", "leave")
step = st.one_of(
    st.tuples(st.just("op"), st.integers(0, 2), st.sampled_from(OPS), st.integers(0, 5)),
    st.tuples(st.just("send"), st.integers(0, 2), st.integers(0, 2), st.booleans()),  # full state or last delta
    st.tuples(st.just("tick"), st.integers(0, 2), st.integers(-5, 20), st.booleans()),  # wall clocks drift, step back
    st.tuples(st.just("deliver"), st.integers(0, 2), st.integers(0, 10), st.booleans()),
)


@settings(max_examples=1000, deadline=None)
@given(schedule=st.lists(step, min_size=1, max_size=40), seed=st.integers(0, 2**32 - 1),
       drop_rate=st.sampled_from([0.0, 0.3, 0.7]), dup_rate=st.sampled_from([0.0, 0.3]))
def test_random_schedules_over_a_lossy_network_converge(schedule, seed, drop_rate, dup_rate):
    rng = random.Random(seed)
    nodes = []
    for i, name in enumerate(REPLICAS):
        wall = Wall(1000 + 37 * i)  # skewed clocks
        nodes.append(Node(name, wall, HybridClock(name, wall)))
    last_delta = [State() for _ in nodes]
    in_flight: list[tuple[int, State]] = []  # (destination, message): delivered in any order
    counted = 0
    for kind, a, b, c in schedule:
        if kind == "op":
            last_delta[a] = nodes[a].apply(b, c)
            counted += c if b == "count" else 0
        elif kind == "send":
            message = nodes[a].state if c else last_delta[a]
            if rng.random() >= drop_rate:
                in_flight.append((b, message))
                if rng.random() < dup_rate:
                    in_flight.append((b, message))
        elif kind == "tick":
            nodes[a].wall.ms = max(0, nodes[a].wall.ms + b)
        elif in_flight:  # deliver some message, not necessarily the oldest
            dest, message = in_flight.pop(rng.randrange(len(in_flight)))
            nodes[dest].receive(message)
    rng.shuffle(in_flight)
    for dest, message in in_flight[: len(in_flight) // 2]:  # some stragglers arrive late, the rest are lost
        nodes[dest].receive(message)

    # One reliable anti-entropy round: everyone sends its full state to everyone, in a random order.
    snapshots = [n.state for n in nodes]
    order = [(src, dst) for src in range(3) for dst in range(3) if src != dst]
    rng.shuffle(order)
    for src, dst in order:
        nodes[dst].receive(snapshots[src])

    final = nodes[0].state
    assert all(n.state == final for n in nodes)
    assert final.hits.value == counted  # no increment lost or double-counted despite duplicates
    assert final == snapshots[0].merge(snapshots[1]).merge(snapshots[2])
