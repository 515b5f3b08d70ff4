"""Deltas waiting for a transport, merged into one pending delta: however long the transport is
down, what waits is never larger than the document itself."""

from __future__ import annotations

import asyncio

from sits.state.replication.document import ClusterDoc


class CoalescingOutbox:
    def __init__(self) -> None:
        self._pending: ClusterDoc | None = None
        self._ready = asyncio.Event()

    def put(self, delta: ClusterDoc) -> None:
        self._pending = delta if self._pending is None else self._pending.merge(delta)
        self._ready.set()

    async def take(self) -> ClusterDoc:
        await self._ready.wait()
        self._ready.clear()
        pending, self._pending = self._pending, None
        assert pending is not None
        return pending
