"""The little the tenant store needs from a SQL database, so one store speaks SQLite and PostgreSQL.

SQL is written once, with PostgreSQL's `$1` placeholders; the SQLite backend rewrites them to its `?1`.
Writes happen in `transaction()`: SQLite takes the write lock up front (BEGIN IMMEDIATE), PostgreSQL runs
the block in one transaction; either commits whole or not at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal, Protocol

from sits.tenants.migrations import Migration

Dialect = Literal["sqlite", "postgresql"]
Row = Sequence[Any]


class Tx(Protocol):
    async def execute(self, sql: str, *args: Any) -> int:
        """Run one statement; the number of rows it changed."""
        ...

    async def fetch(self, sql: str, *args: Any) -> list[Row]: ...

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...


class Database(Protocol):
    dialect: Dialect

    def transaction(self) -> AbstractAsyncContextManager[Tx]: ...

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        """A read outside any write transaction."""
        ...

    async def migrate(self, migrations: Sequence[Migration]) -> int:
        """Apply the migrations not applied yet, under a lock several replicas may race for; the schema version."""
        ...

    async def close(self) -> None: ...

