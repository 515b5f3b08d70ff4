"""The last N routing decisions with their outcome, for the dashboard's live view (bounded)."""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Decision:
    at: float  # unix time
    request_id: str
    model: str
    endpoint: str
    route: str  # the x-sits-route value: profile, pick, reason
    status: int
    latency_ms: float
    attempts: str


class DecisionLog:
    def __init__(self, capacity: int) -> None:
        self._items: deque[Decision] = deque(maxlen=max(1, capacity))
        self.enabled = capacity > 0

    def add(self, decision: Decision) -> None:
        self._items.append(decision)

    def recent(self, limit: int) -> list[dict[str, Any]]:
        """Newest first."""
        items = list(self._items)[-limit:] if limit > 0 else []
        return [asdict(d) for d in reversed(items)]
