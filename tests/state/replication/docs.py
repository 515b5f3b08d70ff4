"""Cluster documents for tests: hypothesis strategies and a few builders."""

from __future__ import annotations

from hypothesis import strategies as st

from sits.state.crdt import GCounter, LWWMap, LWWRegister, Stamp
from sits.state.replication.document import ClusterDoc
from sits.state.replication.records import AliasProgress, AliasRoute, CircuitNote, ReplicaStatus

REPLICAS = ("r1", "r2", "r3")
stamps = st.builds(Stamp, st.integers(0, 30), st.integers(0, 2), st.sampled_from(REPLICAS))
routes = st.builds(AliasRoute, st.sampled_from(["m@v1", "m@v2", "m@v3"]),
                   st.sampled_from([None, "m@v1", "m@v2"]), st.sampled_from([0.1, 0.5, 1.0]), st.integers(1, 4))
statuses = st.builds(ReplicaStatus, st.sampled_from(["h1", "h2"]),
                     st.dictionaries(st.sampled_from(["a1", "a2"]), st.builds(AliasProgress, stamps, st.booleans()),
                                     max_size=2))
circuits = st.builds(CircuitNote, st.sampled_from(["open", "closed"]), st.sampled_from([0.0, 5.0]))


def _lww(keys: list[str], values: st.SearchStrategy) -> st.SearchStrategy:
    return st.dictionaries(st.sampled_from(keys), st.builds(LWWRegister, st.one_of(st.none(), values), stamps),
                           max_size=3).map(LWWMap)


docs = st.builds(
    ClusterDoc,
    aliases=_lww(["a1", "a2"], routes),
    replicas=_lww(list(REPLICAS), statuses),
    served=st.dictionaries(st.sampled_from(REPLICAS), st.integers(0, 9)).map(GCounter),
    circuits=_lww(["m@v1/ep-0", "m@v2/ep-0"], circuits),
    registry=_lww(["m@v4"], st.sampled_from(['{"name": "m@v4"}', '{"name": "m@v4", "tier": "base"}'])),
)


def alias_doc(alias: str, route: AliasRoute, stamp: Stamp) -> ClusterDoc:
    return ClusterDoc(aliases=LWWMap[AliasRoute]().put(alias, route, stamp))
