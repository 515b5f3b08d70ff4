"""The alias switch state machine, derived from the replicated document; the switchboard's overlay."""

from __future__ import annotations

import random
import time
from types import MappingProxyType

import pytest

from sits.control.alias_phase import alias_phase
from sits.control.aliases import AliasSwitchboard
from sits.errors import Conflict, UnprocessableRequest
from sits.state.crdt import HybridClock, LWWMap, Stamp
from sits.state.endpoint_stats import StatsStore
from sits.state.replication.records import AliasProgress, AliasRoute, ReplicaStatus
from sits.state.replication.replica import Replica
from sits.state.routing_table import Endpoint, ModelEntry, RoutingTable

S = Stamp(100, 0, "r1")
OLDER, NEWER = Stamp(50, 0, "r2"), Stamp(200, 0, "r3")
SWITCH = AliasRoute("m@v2", "m@v1")


def statuses(**progress: AliasProgress | None) -> LWWMap[ReplicaStatus]:
    m = LWWMap[ReplicaStatus]()
    for member, p in progress.items():
        m = m.put(member, ReplicaStatus("h", {} if p is None else {"chat": p}), Stamp(1, 0, member))
    return m


@pytest.mark.parametrize(
    ("route", "progress", "phase"),
    [
        (SWITCH, {"r1": AliasProgress(S, True), "r2": None}, "switching"),  # r2 has not heard of it
        (SWITCH, {"r1": AliasProgress(S, True), "r2": AliasProgress(OLDER, True)}, "switching"),  # r2 is behind
        (SWITCH, {"r1": AliasProgress(S, True), "r2": AliasProgress(S, False)}, "draining"),
        (SWITCH, {"r1": AliasProgress(S, True), "r2": AliasProgress(NEWER, True)}, "retired"),  # r2 is ahead
        (SWITCH, {"r1": AliasProgress(S, True), "r2": AliasProgress(S, True)}, "retired"),
        (AliasRoute("m@v2"), {"r1": AliasProgress(S, True)}, "active"),  # first assignment: nothing to drain
        (AliasRoute("m@v2", "m@v1", 0.1), {"r1": AliasProgress(S, False)}, "canary"),
        (AliasRoute("m@v2", "m@v1", 0.1), {"r1": None}, "canary"),
    ],
)
def test_phase(route, progress, phase):
    assert alias_phase("chat", route, S, statuses(**progress), sorted(progress)) == phase


def test_a_member_that_left_does_not_hold_a_switch_back():
    s = statuses(r1=AliasProgress(S, True), r2=None)
    assert alias_phase("chat", SWITCH, S, s, ["r1", "r2"]) == "switching"
    assert alias_phase("chat", SWITCH, S, s, ["r1"]) == "retired"


def table(*names: str, aliases: dict[str, str] | None = None) -> RoutingTable:
    models = {n: ModelEntry(n, (Endpoint(f"{n}/ep-0", n, n, "http", "127.0.0.1", 9, "/v1"),)) for n in names}
    return RoutingTable(MappingProxyType(models), MappingProxyType(aliases or {}))


def board() -> tuple[AliasSwitchboard, Replica]:
    r = Replica("r1", HybridClock("r1", lambda: time.time_ns() // 1_000_000), time.monotonic)
    return AliasSwitchboard(r, random.Random(3)), r


def test_overlay_applies_replicated_routes_only_where_the_target_is_served():
    sb, r = board()
    base = table("m@v1", "m@v2", aliases={"chat": "m@v1"})
    sb.switch(base, "chat", "m@v2", None)
    sb.switch(base, "ghost", "m@v2", None)
    assert dict(sb.overlay(base).aliases) == {"chat": "m@v2", "ghost": "m@v2"}
    lacking = table("m@v1", aliases={"chat": "m@v1"})  # a replica that does not serve v2 yet
    assert dict(sb.overlay(lacking).aliases) == {"chat": "m@v1"}
    assert sb.progress(sb.overlay(lacking), StatsStore()) == {}  # and it does not claim to route by it


def test_canary_split_follows_the_weight():
    sb, _ = board()
    base = table("m@v1", "m@v2", aliases={"chat": "m@v1"})
    sb.switch(base, "chat", "m@v2", 0.2)
    served = sb.overlay(base)
    picks = [served.resolve("chat").name for _ in range(2000)]  # type: ignore[union-attr]
    assert 0.17 < picks.count("m@v2") / len(picks) < 0.23


def switch_and_serve(sb: AliasSwitchboard, base: RoutingTable, served: RoutingTable, to: str) -> RoutingTable:
    sb.switch(served, "chat", to, None)
    new = sb.overlay(base)
    sb.note_served(served, new)
    return new


def test_drained_only_when_nothing_is_in_flight_on_the_old_version():
    sb, r = board()
    base = table("m@v1", "m@v2", aliases={"chat": "m@v1"})
    stats = StatsStore()
    stats.get("m@v1/ep-0").started()  # a request on the old version, in flight
    served = switch_and_serve(sb, base, sb.overlay(base), "m@v2")
    assert not sb.progress(served, stats)["chat"].drained
    stats.get("m@v1/ep-0").finished(0.1, ok=True)
    assert sb.progress(served, stats)["chat"].drained


def test_a_version_two_switches_back_still_drains():
    sb, r = board()
    base = table("m@v1", "m@v2", "m@v3", aliases={"chat": "m@v1"})
    stats = StatsStore()
    stats.get("m@v1/ep-0").started()
    served = switch_and_serve(sb, base, sb.overlay(base), "m@v2")
    served = switch_and_serve(sb, base, served, "m@v3")  # previous is v2, but v1 still has a request here
    assert not sb.progress(served, stats)["chat"].drained
    stats.get("m@v1/ep-0").finished(0.1, ok=True)
    assert sb.progress(served, stats)["chat"].drained


def test_switch_refuses_bad_input_without_changing_anything():
    sb, r = board()
    base = table("m@v1", "m@v2", aliases={"chat": "m@v1"})
    with pytest.raises(UnprocessableRequest) as err:
        sb.switch(base, "chat", "m@v9", None)
    assert err.value.param == "to"
    with pytest.raises(Conflict):
        sb.switch(base, "m@v1", "m@v2", None)
    with pytest.raises(UnprocessableRequest) as err:
        sb.switch(base, "new", "m@v2", 0.5)
    assert err.value.param == "canary_weight"
    assert list(r.doc.aliases.items()) == []


def test_epochs_count_switches_and_previous_tracks_the_version_being_left():
    sb, _ = board()
    base = table("m@v1", "m@v2", "m@v3", aliases={"chat": "m@v1"})
    first = sb.switch(base, "chat", "m@v2", 0.1)
    assert (first.previous, first.epoch, first.is_canary) == ("m@v1", 1, True)
    promoted = sb.switch(sb.overlay(base), "chat", "m@v2", None)  # same target: promote, still leaving v1
    assert (promoted.previous, promoted.epoch, promoted.is_canary) == ("m@v1", 2, False)
    onward = sb.switch(sb.overlay(base), "chat", "m@v3", None)
    assert (onward.previous, onward.epoch) == ("m@v2", 3)
