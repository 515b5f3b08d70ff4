"""The tenant store's databases for tests (import the `*_fixture` names; tests ask for `database_url`): a file SQLite database, and a PostgreSQL database of the test
module's own (`sits_t1_<random>` on the local server, created for the module and dropped after it)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator

import asyncpg
import pytest

PG_SERVER = "postgresql://postgres@127.0.0.1:5432"


async def _admin(sql: str) -> None:
    connection = await asyncpg.connect(PG_SERVER + "/postgres")
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


async def empty_database(url: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    finally:
        await connection.close()


@pytest.fixture(scope="module", name="pg_database")
def pg_database_fixture() -> Iterator[str]:
    name = f"sits_t1_{secrets.token_hex(4)}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    yield f"{PG_SERVER}/{name}"
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["sqlite", "postgresql"], name="database_url")
def database_url_fixture(request, tmp_path) -> str:
    """An empty database of each kind: one test runs against both."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tenants.sqlite3'}"
    url = request.getfixturevalue("pg_database")
    asyncio.run(empty_database(url))
    return url
