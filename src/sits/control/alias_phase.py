"""Where a switch stands across the cluster, derived from the replicated document alone
(so every replica that holds the same document reports the same phase for the same members).

    switching  some live replica does not route by the new version yet
    draining   all route new requests to it; some still has requests in flight on the old version
    retired    all route to it and none has anything left on the old version: it gets no traffic
    canary     a weighted split: both versions take new requests until the next switch
    active     a first assignment: there was no old version to drain
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from sits.state.crdt.hlc import Stamp
from sits.state.crdt.lww_map import LWWMap
from sits.state.replication.records import AliasProgress, AliasRoute, ReplicaStatus

Phase = Literal["switching", "draining", "retired", "canary", "active"]


def alias_phase(alias: str, route: AliasRoute, stamp: Stamp, statuses: LWWMap[ReplicaStatus],
                members: Iterable[str]) -> Phase:
    progress = [_progress(statuses, member, alias) for member in members]
    if any(p is None or p.stamp < stamp for p in progress):
        return "canary" if route.is_canary else "switching"
    if route.is_canary:
        return "canary"
    if route.previous is None or route.previous == route.target:
        return "active"
    return "retired" if all(p is not None and p.drained for p in progress) else "draining"


def member_progress(alias: str, stamp: Stamp, statuses: LWWMap[ReplicaStatus],
                    members: Iterable[str]) -> dict[str, dict[str, bool]]:
    """Per member: does it route by this switch yet, and has it drained the old version."""
    out = {}
    for member in members:
        p = _progress(statuses, member, alias)
        applied = p is not None and p.stamp >= stamp
        out[member] = {"applied": applied, "drained": applied and p is not None and p.drained}
    return out


def _progress(statuses: LWWMap[ReplicaStatus], member: str, alias: str) -> AliasProgress | None:
    status = statuses.get(member)
    return None if status is None else status.progress.get(alias)
