"""Admission as the director sees it: one priority gate per model, sized by the adaptive
concurrency limits of that model's endpoints, fed by every upstream exchange."""

from __future__ import annotations

from collections.abc import Callable

from sits.pipeline.admission import PriorityGates, Ticket, gate_policy, limiter_factory
from sits.pipeline.priority import CLASSES, priority_rules
from sits.state.admission_config import AdmissionConfig
from sits.state.concurrency_limit import EndpointLimits, LatencySample
from sits.state.routing_table import RoutingTable
from sits.tuples import new_tuple


class Admission:
    def __init__(self, config: AdmissionConfig, table: Callable[[], RoutingTable], clock: Callable[[], float]) -> None:
        self.limits = EndpointLimits(limiter_factory(config))
        self.rules = priority_rules(config)
        # Each model's gate size, cached: the gate asks on every acquire and release, but it only
        # changes when an endpoint's limiter moves or the routing table is swapped.
        self._totals: dict[str, int] = {}
        self._table_version = -1

        def limit_for(model: str) -> Callable[[], int]:
            def limit() -> int:
                current = table()
                if current.version != self._table_version:
                    self._totals.clear()
                    self._table_version = current.version
                total = self._totals.get(model)
                if total is None:
                    entry = current.models.get(model)
                    total = self.limits.total(e.id for e in entry.endpoints) if entry is not None else 0
                    if entry is not None and entry.max_concurrency is not None:
                        total = min(total, entry.max_concurrency)  # the operator's cap on the whole model
                    self._totals[model] = total
                return total
            return limit

        self.gates = PriorityGates(limit_for, gate_policy(config), clock)

    def try_admit(self, model: str, priority: int) -> Ticket | None:
        """A ticket at once when the model's gate has a free slot and no queue; None: `admit` must wait."""
        return self.gates.get(model).try_acquire(CLASSES[priority])

    async def admit(self, model: str, priority: int, now: float) -> Ticket:
        cls = CLASSES[priority]  # an index, not Priority(priority): the enum call is far dearer
        return await self.gates.get(model).acquire(cls, self.gates.policy.deadline(cls, now))

    def observe(self, endpoint_id: str, rtt_s: float, in_flight: int, dropped: bool, now: float) -> None:
        """`in_flight`: on that endpoint when the request was sent, this one included."""
        limiter = self.limits.get(endpoint_id)
        before = limiter.limit
        if limiter.update(new_tuple(LatencySample, (rtt_s, in_flight, dropped, now))) != before:
            self._totals.clear()
