"""Files uploaded through POST /v1/files, kept in memory for later `file_id` content parts.

Bounded in total bytes (oldest out first) and in age; ids are 96 random bits, so only the
client that uploaded a file (or one it gave the id to) can name it.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


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
    def __init__(self, max_bytes: int, ttl_s: float, clock: Callable[[], float], wall: Callable[[], float]) -> None:
        self._max_bytes = max_bytes
        self._ttl_s = ttl_s
        self._clock = clock
        self._wall = wall
        self._files: OrderedDict[str, StoredFile] = OrderedDict()
        self._bytes = 0

    def put(self, filename: str, media_type: str, purpose: str, data: bytes) -> StoredFile:
        self._expire()
        stored = StoredFile("file-" + os.urandom(12).hex(), filename, media_type, purpose, data, self._wall(),
                            self._clock())
        self._files[stored.id] = stored
        self._bytes += len(data)
        while self._bytes > self._max_bytes and len(self._files) > 1:
            _, old = self._files.popitem(last=False)
            self._bytes -= len(old.data)
        return stored

    def get(self, file_id: str) -> StoredFile | None:
        self._expire()
        return self._files.get(file_id)

    def _expire(self) -> None:
        deadline = self._clock() - self._ttl_s
        while self._files:
            oldest = next(iter(self._files.values()))
            if oldest.stored_at >= deadline:
                return
            self._files.popitem(last=False)
            self._bytes -= len(oldest.data)
