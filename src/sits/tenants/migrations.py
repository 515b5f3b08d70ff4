"""The tenant store's schema, as a numbered list of migrations applied in order and recorded in
`schema_version`. Never edit an applied migration: add the next number. The same DDL runs on SQLite and
PostgreSQL (SQLite maps the PostgreSQL type names onto its affinities); `postgresql`/`sqlite` override it
where the two must differ.

Times are unix seconds (DOUBLE PRECISION); `day` is whole days since 1970-01-01 UTC, so roll-ups and
period sums compare integers on both databases. Structured fields (limits, budget, allowed models,
metadata) are JSON text: the store reads them whole, never queries inside them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]
    postgresql: tuple[str, ...] | None = None  # instead of `statements` on PostgreSQL
    sqlite: tuple[str, ...] | None = None

    def for_dialect(self, dialect: str) -> tuple[str, ...]:
        own = self.postgresql if dialect == "postgresql" else self.sqlite
        return own if own is not None else self.statements


SCHEMA_VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, description TEXT NOT NULL, "
    "applied_at DOUBLE PRECISION NOT NULL)"
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "teams, keys, key secrets and the store version", (
        "CREATE TABLE store_version (id INTEGER PRIMARY KEY, version BIGINT NOT NULL)",
        "INSERT INTO store_version (id, version) VALUES (1, 0)",
        "CREATE TABLE teams (team_id TEXT PRIMARY KEY, name TEXT NOT NULL, organisation TEXT, "
        "limits TEXT NOT NULL, budget TEXT, metadata TEXT NOT NULL, "
        "created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL)",
        "CREATE INDEX teams_by_organisation ON teams (organisation, team_id)",
        "CREATE TABLE keys (key_id TEXT PRIMARY KEY, name TEXT NOT NULL, "
        "team_id TEXT NOT NULL REFERENCES teams (team_id), allowed_models TEXT NOT NULL, priority TEXT, "
        "limits TEXT NOT NULL, model_limits TEXT NOT NULL, budget TEXT, expires_at DOUBLE PRECISION, "
        "revoked_at DOUBLE PRECISION, metadata TEXT NOT NULL, "
        "created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL)",
        "CREATE INDEX keys_by_team ON keys (team_id, key_id)",
        # Each secret a key has had, by its keyed hash; an old one works until valid_until (rotation overlap).
        "CREATE TABLE key_secrets (key_hash BYTEA PRIMARY KEY, "
        "key_id TEXT NOT NULL REFERENCES keys (key_id) ON DELETE CASCADE, "
        "valid_until DOUBLE PRECISION, created_at DOUBLE PRECISION NOT NULL)",
        "CREATE INDEX key_secrets_by_key ON key_secrets (key_id)",
    )),
    Migration(2, "the spend log and its daily roll-ups", (
        # One row per request; request_id unique so a replayed batch is not counted twice.
        "CREATE TABLE spend (request_id TEXT PRIMARY KEY, at DOUBLE PRECISION NOT NULL, day INTEGER NOT NULL, "
        "key_id TEXT, team_id TEXT, user_id TEXT, model TEXT NOT NULL, endpoint TEXT NOT NULL, "
        "input_tokens BIGINT NOT NULL, cached_input_tokens BIGINT NOT NULL, output_tokens BIGINT NOT NULL, "
        "reasoning_tokens BIGINT NOT NULL, cost_usd DOUBLE PRECISION NOT NULL, latency_ms DOUBLE PRECISION NOT NULL, "
        "status INTEGER NOT NULL, cache_hit BOOLEAN NOT NULL, fallback BOOLEAN NOT NULL)",
        "CREATE INDEX spend_by_time ON spend (at)",  # retention deletes the oldest rows
        # Roll-ups: '' stands for no key / no team (a primary key column cannot be NULL).
        "CREATE TABLE spend_daily (day INTEGER NOT NULL, key_id TEXT NOT NULL, team_id TEXT NOT NULL, "
        "model TEXT NOT NULL, requests BIGINT NOT NULL, input_tokens BIGINT NOT NULL, "
        "cached_input_tokens BIGINT NOT NULL, output_tokens BIGINT NOT NULL, reasoning_tokens BIGINT NOT NULL, "
        "cost_usd DOUBLE PRECISION NOT NULL, PRIMARY KEY (day, key_id, team_id, model))",
        "CREATE INDEX spend_daily_by_team ON spend_daily (team_id, day)",
        "CREATE INDEX spend_daily_by_key ON spend_daily (key_id, day)",
        "CREATE INDEX spend_daily_by_model ON spend_daily (model, day)",
    )),
)
