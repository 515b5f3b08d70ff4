"""Files uploaded through POST /v1/files, kept in memory for later `file_id` content parts.

Bounded in total bytes (oldest out first) and in age; ids are 96 random bits, so only the
client that uploaded a file (or one it gave the id to) can name it. With `sits serve --workers N`
the upload and the request naming it may reach different worker processes, so each upload is also
written to the folder the workers of the run share, and a worker that does not hold an id in
memory reads it from there (same age limit; removed when its uploader evicts or expires it).
"""

from __future__ import annotations

import logging
import os
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from sits.runtime.atomic_file import replace_file

_FILE_ID = re.compile(r"file-[0-9a-f]{24}")
log = logging.getLogger("sits.workflows")


@dataclass(frozen=True, slots=True)
class StoredFile:
    id: str
    filename: str
    media_type: str
    purpose: str
    data: bytes
    created_at: float  # wall clock seconds, as OpenAI's `created_at`
    stored_at: float  # monotonic, for expiry

    def file_object(self) -> dict[str, object]:
        """The OpenAI `file` object."""
        return {"id": self.id, "object": "file", "bytes": len(self.data), "created_at": int(self.created_at),
                "filename": self.filename, "purpose": self.purpose, "status": "processed"}


class UploadStore:
    def __init__(self, max_bytes: int, ttl_s: float, clock: Callable[[], float], wall: Callable[[], float],
                 shared_dir: Path | None = None) -> None:
        """`shared_dir`: the workers' shared upload folder (`--workers N`), or None for one process."""
        self._max_bytes = max_bytes
        self._ttl_s = ttl_s
        self._clock = clock
        self._wall = wall
        self._files: OrderedDict[str, StoredFile] = OrderedDict()
        self._bytes = 0
        self._shared = shared_dir
        if shared_dir is not None:
            shared_dir.mkdir(parents=True, exist_ok=True)

    def put(self, filename: str, media_type: str, purpose: str, data: bytes) -> StoredFile:
        self._expire()
        stored = StoredFile("file-" + os.urandom(12).hex(), filename, media_type, purpose, data, self._wall(),
                            self._clock())
        self._files[stored.id] = stored
        self._bytes += len(data)
        self._share(stored)
        while self._bytes > self._max_bytes and len(self._files) > 1:
            _, old = self._files.popitem(last=False)
            self._bytes -= len(old.data)
            self._unshare(old.id)
        return stored

    def get(self, file_id: str) -> StoredFile | None:
        self._expire()
        stored = self._files.get(file_id)
        if stored is None and self._shared is not None and _FILE_ID.fullmatch(file_id):
            stored = self._from_share(file_id)
        return stored

    # -- the workers' shared folder -------------------------------------------------------------

    def _share(self, stored: StoredFile) -> None:
        if self._shared is None:
            return
        meta = {"filename": stored.filename, "media_type": stored.media_type, "purpose": stored.purpose,
                "created_at": stored.created_at}
        try:
            for suffix, payload in ((".bin", stored.data), (".json", orjson.dumps(meta))):  # the data first
                replace_file(self._shared / f"{stored.id}{suffix}", payload)
        except OSError as exc:  # still usable through this worker; other workers will not find it
            log.warning("could not share upload %s with the other workers: %s", stored.id, exc)

    def _unshare(self, file_id: str) -> None:
        if self._shared is not None:
            for suffix in (".json", ".bin"):
                (self._shared / f"{file_id}{suffix}").unlink(missing_ok=True)

    def _from_share(self, file_id: str) -> StoredFile | None:
        assert self._shared is not None
        try:
            meta = orjson.loads((self._shared / f"{file_id}.json").read_bytes())
            data = (self._shared / f"{file_id}.bin").read_bytes()
        except (OSError, ValueError):
            return None  # not uploaded in this run, evicted, or expired
        age = self._wall() - float(meta["created_at"])
        if age > self._ttl_s:
            return None
        return StoredFile(file_id, meta["filename"], meta["media_type"], meta["purpose"], data, meta["created_at"],
                          self._clock() - age)

    def _expire(self) -> None:
        deadline = self._clock() - self._ttl_s
        while self._files:
            oldest = next(iter(self._files.values()))
            if oldest.stored_at >= deadline:
                return
            self._files.popitem(last=False)
            self._bytes -= len(oldest.data)
            self._unshare(oldest.id)
