"""Hypothesis strategies for CRDT values and operation schedules."""

from __future__ import annotations

from hypothesis import strategies as st

from sits.state.crdt import GCounter, LWWMap, LWWRegister, ORSet, PNCounter, Stamp

REPLICAS = ("r1", "r2", "r3")
replica = st.sampled_from(REPLICAS)
stamps = st.builds(Stamp, st.integers(0, 50), st.integers(0, 3), replica)


def gcounters() -> st.SearchStrategy[GCounter]:
    return st.dictionaries(replica, st.integers(0, 20)).map(GCounter)


def pncounters() -> st.SearchStrategy[PNCounter]:
    return st.builds(PNCounter, gcounters(), gcounters())


def registers() -> st.SearchStrategy[LWWRegister[str]]:
    return st.builds(LWWRegister, st.sampled_from(["a", "b", "c"]), stamps)


def lww_maps() -> st.SearchStrategy[LWWMap[str]]:
    value = st.one_of(st.none(), st.sampled_from(["v1", "v2", "v3"]))
    return st.dictionaries(st.sampled_from(["k1", "k2", "k3"]), st.builds(LWWRegister, value, stamps)).map(LWWMap)


@st.composite
def or_sets(draw: st.DrawFn) -> ORSet[str]:
    """Built by operations, so dots are minted the way replicas mint them."""
    s: ORSet[str] = ORSet()
    for op, r, e in draw(st.lists(st.tuples(st.booleans(), replica, st.sampled_from("xyz")), max_size=8)):
        s = s.add(r, e) if op else s.remove(e)
    return s


ALL_KINDS = {
    "g-counter": gcounters(),
    "pn-counter": pncounters(),
    "lww-register": registers(),
    "lww-map": lww_maps(),
    "or-set": or_sets(),
}
