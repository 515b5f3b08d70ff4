"""The one cell holding the routing table the data plane reads now.

The registry (models) and the cluster node (replicated aliases) both publish into it; readers call it
once per request and keep the table they got, so a change never half-applies to a request.
"""

from __future__ import annotations

from sits.state.routing_table import RoutingTable


class LiveTable:
    def __init__(self) -> None:
        self._table: RoutingTable | None = None

    def __call__(self) -> RoutingTable:
        table = self._table
        assert table is not None, "no routing table yet: the gateway has not started"
        return table

    @property
    def current(self) -> RoutingTable | None:
        """The table, or None before the first one is published."""
        return self._table

    def publish(self, table: RoutingTable) -> RoutingTable | None:
        """Swap in `table` (one reference swap) and return the one it replaces."""
        old, self._table = self._table, table
        return old
