"""Models registered at runtime, on every replica: the registry's control-API changes ride in the
cluster document as a last-writer-wins map (model name -> record JSON, or a tombstone).

A change made here is published after it is persisted locally; a change from another replica is
applied through the registry like a local one (validated, URL-guarded, persisted) but without
echoing it back. Concurrent changes of one model resolve to the later stamp on every replica.
A replicated change this replica refuses (a config model of that name here, a key variable not
set here, an address its policy forbids) is logged and counted, and the local state stays.
"""

from __future__ import annotations

import asyncio
import logging

from sits.control.registry import Registry
from sits.control.registry_records import ModelRecord, record_from_json, record_to_json
from sits.errors import SitsError
from sits.state.crdt.hlc import Stamp
from sits.state.crdt.lww_map import LWWMap
from sits.state.replication.document import ClusterDoc
from sits.state.replication.replica import Replica

log = logging.getLogger("sits.cluster")


class RegistryReplication:
    def __init__(self, replica: Replica, registry: Registry) -> None:
        self._replica = replica
        self._registry = registry
        self._applied: dict[str, Stamp] = {}  # per model, the newest stamp applied (or published) here
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self.refused = 0
        registry.on_change = self._publish

    def _publish(self, upserts: dict[str, ModelRecord], deletes: set[str]) -> None:
        entries: LWWMap[str] = LWWMap()
        for name, record in upserts.items():
            entries = entries.put(name, record_to_json(record).decode(), stamp := self._replica.stamp())
            self._applied[name] = stamp
        for name in deletes:
            entries = entries.remove(name, stamp := self._replica.stamp())
            self._applied[name] = stamp
        self._replica.commit(ClusterDoc(registry=entries))

    def on_document(self, doc: ClusterDoc) -> None:
        """Apply, in the background and in order, whatever registry entries are newer than ours."""
        fresh = {name: reg for name, reg in doc.registry.entries.items()
                 if name not in self._applied or reg.stamp > self._applied[name]}
        if not fresh:
            return
        for name, reg in fresh.items():
            self._applied[name] = reg.stamp
        task = asyncio.get_running_loop().create_task(self._apply({n: r.value for n, r in fresh.items()}))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _apply(self, entries: dict[str, str | None]) -> None:
        async with self._lock:
            upserts, deletes = {}, set()
            for name, data in entries.items():
                if data is None:
                    deletes.add(name)
                    continue
                try:
                    upserts[name] = record_from_json(data)
                except ValueError as exc:
                    self.refused += 1
                    log.warning("cluster: ignoring replicated model %r: bad record: %s", name, exc)
            try:
                await self._registry.apply_replicated(upserts, deletes)
            except SitsError as exc:
                self.refused += 1
                log.warning("cluster: replicated registry change %s refused here: %s",
                            sorted(entries), exc.message)

    async def settle(self) -> None:
        """Wait for the replicated changes in progress (at shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
