"""Replication between the worker processes of one `sits serve --workers N`, through a folder.

The workers of a run share a folder on one machine (runtime/worker_share.py makes it), so they
need neither Redis nor HTTP peers to agree on aliases, switches and circuits: each writes its full
document to its own file (replaced atomically) when it changes and every `interval_s`, and merges
every other worker's file on the same period. Merging is the CRDT's, so the order of writes and
reads does not matter; a torn or foreign file is skipped until the next round.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

from sits.runtime.atomic_file import replace_file
from sits.runtime.tasks import cancel_and_wait
from sits.state.replication.outbox import CoalescingOutbox
from sits.state.replication.replica import Replica
from sits.state.replication.wire import WireError, decode, encode

log = logging.getLogger("sits.cluster")

NAME = "workers"
_PREFIX = "cluster-"


class FolderTransport:
    def __init__(self, replica: Replica, folder: Path, interval_s: float = 0.5) -> None:
        self._replica = replica
        self._folder = folder
        self._own = folder / f"{_PREFIX}{re.sub(r'[^A-Za-z0-9._-]', '_', replica.id)}.json"
        self._interval_s = interval_s
        self._outbox = CoalescingOutbox()
        self._tasks: list[asyncio.Task[None]] = []
        replica.add_outbox(self._outbox.put)

    async def start(self) -> None:
        self._folder.mkdir(parents=True, exist_ok=True)
        self._tasks = [asyncio.create_task(self._write_on_change(), name="sits-cluster-workers-push"),
                       asyncio.create_task(self._anti_entropy_loop(), name="sits-cluster-workers-anti-entropy")]

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._write()  # the last state stays for the workers still running

    def exchange(self) -> None:
        """Write this worker's document, merge every other worker's."""
        self._write()
        merged = False
        for path in self._folder.glob(f"{_PREFIX}*.json"):
            if path == self._own:
                continue
            try:
                _, doc = decode(path.read_bytes())
            except (OSError, WireError) as exc:
                log.debug("skipping worker document %s this round: %s", path, exc)
                continue
            self._replica.receive(doc, NAME)
            merged = True
        if merged:
            self._replica.note_sync(NAME)

    def _write(self) -> None:
        try:
            replace_file(self._own, encode(self._replica.doc, self._replica.id))
        except OSError as exc:
            log.warning("cannot write this worker's cluster document to %s: %s", self._own, exc)

    async def _write_on_change(self) -> None:
        while True:
            await self._outbox.take()  # a local change: let the others see it at their next round
            self._write()

    async def _anti_entropy_loop(self) -> None:
        while True:
            self.exchange()
            await asyncio.sleep(self._interval_s)
