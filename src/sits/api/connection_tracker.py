"""A server's live connections: for draining on shutdown, and for closing idle keep-alive connections
with one periodic sweep rather than a timer per request. Shared by the HTTP/1.1 and HTTP/2 doors."""

from __future__ import annotations

import asyncio
from typing import Protocol


class TrackedConnection(Protocol):
    idle_since: float | None  # loop time the connection last became idle; None while a request is on it

    @property
    def busy(self) -> bool: ...

    def close(self) -> None: ...


class ConnectionTracker:
    def __init__(self) -> None:
        self.connections: set[TrackedConnection] = set()
        self._sweeper: asyncio.TimerHandle | None = None

    def start_idle_sweep(self, idle_timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        period = max(0.5, idle_timeout_s / 4)

        def sweep() -> None:
            deadline = loop.time() - idle_timeout_s
            for conn in list(self.connections):
                if conn.idle_since is not None and conn.idle_since < deadline:
                    conn.close()
            self._sweeper = loop.call_later(period, sweep)

        self._sweeper = loop.call_later(period, sweep)

    def stop_idle_sweep(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    def busy(self) -> int:
        return sum(1 for c in self.connections if c.busy)

    def close_idle(self) -> None:
        for conn in list(self.connections):
            if not conn.busy:
                conn.close()

    def close_all(self) -> None:
        for conn in list(self.connections):
            conn.close()
