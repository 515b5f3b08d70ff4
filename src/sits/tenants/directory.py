"""The live key directory: every key and team in memory, what the data plane reads per request.

Lookups are one dict read (`by_hash`); nothing touches the database on a request (the module is
compiled with the request path: docs/hot-path.md). A background task reads the store's version every
`refresh_s` and, only when it moved, loads a snapshot and swaps both
dicts whole (readers see the old or the new, never a mix). A change made through this replica is
announced to the others through the cluster document (`announce`, tenants/key_notices.py), which poke
their directories: a key revoked or changed through any replica stops working (or changes) on every
replica within the replication bound plus one snapshot load, and polling bounds it by `refresh_s` when
a notice is lost; on the replica that made the change, before its answer (`catch_up`). Time-based ends
(`expires_at`, a rotated secret's `valid_until`) are exact: the gate checks `KeyRecord.usable_at(now)`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from sits.runtime.tasks import cancel_and_wait
from sits.tenants.records import KeyRecord, TeamRecord
from sits.tenants.store import Snapshot, TenantStore

log = logging.getLogger("sits.tenants")


class LiveKeyDirectory:
    """A `KeyDirectory` (tenants/records.py) and a `Runnable` (runtime/runnable.py)."""

    name = "sits-key-directory"

    def __init__(self, store: TenantStore, refresh_s: float) -> None:
        self._store = store
        self._refresh_s = refresh_s
        self._by_hash: dict[bytes, KeyRecord] = {}
        self._teams: dict[str, TeamRecord] = {}
        self.version = -1  # the store version the dicts reflect
        self._poked = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        # Set when replicas share a cluster transport (tenants/key_notices.py): a change made here is announced.
        self.announce: Callable[[int], None] | None = None

    def by_hash(self, key_hash: bytes) -> KeyRecord | None:
        return self._by_hash.get(key_hash)

    def team(self, team_id: str) -> TeamRecord | None:
        return self._teams.get(team_id)

    def keys(self) -> list[KeyRecord]:
        """Every key record (one per secret: a key in a rotation overlap appears more than once)."""
        return list(self._by_hash.values())

    def teams(self) -> list[TeamRecord]:
        return list(self._teams.values())

    def __len__(self) -> int:
        return len(self._by_hash)

    async def refresh(self) -> bool:
        """Reload when the store's version moved; whether it did."""
        if await self._store.version() == self.version:
            return False
        self.load(await self._store.snapshot())
        return True

    def load(self, snapshot: Snapshot) -> None:
        """Hold `snapshot`'s keys and teams: both dicts swapped whole (readers see the old or the new)."""
        self._by_hash = {key.key_hash: key for key in snapshot.keys}
        self._teams = {team.team_id: team for team in snapshot.teams}
        self.version = snapshot.version

    def poke(self) -> None:
        """Refresh soon, in the background."""
        self._poked.set()

    async def catch_up(self) -> None:
        """Refresh now (this replica just wrote to the store): its next request sees the change. A failure
        is logged, not raised: the change is committed, and the background refresh retries."""
        try:
            await self.refresh()
        except Exception:
            log.exception("key directory refresh failed; retrying in the background")
            self.poke()
        if self.announce is not None:  # the other replicas reload now, not at their next poll
            self.announce(self.version)

    async def start(self) -> None:
        await self.refresh()  # the first request already sees every key
        self._task = asyncio.get_running_loop().create_task(self._follow(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait([task])

    async def _follow(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._poked.wait(), self._refresh_s)
            except TimeoutError:
                pass
            self._poked.clear()
            try:
                await self.refresh()
            except Exception:  # a database that cannot be read now may be readable at the next tick
                if not self._failing:  # once per outage, not every tick
                    log.exception("key directory refresh failed; serving the keys loaded at version %d",
                                  self.version)
                self._failing = True
            else:
                if self._failing:
                    log.info("key directory refresh works again (version %d)", self.version)
                self._failing = False
