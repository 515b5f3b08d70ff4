"""The production tenant database: PostgreSQL through asyncpg (imported on first use).

A small connection pool for the admin API and the directory's refresh, plus one connection of its own
for the spend log's bulk writes (its staging table is a temporary table on that connection). Migrations
run under a session advisory lock, so replicas that start together apply each migration exactly once:
the first takes the lock and migrates, the others wait and then find nothing left to do.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from sits.tenants.database import Row
from sits.tenants.migrations import SCHEMA_VERSION_TABLE, Migration

if TYPE_CHECKING:
    import asyncpg

# pg_advisory_lock's key: any constant the gateway alone uses ("SITS" "TNNT" as a bigint).
MIGRATION_LOCK = 0x53495453_544E4E54
_POOL_SIZE = 4


class PostgresDatabase:
    dialect = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = url
        self._pool: asyncpg.Pool | None = None
        self._opening = asyncio.Lock()

    async def pool(self) -> asyncpg.Pool:
        async with self._opening:
            if self._pool is None:
                import asyncpg

                self._pool = await asyncpg.create_pool(self.url, min_size=1, max_size=_POOL_SIZE)
            return self._pool

    async def connect(self) -> asyncpg.Connection:
        """A connection of its own, outside the pool (the spend log's writer)."""
        import asyncpg

        return await asyncpg.connect(self.url)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_PostgresTx]:
        async with (await self.pool()).acquire() as connection, connection.transaction():
            yield _PostgresTx(connection)

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        return list(await (await self.pool()).fetch(sql, *args))

    async def migrate(self, migrations: Sequence[Migration]) -> int:
        connection = await self.connect()
        try:
            await connection.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
            try:
                await connection.execute(SCHEMA_VERSION_TABLE)
                applied = {r[0] for r in await connection.fetch("SELECT version FROM schema_version")}
                for migration in migrations:
                    if migration.version in applied:
                        continue
                    async with connection.transaction():  # each migration whole or not at all
                        for statement in migration.for_dialect(self.dialect):
                            await connection.execute(statement)
                        await connection.execute(
                            "INSERT INTO schema_version (version, description, applied_at) VALUES ($1, $2, $3)",
                            migration.version, migration.description, time.time())
                return int(await connection.fetchval("SELECT coalesce(max(version), 0) FROM schema_version"))
            finally:
                await connection.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)
        finally:
            await connection.close()

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


class _PostgresTx:
    def __init__(self, connection: asyncpg.Connection) -> None:
        self._connection = connection

    async def execute(self, sql: str, *args: Any) -> int:
        status = await self._connection.execute(sql, *args)
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        return list(await self._connection.fetch(sql, *args))

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        await self._connection.executemany(sql, rows)
