"""Teams and keys, durable: the tenant store over SQLite (embedded default) or PostgreSQL (production).

Every write runs in one transaction and moves the store's `version`, so each replica's key directory
notices a change by reading one integer (`version()`) and reloads everything only then (`snapshot()`).
Secrets never reach the store: a key is kept as the keyed hashes of the secrets it has had
(`key_secrets`), each valid until its rotation overlap ends.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sits.errors import ConfigError, Conflict, NotFound, UnprocessableRequest
from sits.tenants import codec
from sits.tenants.database import Database, Row, Tx
from sits.tenants.postgres_database import PostgresDatabase
from sits.tenants.sqlite_database import SqliteDatabase
from sits.tenants.migrations import MIGRATIONS
from sits.tenants.records import KeyRecord, TeamRecord

_TEAM_COLUMNS = "team_id, name, organisation, limits, budget, metadata, created_at, updated_at"
_KEY_COLUMNS = ("key_id, name, team_id, allowed_models, priority, limits, model_limits, budget, expires_at, "
                "revoked_at, metadata, created_at, updated_at")
# Record field -> (column, how its value is stored); what `update_team`/`update_key` may change.
_ENCODERS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "name": ("name", lambda v: v),
    "organisation": ("organisation", lambda v: v),
    "limits": ("limits", lambda v: codec.dumps(codec.limits_dict(v))),
    "budget": ("budget", lambda v: None if v is None else codec.dumps(codec.budget_dict(v))),
    "metadata": ("metadata", lambda v: codec.dumps(dict(v))),
    "allowed_models": ("allowed_models", lambda v: codec.dumps(list(v))),
    "priority": ("priority", lambda v: v),
    "model_limits": ("model_limits", lambda v: codec.dumps(codec.model_limits_dict(v))),
    "expires_at": ("expires_at", lambda v: v),
}
_TEAM_FIELDS = frozenset({"name", "organisation", "limits", "budget", "metadata"})
_KEY_FIELDS = frozenset({"name", "allowed_models", "priority", "limits", "model_limits", "budget", "expires_at",
                         "metadata"})


@dataclass(frozen=True, slots=True)
class TeamEntry:
    record: TeamRecord
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """A key as the admin API shows it: the record (with its current secret's hash) and its older secrets."""

    record: KeyRecord
    created_at: float
    updated_at: float
    # When each older secret stops working (rotation overlap windows still open or recently closed).
    previous_valid_until: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the key directory holds, read in one transaction at `version`."""

    version: int
    teams: tuple[TeamRecord, ...]
    # One record per secret: the key's record with that secret's hash and valid_until.
    keys: tuple[KeyRecord, ...]


class TenantStore:
    """Also a `Runnable`: starting applies the migrations (safe when replicas start together), stopping
    closes the database."""

    name = "sits-tenant-store"

    def __init__(self, db: Database) -> None:
        self.db = db

    async def start(self) -> None:
        try:
            await self.migrate()
        except Exception as exc:
            if isinstance(exc, (OSError, sqlite3.Error)) or type(exc).__module__.startswith("asyncpg"):
                raise ConfigError(f"tenants: cannot open the tenant database: {exc}") from exc
            raise

    async def stop(self) -> None:
        await self.close()

    @classmethod
    def open_url(cls, url: str | None, data_dir: Path) -> TenantStore:
        """The store at `url`; none: `tenants.sqlite3` in the data dir (zero setup)."""
        return cls(open_database(url or f"sqlite:///{data_dir / 'tenants.sqlite3'}"))

    async def migrate(self) -> int:
        return await self.db.migrate(MIGRATIONS)

    async def close(self) -> None:
        await self.db.close()

    async def version(self) -> int:
        rows = await self.db.fetch("SELECT version FROM store_version WHERE id = 1")
        return int(rows[0][0])

    async def snapshot(self) -> Snapshot:
        async with self.db.transaction() as tx:
            version = int((await tx.fetch("SELECT version FROM store_version WHERE id = 1"))[0][0])
            teams = tuple(_team(row).record for row in await tx.fetch(f"SELECT {_TEAM_COLUMNS} FROM teams"))
            keys = {row[0]: _key(row).record for row in await tx.fetch(f"SELECT {_KEY_COLUMNS} FROM keys")}
            secrets = await tx.fetch("SELECT key_hash, key_id, valid_until FROM key_secrets")
        by_secret = tuple(dataclasses.replace(keys[key_id], key_hash=bytes(key_hash), valid_until=valid_until)
                          for key_hash, key_id, valid_until in secrets if key_id in keys)
        return Snapshot(version, teams, by_secret)

    # -- teams ------------------------------------------------------------------

    async def create_team(self, team: TeamRecord, now: float) -> TeamEntry:
        async with self.db.transaction() as tx:
            if await tx.fetch("SELECT 1 FROM teams WHERE team_id = $1", team.team_id):
                raise Conflict(f"team {team.team_id!r} already exists", param="team_id", code="team_exists")
            await tx.execute(
                f"INSERT INTO teams ({_TEAM_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $7)",
                team.team_id, team.name, team.organisation, _encode("limits", team.limits),
                _encode("budget", team.budget), _encode("metadata", team.metadata), now)
            await _bump(tx)
        return TeamEntry(team, now, now)

    async def team(self, team_id: str) -> TeamEntry:
        rows = await self.db.fetch(f"SELECT {_TEAM_COLUMNS} FROM teams WHERE team_id = $1", team_id)
        if not rows:
            raise NotFound(f"no team {team_id!r}", param="team_id", code="team_not_found")
        return _team(rows[0])

    async def teams(self, *, organisation: str | None = None, after: str | None = None,
                    limit: int = 100) -> list[TeamEntry]:
        where, args = _filters({"organisation": organisation}, after, "team_id")
        rows = await self.db.fetch(
            f"SELECT {_TEAM_COLUMNS} FROM teams{where} ORDER BY team_id LIMIT {int(limit)}", *args)
        return [_team(row) for row in rows]

    async def update_team(self, team_id: str, changes: Mapping[str, Any], now: float) -> TeamEntry:
        _check_fields(changes, _TEAM_FIELDS)
        async with self.db.transaction() as tx:
            await _update(tx, "teams", "team_id", team_id, changes, now, "team")
            rows = await tx.fetch(f"SELECT {_TEAM_COLUMNS} FROM teams WHERE team_id = $1", team_id)
            await _bump(tx)
        return _team(rows[0])

    async def delete_team(self, team_id: str) -> None:
        """Refused while the team has keys that are not revoked; its revoked keys go with it."""
        async with self.db.transaction() as tx:
            if not await tx.fetch("SELECT 1 FROM teams WHERE team_id = $1", team_id):
                raise NotFound(f"no team {team_id!r}", param="team_id", code="team_not_found")
            live = [r[0] for r in await tx.fetch(
                "SELECT key_id FROM keys WHERE team_id = $1 AND revoked_at IS NULL ORDER BY key_id", team_id)]
            if live:
                raise Conflict(f"team {team_id!r} still has keys: {', '.join(live)}; revoke them first",
                               param="team_id", code="team_has_keys")
            await tx.execute("DELETE FROM key_secrets WHERE key_id IN (SELECT key_id FROM keys WHERE team_id = $1)",
                             team_id)
            await tx.execute("DELETE FROM keys WHERE team_id = $1", team_id)
            await tx.execute("DELETE FROM teams WHERE team_id = $1", team_id)
            await _bump(tx)

    # -- keys -------------------------------------------------------------------

    async def create_key(self, key: KeyRecord, now: float) -> KeyEntry:
        async with self.db.transaction() as tx:
            if not await tx.fetch("SELECT 1 FROM teams WHERE team_id = $1", key.team_id):
                raise UnprocessableRequest(f"no team {key.team_id!r}: create it first", param="team_id",
                                           code="team_not_found")
            if await tx.fetch("SELECT 1 FROM keys WHERE key_id = $1", key.key_id):
                raise Conflict(f"key {key.key_id!r} already exists", param="key_id", code="key_exists")
            await tx.execute(
                f"INSERT INTO keys ({_KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, $10, $11, $11)",
                key.key_id, key.name, key.team_id, _encode("allowed_models", key.allowed_models), key.priority,
                _encode("limits", key.limits), _encode("model_limits", key.model_limits),
                _encode("budget", key.budget), key.expires_at, _encode("metadata", key.metadata), now)
            await tx.execute("INSERT INTO key_secrets (key_hash, key_id, valid_until, created_at) "
                             "VALUES ($1, $2, NULL, $3)", key.key_hash, key.key_id, now)
            await _bump(tx)
        return KeyEntry(key, now, now)

    async def key(self, key_id: str) -> KeyEntry:
        async with self.db.transaction() as tx:
            return await _key_entry(tx, key_id)

    async def keys(self, *, team_id: str | None = None, after: str | None = None, limit: int = 100) -> list[KeyEntry]:
        where, args = _filters({"team_id": team_id}, after, "key_id")
        rows = await self.db.fetch(f"SELECT {_KEY_COLUMNS} FROM keys{where} ORDER BY key_id LIMIT {int(limit)}", *args)
        if not rows:
            return []
        secrets = await self.db.fetch(
            "SELECT key_id, key_hash, valid_until FROM key_secrets WHERE key_id >= $1 AND key_id <= $2",
            rows[0][0], rows[-1][0])
        return [_with_secrets(_key(row), [s[1:] for s in secrets if s[0] == row[0]]) for row in rows]

    async def update_key(self, key_id: str, changes: Mapping[str, Any], now: float) -> KeyEntry:
        _check_fields(changes, _KEY_FIELDS)
        async with self.db.transaction() as tx:
            await _update(tx, "keys", "key_id", key_id, changes, now, "key")
            await _bump(tx)
            return await _key_entry(tx, key_id)

    async def rotate_key(self, key_id: str, new_hash: bytes, old_valid_until: float, now: float) -> KeyEntry:
        """A new current secret; the current one keeps working until `old_valid_until` (the overlap window).
        Secrets whose window has closed are forgotten."""
        async with self.db.transaction() as tx:
            entry = await _key_entry(tx, key_id)
            if entry.record.revoked_at is not None:
                raise Conflict(f"key {key_id!r} is revoked; create a new key", param="key_id", code="key_revoked")
            await tx.execute("DELETE FROM key_secrets WHERE key_id = $1 AND valid_until IS NOT NULL "
                             "AND valid_until <= $2", key_id, now)
            await tx.execute("UPDATE key_secrets SET valid_until = $2 WHERE key_id = $1 AND "
                             "(valid_until IS NULL OR valid_until > $2)", key_id, old_valid_until)
            await tx.execute("INSERT INTO key_secrets (key_hash, key_id, valid_until, created_at) "
                             "VALUES ($1, $2, NULL, $3)", new_hash, key_id, now)
            await tx.execute("UPDATE keys SET updated_at = $2 WHERE key_id = $1", key_id, now)
            await _bump(tx)
            return await _key_entry(tx, key_id)

    async def revoke_key(self, key_id: str, now: float) -> KeyEntry:
        """Every secret of the key stops working (on every replica once its directory refreshed)."""
        async with self.db.transaction() as tx:
            entry = await _key_entry(tx, key_id)
            if entry.record.revoked_at is None:
                await tx.execute("UPDATE keys SET revoked_at = $2, updated_at = $2 WHERE key_id = $1", key_id, now)
                await _bump(tx)
                return await _key_entry(tx, key_id)
            return entry


def open_database(url: str) -> Database:
    """`sqlite:///<path>` or `postgresql://...`; nothing connects until first use."""
    if url.startswith("sqlite:///"):
        return SqliteDatabase(url.removeprefix("sqlite:///"))
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresDatabase(url)
    raise ConfigError("tenants.database_url must start with sqlite:/// or postgresql://")


# -- rows -----------------------------------------------------------------------


def _encode(field: str, value: Any) -> Any:
    return _ENCODERS[field][1](value)


async def _bump(tx: Tx) -> None:
    await tx.execute("UPDATE store_version SET version = version + 1 WHERE id = 1")


def _check_fields(changes: Mapping[str, Any], allowed: frozenset[str]) -> None:
    unknown = set(changes) - allowed
    if unknown:
        raise UnprocessableRequest(f"'{sorted(unknown)[0]}' cannot be changed", param=sorted(unknown)[0])


async def _update(tx: Tx, table: str, id_column: str, ident: str, changes: Mapping[str, Any], now: float,
                  what: str) -> None:
    sets = [f"{_ENCODERS[f][0]} = ${i}" for i, f in enumerate(changes, start=3)]
    args = [_encode(f, v) for f, v in changes.items()]
    changed = await tx.execute(
        f"UPDATE {table} SET {', '.join(['updated_at = $2', *sets])} WHERE {id_column} = $1", ident, now, *args)
    if not changed:
        raise NotFound(f"no {what} {ident!r}", param=id_column, code=f"{what}_not_found")


def _filters(equal: Mapping[str, str | None], after: str | None, order_column: str) -> tuple[str, list[Any]]:
    clauses, args = [], []
    for column, value in equal.items():
        if value is not None:
            args.append(value)
            clauses.append(f"{column} = ${len(args)}")
    if after is not None:
        args.append(after)
        clauses.append(f"{order_column} > ${len(args)}")
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args


def _team(row: Row) -> TeamEntry:
    team_id, name, organisation, limits, budget, metadata, created_at, updated_at = row
    return TeamEntry(TeamRecord(team_id=team_id, name=name, organisation=organisation,
                                limits=codec.limits_of(codec.loads(limits)), budget=codec.budget_of(codec.loads(budget)),
                                metadata=codec.pairs_of(codec.loads(metadata))), created_at, updated_at)


def _key(row: Row) -> KeyEntry:
    (key_id, name, team_id, allowed_models, priority, limits, model_limits, budget, expires_at, revoked_at, metadata,
     created_at, updated_at) = row
    return KeyEntry(KeyRecord(
        key_id=key_id, name=name, team_id=team_id, key_hash=b"", allowed_models=tuple(codec.loads(allowed_models)),
        priority=priority, limits=codec.limits_of(codec.loads(limits)),
        model_limits=codec.model_limits_of(codec.loads(model_limits)), budget=codec.budget_of(codec.loads(budget)),
        expires_at=expires_at, revoked_at=revoked_at, metadata=codec.pairs_of(codec.loads(metadata))),
        created_at, updated_at)


def _with_secrets(entry: KeyEntry, secrets: Sequence[Row]) -> KeyEntry:
    current = next((bytes(h) for h, valid_until in secrets if valid_until is None), b"")
    previous = tuple(sorted(valid_until for _, valid_until in secrets if valid_until is not None))
    return dataclasses.replace(entry, record=dataclasses.replace(entry.record, key_hash=current),
                               previous_valid_until=previous)


async def _key_entry(tx: Tx, key_id: str) -> KeyEntry:
    rows = await tx.fetch(f"SELECT {_KEY_COLUMNS} FROM keys WHERE key_id = $1", key_id)
    if not rows:
        raise NotFound(f"no key {key_id!r}", param="key_id", code="key_not_found")
    secrets = await tx.fetch("SELECT key_hash, valid_until FROM key_secrets WHERE key_id = $1", key_id)
    return _with_secrets(_key(rows[0]), secrets)
