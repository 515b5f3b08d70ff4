"""Switching a SQLite file to WAL when several processes may open it at once.

SQLite answers `PRAGMA journal_mode=WAL` with "database is locked" at once, without its busy handler
(that wait could deadlock), while another connection holds the file: what happens when the processes of
`sits serve --workers N` open a new file together. The switch is retried for a bounded time instead.
"""

from __future__ import annotations

import sqlite3
import time


def into_wal(db: sqlite3.Connection, timeout_s: float) -> None:
    """Put `db` in WAL mode, retrying a locked file for up to `timeout_s`; other errors are raised."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
