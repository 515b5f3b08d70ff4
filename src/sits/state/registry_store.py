"""Durable storage for the model registry: opaque records by name, with a version.

SQLite because it gives what the registry promises with no server to run: a commit either
happens whole or not at all, survives a crash of the process or the machine once it returned
(WAL journal, synchronous=FULL: the log is fsynced before COMMIT returns), and a crash
mid-write leaves the previous state.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping, Set
from dataclasses import dataclass
from pathlib import Path

from sits.runtime.sqlite_wal import into_wal

_SCHEMA_VERSION = 1
_BUSY_TIMEOUT_S = 10.0


class RegistryStoreError(Exception):
    """The store could not be read or written (disk full, I/O error, corrupt or foreign file)."""


class StaleRegistryVersion(RegistryStoreError):
    """The stored version is not the one the change was based on: someone else committed first."""

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(f"registry changed underneath: expected version {expected}, stored version is {actual}")
        self.expected = expected
        self.actual = actual


@dataclass(frozen=True, slots=True)
class StoredRegistry:
    """One consistent reading: `records` is the caller's own copy."""

    version: int
    records: dict[str, bytes]


class RegistryStore:
    """Registry records in one SQLite file; version 0 is the empty registry.

    Blocking by design: every method does file I/O, so async callers must run them in a
    thread (`await asyncio.to_thread(store.commit, ...)`). Calls from any threads are
    serialised by a lock. The file is opened on first use, so constructing is cheap and
    does no I/O. Several stores (or processes) may share a file: the optimistic version
    check under SQLite's write lock keeps their commits from overwriting each other.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def load(self) -> StoredRegistry:
        with self._lock:
            db = self._open()
            try:
                db.execute("BEGIN")  # one snapshot for both reads
                try:
                    version = _stored_version(db)
                    records = {key: bytes(value) for key, value in db.execute("SELECT key, value FROM records")}
                finally:
                    db.execute("ROLLBACK")
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc
        return StoredRegistry(version, records)

    def stored_version(self) -> int:
        """The committed version alone: a cheap way to see whether another process changed the store."""
        with self._lock:
            try:
                return _stored_version(self._open())
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc

    def commit(self, expected_version: int, upserts: Mapping[str, bytes], deletes: Set[str]) -> int:
        """Apply every upsert and delete in one transaction, or none; return the new version.

        Raises `StaleRegistryVersion` (nothing applied) if the stored version is not
        `expected_version`, `ValueError`/`TypeError` for a malformed change, and
        `RegistryStoreError` if SQLite fails (rolled back: the previous state stands).
        Deleting an absent name is a no-op. Once this returns, the change is durable.
        """
        for key, value in upserts.items():
            if not isinstance(key, str) or not isinstance(value, bytes | bytearray | memoryview):
                raise TypeError(f"registry record {key!r} must map a str to bytes")
        rows = [(key, bytes(value)) for key, value in upserts.items()]
        if any(not isinstance(key, str) for key in deletes):
            raise TypeError("registry deletes must be names (str)")
        both = upserts.keys() & deletes
        if both:
            raise ValueError(f"names both upserted and deleted in one change: {sorted(both)}")
        with self._lock:
            db = self._open()
            try:
                # IMMEDIATE takes the write lock before reading the version, so no other
                # writer can commit between the check and our write.
                db.execute("BEGIN IMMEDIATE")
                try:
                    stored = _stored_version(db)
                    if stored != expected_version:
                        raise StaleRegistryVersion(expected_version, stored)
                    db.executemany("DELETE FROM records WHERE key = ?", [(key,) for key in deletes])
                    db.executemany(
                        "INSERT INTO records (key, value) VALUES (?, ?)"
                        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        rows,
                    )
                    db.execute("UPDATE meta SET value = ? WHERE key = 'version'", (stored + 1,))
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc
        return stored + 1

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _open(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Autocommit mode: transactions are the explicit BEGIN/COMMIT above, never implicit.
            db = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise RegistryStoreError(f"cannot open registry store {self.path}: {exc}") from exc
        try:
            into_wal(db, _BUSY_TIMEOUT_S)  # several workers may open a new file together
            db.execute("PRAGMA synchronous = FULL")
            db.execute("BEGIN IMMEDIATE")
            (schema,) = db.execute("PRAGMA user_version").fetchone()
            if schema > _SCHEMA_VERSION:
                raise RegistryStoreError(
                    f"registry store {self.path} has schema {schema}, newer than this SITS ({_SCHEMA_VERSION})"
                )
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            db.execute("CREATE TABLE IF NOT EXISTS records (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
            db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('version', 0)")
            db.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException as exc:
            db.close()
            if isinstance(exc, sqlite3.Error):
                raise self._translate(exc) from exc
            raise
        self._db = db
        return db

    def _translate(self, exc: sqlite3.Error) -> RegistryStoreError:
        return RegistryStoreError(f"registry store {self.path}: {exc}")


def _stored_version(db: sqlite3.Connection) -> int:
    row = db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
    if row is None:
        raise RegistryStoreError("registry store has no version row")
    return int(row[0])
