"""Aliases that switch between model versions on every replica, without a coordinator.

A switch is one last-writer-wins register write, stamped by this replica's hybrid logical
clock: concurrent switches on different replicas resolve to the same winner everywhere (the
later stamp; the replica id breaks ties). New requests follow the winner as soon as a replica
merges it (its routing table is rebuilt and swapped in whole); requests already in flight keep
the table they started with and finish on the old version, which then drains and retires
(see alias_phase). Aliases from the config file are the base; replicated switches override them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from sits.control.alias_phase import Phase, alias_phase, member_progress
from sits.errors import Conflict, UnprocessableRequest
from sits.state.crdt.hlc import Stamp
from sits.state.crdt.lww_map import LWWMap
from sits.state.endpoint_stats import StatsStore
from sits.state.replication.document import ClusterDoc
from sits.state.replication.records import AliasProgress, AliasRoute
from sits.state.replication.replica import Replica
from sits.state.routing_table import AliasSplit, RoutingTable


@dataclass(frozen=True, slots=True)
class AliasView:
    alias: str
    target: str
    previous: str | None
    canary_weight: float
    epoch: int
    stamp: Stamp | None  # None: straight from the config file, never switched
    phase: Phase
    replicas: dict[str, dict[str, bool]]

    def to_json(self) -> dict[str, Any]:
        return {
            "alias": self.alias, "target": self.target, "previous": self.previous,
            "canary_weight": self.canary_weight, "epoch": self.epoch, "phase": self.phase,
            "stamp": None if self.stamp is None else self.stamp.to_wire(), "replicas": self.replicas,
        }


class AliasSwitchboard:
    def __init__(self, replica: Replica, rng: random.Random) -> None:
        self._replica = replica
        self._draw = rng.random
        # Per alias, the models this replica routed it to before and may still have requests on.
        # Local knowledge: after v1 -> v2 -> v3 in quick succession, v1 can still be draining here.
        self._leaving: dict[str, set[str]] = {}

    def note_served(self, old: RoutingTable | None, new: RoutingTable) -> None:
        """The served table changed: the models an alias no longer routes to start draining."""
        if old is None:
            return
        for alias, target in old.aliases.items():
            before = {target} | ({old.splits[alias].stable} if alias in old.splits else set())
            after = {new.aliases.get(alias)} | ({new.splits[alias].stable} if alias in new.splits else set())
            if before - after:
                self._leaving.setdefault(alias, set()).update(before - after)

    def overlay(self, table: RoutingTable) -> RoutingTable:
        """`table` (from the registry) with the replicated aliases on top. A route whose target this
        replica does not serve is skipped (the config alias, if any, stays) until the model appears."""
        aliases = dict(table.aliases)
        splits: dict[str, AliasSplit] = {}
        for alias, route in self._replica.doc.aliases.items():
            if alias in table.models or route.target not in table.models:
                continue
            aliases[alias] = route.target
            if route.is_canary and route.previous in table.models:
                assert route.previous is not None
                splits[alias] = AliasSplit(route.previous, route.canary_weight, self._draw)
        return replace(table, aliases=MappingProxyType(aliases), splits=MappingProxyType(splits))

    def switch(self, served: RoutingTable, alias: str, to: str, canary_weight: float | None) -> AliasRoute:
        """Plan and commit a switch at once (no persistence step in between)."""
        route, delta = self.plan_switch(served, alias, to, canary_weight)
        self._replica.commit(delta)
        return route

    def plan_switch(self, served: RoutingTable, alias: str, to: str,
                    canary_weight: float | None) -> tuple[AliasRoute, ClusterDoc]:
        """Point `alias` at model `to` on every replica (`canary_weight`: only that share of new requests):
        validated whole, stamped, returned as a delta for the caller to persist and then commit."""
        if alias in served.models:
            raise Conflict(f"'{alias}' is a model, not an alias; pick another alias name", param="alias")
        if to not in served.models:
            hint = f"; '{to}' is an alias" if to in served.aliases else ""
            raise UnprocessableRequest(f"'to': no model named '{to}' is served here{hint}", param="to")
        current = self._replica.doc.aliases.get(alias)
        current_target = current.target if current is not None else served.aliases.get(alias)
        previous = current_target if current_target != to else (current.previous if current is not None else None)
        weight = 1.0 if canary_weight is None else canary_weight
        if weight < 1.0 and (previous is None or previous not in served.models):
            raise UnprocessableRequest(
                f"'canary_weight': alias '{alias}' has no current model for the other {1 - weight:.0%} of requests",
                param="canary_weight")
        route = AliasRoute(to, previous, weight, (current.epoch if current is not None else 0) + 1)
        return route, ClusterDoc(aliases=LWWMap[AliasRoute]().put(alias, route, self._replica.stamp()))

    def progress(self, served: RoutingTable, stats: StatsStore) -> dict[str, AliasProgress]:
        """This replica's progress through each replicated switch, for its status entry: it routes by
        the switch, and (drained) nothing is in flight here on a version the alias routed to before."""
        out = {}
        for alias, leaving in list(self._leaving.items()):
            in_use = {served.aliases.get(alias)} | ({served.splits[alias].stable} if alias in served.splits else set())
            leaving -= {m for m in leaving if m in in_use or _in_flight(served, stats, m) == 0}
            if not leaving:
                del self._leaving[alias]
        for alias, register in self._replica.doc.aliases.entries.items():
            route = register.value
            if route is None or served.aliases.get(alias) != route.target:
                continue  # not routing by it (yet): its target is not served here
            out[alias] = AliasProgress(register.stamp, not route.is_canary and alias not in self._leaving)
        return out

    def views(self, served: RoutingTable, members: list[str]) -> list[AliasView]:
        doc = self._replica.doc
        views = []
        for alias in sorted({*served.aliases, *(a for a, _ in doc.aliases.items())}):
            register = doc.aliases.entries.get(alias)
            route = register.value if register is not None else None
            if route is None or register is None:
                if alias not in served.aliases:
                    continue  # removed, and no config alias underneath
                views.append(AliasView(alias, served.aliases[alias], None, 1.0, 0, None, "active", {}))
                continue
            views.append(AliasView(
                alias, route.target, route.previous, route.canary_weight, route.epoch, register.stamp,
                alias_phase(alias, route, register.stamp, doc.replicas, members),
                member_progress(alias, register.stamp, doc.replicas, members),
            ))
        return views


def _in_flight(served: RoutingTable, stats: StatsStore, model: str) -> int:
    entry = served.models.get(model)
    return 0 if entry is None else sum(stats.get(e.id).in_flight for e in entry.endpoints)
