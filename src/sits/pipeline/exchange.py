"""One upstream exchange as the API edge consumes it; records its outcome when the body ends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from sits.backends.http_client import UpstreamResponse
from sits.state.endpoint_stats import EndpointStats
from sits.state.routing_table import Endpoint


class Exchange:
    __slots__ = ("endpoint", "model", "route", "response", "_stats", "_clock", "_started", "_open")

    def __init__(
        self,
        endpoint: Endpoint,
        model: str,
        route: str,
        response: UpstreamResponse,
        stats: EndpointStats,
        clock: Callable[[], float],
        started: float,
    ) -> None:
        self.endpoint = endpoint
        self.model = model
        self.route = route
        self.response = response
        self._stats = stats
        self._clock = clock
        self._started = started
        self._open = True

    async def read(self) -> bytes:
        ok = False
        try:
            body = await self.response.read()
            ok = True
            return body
        finally:
            self._finish(ok)

    async def chunks(self) -> AsyncIterator[bytes]:
        ok = False
        try:
            async for chunk in self.response.iter_chunks():
                yield chunk
            ok = True
        finally:
            self.response.close()
            self._finish(ok)

    def _finish(self, ok: bool) -> None:
        if self._open:
            self._open = False
            self._stats.finished(self._clock() - self._started, ok)
