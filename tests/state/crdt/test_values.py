"""Behaviour of each CRDT value, table-driven where it fits."""

from __future__ import annotations

import pytest

from sits.state.crdt import GCounter, HybridClock, LWWMap, LWWRegister, ORSet, PNCounter, Stamp


class FakeWall:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def test_hlc_ticks_are_strictly_increasing_even_when_the_wall_clock_stands_still_or_goes_back():
    wall = FakeWall(1000)
    clock = HybridClock("r1", wall)
    first = clock.tick()
    wall.ms = 900  # the wall clock stepped back
    second, third = clock.tick(), clock.tick()
    assert first < second < third
    assert (second.wall_ms, second.logical) == (1000, 1)


def test_hlc_observed_remote_event_orders_before_the_next_local_one_despite_a_slow_clock():
    slow = HybridClock("r1", FakeWall(1000))
    remote = Stamp(5000, 7, "r2")  # r2's clock runs ahead
    assert slow.observe(remote)
    assert slow.tick() > remote


def test_hlc_refuses_a_stamp_far_in_the_future():
    clock = HybridClock("r1", FakeWall(1000), max_ahead_ms=10_000)
    assert not clock.observe(Stamp(1000 + 60_000, 0, "r2"))
    assert clock.tick().wall_ms == 1000


@pytest.mark.parametrize(
    ("a", "b", "winner"),
    [
        (Stamp(10, 0, "r1"), Stamp(9, 5, "r2"), "a"),  # later wall time wins
        (Stamp(10, 1, "r1"), Stamp(10, 0, "r2"), "a"),  # same wall time: the logical counter decides
        (Stamp(10, 1, "r1"), Stamp(10, 1, "r2"), "b"),  # full tie: the replica id decides
    ],
)
def test_lww_register_orders_by_hlc_then_replica(a, b, winner):
    ra, rb = LWWRegister("a", a), LWWRegister("b", b)
    assert ra.merge(rb).value == winner
    assert rb.merge(ra).value == winner


def test_gcounter_counts_per_replica_and_refuses_to_shrink():
    c = GCounter().increment("r1", 3).increment("r2").increment("r1")
    assert c.value == 5 and c.get("r1") == 4
    with pytest.raises(ValueError):
        c.increment("r1", -1)
    assert c.merge(GCounter({"r1": 2, "r3": 7})).counts == {"r1": 4, "r2": 1, "r3": 7}


@pytest.mark.parametrize(
    ("a", "b", "order"),
    [
        ({"r1": 1}, {"r1": 1}, "equal"),
        ({"r1": 1}, {"r1": 2}, "before"),
        ({"r1": 2, "r2": 1}, {"r1": 2}, "after"),
        ({"r1": 2}, {"r2": 1}, "concurrent"),
    ],
)
def test_version_vector_causal_order(a, b, order):
    assert GCounter(a).compare(GCounter(b)) == order


def test_pncounter_goes_both_ways_and_merges():
    a = PNCounter().add("r1", 5).add("r1", -2)
    b = PNCounter().add("r2", -4)
    assert a.merge(b).value == -1


def test_lww_map_tombstone_wins_only_when_later():
    m = LWWMap[str]().put("chat", "v1", Stamp(10, 0, "r1"))
    removed_later = m.remove("chat", Stamp(11, 0, "r2"))
    assert removed_later.get("chat") is None and list(removed_later.items()) == []
    stale_remove = m.merge(LWWMap[str]().remove("chat", Stamp(9, 0, "r2")))
    assert stale_remove.get("chat") == "v1"
    assert m.max_stamp() == Stamp(10, 0, "r1")


def test_or_set_add_wins_over_a_concurrent_remove():
    base = ORSet[str]().add("r1", "chat@v1")
    removed_on_r1 = base.remove("chat@v1")
    re_added_on_r2 = base.add("r2", "chat@v1")  # r2 had not seen the remove
    assert "chat@v1" in removed_on_r1.merge(re_added_on_r2)
    assert "chat@v1" not in removed_on_r1.merge(base)
    assert removed_on_r1.merge(re_added_on_r2).elements == frozenset({"chat@v1"})
