"""The last N routing decisions with their outcome, for the dashboard's live view (bounded).

Kept as plain tuples: building a dataclass per request cost more than the rest of the record.
"""

from __future__ import annotations

from collections import deque
from typing import Any

FIELDS = ("at", "request_id", "model", "endpoint", "route", "status", "latency_ms", "attempts")
# In FIELDS order, but the latency is recorded in seconds and shown in ms; `at` is unix time.
Decision = tuple[float, str, str, str, str, int, float, str]


class DecisionLog:
    def __init__(self, capacity: int) -> None:
        self._items: deque[Decision] = deque(maxlen=max(1, capacity))
        self.enabled = capacity > 0

    def add(self, decision: Decision) -> None:
        self._items.append(decision)

    def recent(self, limit: int) -> list[dict[str, Any]]:
        """Newest first."""
        items = list(self._items)[-limit:] if limit > 0 else []
        return [dict(zip(FIELDS, (*d[:6], round(d[6] * 1000, 3), d[7]), strict=True)) for d in reversed(items)]
