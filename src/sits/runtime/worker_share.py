"""`/metrics` and the dashboard across `sits serve --workers N`: every worker's figures, whichever
worker a request reaches.

The kernel hands each connection to one worker process, so a scrape or a dashboard poll reaches one
process's state. Each worker therefore publishes its documents (metric families, dashboard state) to
a folder the workers of one run share (one JSON file per worker and kind, replaced atomically), once a
second and whenever it answers; an answer merges its own live state with the others' latest files,
which are at most about a second old.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from sits.runtime.atomic_file import replace_file

log = logging.getLogger("sits.telemetry")

Publisher = Callable[[], Any]  # builds this worker's document of one kind (a JSON-able value)


class WorkerShare:
    def __init__(self, folder: Path, worker: int, interval_s: float = 1.0) -> None:
        self.folder = folder
        self.worker = worker
        self._interval_s = interval_s
        self._publishers: dict[str, Publisher] = {}
        self._task: asyncio.Task[None] | None = None

    def add(self, kind: str, publisher: Publisher) -> None:
        """Publish `publisher()` as this worker's document of `kind` every interval (from `start`)."""
        self._publishers[kind] = publisher

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.publish_all()
        self._task = asyncio.get_running_loop().create_task(self._publish_every_interval(), name="sits-worker-share")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.publish_all()  # the last figures stay for the workers still answering

    def publish_all(self) -> None:
        for kind, publisher in self._publishers.items():
            self.write(kind, publisher())

    def write(self, kind: str, doc: Any) -> None:
        path = self.folder / f"{kind}-{self.worker}.json"
        try:
            replace_file(path, orjson.dumps(doc))
        except OSError as exc:  # a full disk must not break this worker's own answers
            log.warning("could not publish %s to %s: %s", kind, path, exc)

    def gather(self, kind: str, own: Any) -> dict[int, Any]:
        """Every worker's document of `kind`: this one's `own` (also published), the others' latest."""
        self.write(kind, own)
        docs = {self.worker: own}
        for path in sorted(self.folder.glob(f"{kind}-*.json")):
            try:
                worker = int(path.stem.rsplit("-", 1)[1])
                if worker not in docs:
                    docs[worker] = orjson.loads(path.read_bytes())
            except (OSError, ValueError):
                continue  # a file being replaced, or not one of ours: skip it this time
        return docs

    async def _publish_every_interval(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            self.publish_all()
