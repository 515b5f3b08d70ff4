"""The embedded tenant database: one SQLite file in the gateway's data dir, so `sits serve` needs no server.

One connection per process, used from worker threads one call at a time (an asyncio lock orders them);
several processes (`--workers N`) share the file through SQLite's own locking (WAL, busy timeout). A write
transaction starts with BEGIN IMMEDIATE: it takes the write lock first, so two writers queue instead of
failing half way. Migrations run the same way, which is what makes concurrent starts safe.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sits.runtime.sqlite_wal import into_wal
from sits.tenants.database import Row
from sits.tenants.migrations import SCHEMA_VERSION_TABLE, Migration

_BUSY_TIMEOUT_MS = 30_000
_PLACEHOLDER = re.compile(r"\$(\d+)")


def _sqlite(sql: str) -> str:
    return _PLACEHOLDER.sub(r"?\1", sql)


class SqliteDatabase:
    dialect = "sqlite"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                 timeout=_BUSY_TIMEOUT_MS / 1000)
            db.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            into_wal(db, _BUSY_TIMEOUT_MS / 1000)
            db.execute("PRAGMA synchronous=FULL")  # a committed key or spend batch survives a power loss
            db.execute("PRAGMA foreign_keys=ON")
            self._db = db
        return self._db

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_SqliteTx]:
        async with self._lock:
            db = await self._call(self._connection)
            await self._call(db.execute, "BEGIN IMMEDIATE")
            try:
                yield _SqliteTx(db, self._call)
            except BaseException:
                await asyncio.shield(self._call(db.execute, "ROLLBACK"))
                raise
            await self._call(db.execute, "COMMIT")

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        async with self._lock:
            return await self._call(self._fetch_sync, _sqlite(sql), args)

    def _fetch_sync(self, sql: str, args: tuple[Any, ...]) -> list[Row]:
        return self._connection().execute(sql, args).fetchall()

    def run_sync(self, fn: Any) -> Any:
        """Run `fn(connection)` in a worker thread under the lock (bulk work done in one hop: the spend log)."""
        async def run() -> Any:
            async with self._lock:
                return await self._call(lambda: fn(self._connection()))
        return run()

    async def migrate(self, migrations: Sequence[Migration]) -> int:
        async with self._lock:
            return await self._call(self._migrate_sync, migrations)

    def _migrate_sync(self, migrations: Sequence[Migration]) -> int:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")  # the write lock: a second migrator waits here, then sees our versions
        try:
            db.execute(SCHEMA_VERSION_TABLE)
            applied = {v for (v,) in db.execute("SELECT version FROM schema_version")}
            for migration in migrations:
                if migration.version in applied:
                    continue
                for statement in migration.for_dialect(self.dialect):
                    db.execute(statement)
                db.execute("INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
                           (migration.version, migration.description, time.time()))
            (version,) = db.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return int(version)

    async def close(self) -> None:
        async with self._lock:
            if self._db is not None:
                db, self._db = self._db, None
                await self._call(db.close)


class _SqliteTx:
    def __init__(self, db: sqlite3.Connection, call: Any) -> None:
        self._db = db
        self._call = call

    async def execute(self, sql: str, *args: Any) -> int:
        cursor = await self._call(self._db.execute, _sqlite(sql), args)
        return int(cursor.rowcount)

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        return await self._call(lambda: self._db.execute(_sqlite(sql), args).fetchall())

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        await self._call(self._db.executemany, _sqlite(sql), rows)
