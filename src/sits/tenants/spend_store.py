"""The spend tables: batches in, reports and period sums out, old rows away.

A batch is written in one transaction: its rows into `spend` (request_id unique: a row already there is
skipped, so replaying a batch never counts twice) and, from exactly the rows that went in, the daily
roll-ups `spend_daily` (day, key, team, model). Reports and budget seeds read only the roll-ups, so they
cost the same at ten million request rows as at ten thousand. PostgreSQL ingests by COPY into a
temporary staging table and one INSERT ... SELECT; SQLite stages with executemany on its one connection.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from sits.errors import InvalidRequest
from sits.tenants.database import Database
from sits.tenants.periods import day_of
from sits.tenants.records import SpendRecord

GroupBy = Literal["key", "team", "model", "day"]
SPEND_COLUMNS = ("request_id", "at", "day", "key_id", "team_id", "user_id", "model", "endpoint", "input_tokens",
                 "cached_input_tokens", "output_tokens", "reasoning_tokens", "cost_usd", "latency_ms", "status",
                 "cache_hit", "fallback")
_TOTALS = ("requests", "input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens", "cost_usd")
_GROUP_COLUMN = {"key": "key_id", "team": "team_id", "model": "model", "day": "day"}
_STAGE = ("CREATE TEMP TABLE IF NOT EXISTS spend_stage (request_id TEXT, at DOUBLE PRECISION, day INTEGER, "
          "key_id TEXT, team_id TEXT, user_id TEXT, model TEXT, endpoint TEXT, input_tokens BIGINT, "
          "cached_input_tokens BIGINT, output_tokens BIGINT, reasoning_tokens BIGINT, cost_usd DOUBLE PRECISION, "
          "latency_ms DOUBLE PRECISION, status INTEGER, cache_hit BOOLEAN, fallback BOOLEAN)")
_ROLLUP_SUMS = ("count(*), sum(input_tokens), sum(cached_input_tokens), sum(output_tokens), sum(reasoning_tokens), "
                "sum(cost_usd)")
_ROLLUP_UPSERT = (" ON CONFLICT (day, key_id, team_id, model) DO UPDATE SET "
                  "requests = spend_daily.requests + excluded.requests, "
                  "input_tokens = spend_daily.input_tokens + excluded.input_tokens, "
                  "cached_input_tokens = spend_daily.cached_input_tokens + excluded.cached_input_tokens, "
                  "output_tokens = spend_daily.output_tokens + excluded.output_tokens, "
                  "reasoning_tokens = spend_daily.reasoning_tokens + excluded.reasoning_tokens, "
                  "cost_usd = spend_daily.cost_usd + excluded.cost_usd")
_ROLLUP_INSERT = ("INSERT INTO spend_daily (day, key_id, team_id, model, requests, input_tokens, cached_input_tokens, "
                  "output_tokens, reasoning_tokens, cost_usd) ")
_COLUMNS = ", ".join(SPEND_COLUMNS)
_GROUPED = "day, coalesce(key_id, ''), coalesce(team_id, ''), model"
# PostgreSQL: the rows that really went in (RETURNING) feed the roll-ups, in the same statement.
_PG_INGEST = (
    f"WITH fresh AS (INSERT INTO spend ({_COLUMNS}) SELECT DISTINCT ON (request_id) {_COLUMNS} FROM spend_stage "
    f"ON CONFLICT (request_id) DO NOTHING RETURNING {_COLUMNS}), "
    f"rolled AS ({_ROLLUP_INSERT}SELECT {_GROUPED}, {_ROLLUP_SUMS} FROM fresh GROUP BY {_GROUPED}{_ROLLUP_UPSERT} "
    "RETURNING 1) SELECT count(*) FROM fresh")


def spend_row(spend: SpendRecord) -> tuple[Any, ...]:
    u = spend.usage
    return (spend.request_id, float(spend.at), day_of(spend.at), spend.key_id, spend.team_id, spend.user, spend.model,
            spend.endpoint, u.input_tokens, u.cached_input_tokens, u.output_tokens, u.reasoning_tokens,
            float(spend.cost_usd), float(spend.latency_ms), spend.status, spend.cache_hit, spend.fallback)


@dataclass(frozen=True, slots=True)
class ReportPage:
    rows: list[dict[str, Any]]
    next_cursor: str | None


class SpendStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._writer: Any = None  # PostgreSQL: the spend log's own connection (its staging table lives there)

    async def write(self, rows: Sequence[tuple[Any, ...]]) -> int:
        """Insert one batch (rows from `spend_row`) and its roll-ups in one transaction; the rows that were new."""
        if not rows:
            return 0
        if self.db.dialect == "postgresql":
            return await self._write_postgres(rows)
        return await self.db.run_sync(lambda db: _write_sqlite(db, rows))  # type: ignore[attr-defined]

    async def _write_postgres(self, rows: Sequence[tuple[Any, ...]]) -> int:
        if self._writer is None or self._writer.is_closed():
            self._writer = await self.db.connect()  # type: ignore[attr-defined]
            await self._writer.execute(_STAGE + " ON COMMIT DELETE ROWS")
        connection = self._writer
        async with connection.transaction():
            await connection.copy_records_to_table("spend_stage", records=rows, columns=SPEND_COLUMNS)
            fresh = await connection.fetchval(_PG_INGEST)
        return int(fresh)

    async def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None and not writer.is_closed():
            await writer.close()

    async def report(self, group_by: GroupBy, *, from_day: int | None = None, to_day: int | None = None,
                     team_id: str | None = None, key_id: str | None = None, limit: int = 100,
                     cursor: str | None = None) -> ReportPage:
        """Totals per key, team, model or day from the roll-ups, ordered by that value; `limit` per page,
        `cursor` (from the previous page) for the next."""
        column = _GROUP_COLUMN[group_by]
        clauses: list[str] = []
        args: list[Any] = []

        def where(sql: str, value: Any) -> None:
            args.append(value)
            clauses.append(sql.format(f"${len(args)}"))

        if from_day is not None:
            where("day >= {}", from_day)
        if to_day is not None:
            where("day <= {}", to_day)
        if team_id is not None:
            where("team_id = {}", team_id)
        if key_id is not None:
            where("key_id = {}", key_id)
        if cursor is not None:
            where(f"{column} > {{}}", _decode_cursor(cursor, group_by))
        team = ", min(team_id)" if group_by == "key" else ""
        sql = (f"SELECT {column}, sum(requests), sum(input_tokens), sum(cached_input_tokens), sum(output_tokens), "
               f"sum(reasoning_tokens), sum(cost_usd){team} FROM spend_daily"
               f"{' WHERE ' + ' AND '.join(clauses) if clauses else ''} GROUP BY {column} ORDER BY {column} "
               f"LIMIT {int(limit) + 1}")
        found = await self.db.fetch(sql, *args)
        more = len(found) > limit
        found = found[:limit]
        rows = []
        for row in found:
            entry: dict[str, Any] = {group_by: row[0] if row[0] != "" else None}
            entry.update({name: (float(v) if name == "cost_usd" else int(v)) for name, v in zip(_TOTALS, row[1:7])})
            if group_by == "key":
                entry["team"] = row[7] or None
            rows.append(entry)
        return ReportPage(rows, _encode_cursor(found[-1][0]) if more and found else None)

    async def period_total(self, scope: Literal["key", "team"], ident: str, from_day: int) -> float:
        column = "key_id" if scope == "key" else "team_id"
        rows = await self.db.fetch(
            f"SELECT coalesce(sum(cost_usd), 0) FROM spend_daily WHERE {column} = $1 AND day >= $2", ident, from_day)
        return float(rows[0][0])

    async def period_totals(self, first_days: dict[str, int]) -> dict[tuple[str, str, str], float]:
        """(scope, id, period) -> USD from the roll-ups, for every key and team, for each period's first day."""
        totals: dict[tuple[str, str, str], float] = {}
        for period, first in first_days.items():
            for scope, column in (("key", "key_id"), ("team", "team_id")):
                for ident, usd in await self.db.fetch(
                        f"SELECT {column}, sum(cost_usd) FROM spend_daily WHERE day >= $1 AND {column} <> '' "
                        f"GROUP BY {column}", first):
                    totals[(scope, ident, period)] = float(usd)
        return totals

    async def purge_before(self, cutoff_s: float, chunk_rows: int, max_chunks: int) -> int:
        """Delete request rows older than `cutoff_s`, `chunk_rows` per transaction (locks stay short), at
        most `max_chunks` chunks per call; roll-ups are kept. The rows deleted."""
        deleted = 0
        for _ in range(max_chunks):
            async with self.db.transaction() as tx:
                n = await tx.execute("DELETE FROM spend WHERE request_id IN "
                                     f"(SELECT request_id FROM spend WHERE at < $1 LIMIT {int(chunk_rows)})", cutoff_s)
            deleted += n
            if n < chunk_rows:
                break
        return deleted

    async def count_rows(self) -> int:
        return int((await self.db.fetch("SELECT count(*) FROM spend"))[0][0])


