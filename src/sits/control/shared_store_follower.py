"""With `--workers N` the processes share the registry's store and the adapters' file: each worker
re-reads both every `interval_s`, so a change made through one worker reaches the others within that
bound (each change also syncs first, so none is lost)."""

from __future__ import annotations

import asyncio
import logging

from sits.control.adapters.registry import AdapterRegistry
from sits.control.registry import Registry

log = logging.getLogger("sits")

SYNC_S = 0.5


class SharedStoreFollower:
    def __init__(self, registry: Registry, adapters: AdapterRegistry, interval_s: float = SYNC_S) -> None:
        self._registry = registry
        self._adapters = adapters
        self._interval_s = interval_s

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self._registry.sync()
                await self._adapters.sync()  # adapter registrations and activations, in their own store
            except Exception:  # a store that cannot be read now may be readable at the next tick
                log.exception("registry sync failed")
