"""Replace a file's contents atomically: a reader (another worker process) sees the old bytes or the
new ones, never a torn file. Not durable across a machine crash (no fsync): for state that is
republished every second anyway; durable files use `SnapshotFile` or SQLite."""

from __future__ import annotations

import os
from pathlib import Path


def replace_file(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # one writer per process: never shared
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