def _write_sqlite(db: Any, rows: Sequence[tuple[Any, ...]]) -> int:
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(_STAGE)
        db.execute("DELETE FROM spend_stage")
        db.executemany(f"INSERT INTO spend_stage ({_COLUMNS}) VALUES ({', '.join('?' * len(SPEND_COLUMNS))})", rows)
        # Already counted (a replay), or twice in this batch: keep the first, drop the rest.
        db.execute("DELETE FROM spend_stage WHERE request_id IN (SELECT request_id FROM spend) OR rowid NOT IN "
                   "(SELECT min(rowid) FROM spend_stage GROUP BY request_id)")
        fresh = db.execute(f"INSERT INTO spend ({_COLUMNS}) SELECT {_COLUMNS} FROM spend_stage").rowcount
        db.execute(f"{_ROLLUP_INSERT}SELECT {_GROUPED}, {_ROLLUP_SUMS} FROM spend_stage WHERE true "
                   f"GROUP BY {_GROUPED}{_ROLLUP_UPSERT}")
        db.execute("DELETE FROM spend_stage")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return int(fresh)


def _encode_cursor(value: Any) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([value])).decode().rstrip("=")


def _decode_cursor(cursor: str, group_by: GroupBy) -> Any:
    try:
        (value,) = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, orjson.JSONDecodeError, ValueError, TypeError):
        raise InvalidRequest("'cursor' is not a cursor this report returned", param="cursor") from None
    if not isinstance(value, int if group_by == "day" else str) or isinstance(value, bool):
        raise InvalidRequest("'cursor' is not a cursor this report returned", param="cursor")
    return value
