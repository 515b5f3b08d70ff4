"""The dashboard's spend and limits panel: per team and per key, spend in the current period against the
budget, rpm / tpm / concurrency in use against the limit, and where limits are counted now.

Read once per dashboard poll, never on the request path. Bounded: the `top` teams and the `top` keys by
spend in their current period (ties by id), whatever the number of teams and keys. Spend is the spend
log's period totals (other replicas' rows within a minute) or, when Redis holds the budget counter,
that counter (settled plus reserved, every replica's, now); limits in use are read from where they are
counted (Redis in one script call, or this replica's share in fallback).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, Literal, NamedTuple, Protocol

from sits.tenants.budget import NANO, period_window
from sits.tenants.limit_plan import BUDGET, CONCURRENCY, RATE, TOKENS, Check
from sits.tenants.limiter import Limiter
from sits.tenants.records import Budget, KeyRecord, Limits, Period, TeamRecord

DEFAULT_TOP = 10
_NO_BUDGET_PERIOD: Period = "daily"  # the period shown for a team or key without a budget
_KINDS = ((RATE, "rpm"), (TOKENS, "tpm"), (CONCURRENCY, "concurrency"))


class Listing(Protocol):
    """Every key and team the directory holds (LiveKeyDirectory)."""

    def keys(self) -> Iterable[KeyRecord]: ...

    def teams(self) -> Iterable[TeamRecord]: ...


SpendBy = Callable[[Literal["key", "team"], Period], dict[str, float]]


class _Row(NamedTuple):
    scope: Literal["key", "team"]
    ident: str
    name: str
    team: str
    period: Period
    budget: Budget | None
    limits: Limits
    spent_usd: float


class UsagePanel:
    def __init__(self, directory: Listing, spend_by: SpendBy, limiter: Limiter, prefix: str,
                 top: int = DEFAULT_TOP, wall: Callable[[], float] = time.time) -> None:
        self._directory = directory
        self._spend_by = spend_by
        self._limiter = limiter
        self._prefix = prefix
        self._top = top
        self._wall = wall

    async def __call__(self) -> dict[str, Any]:
        now = self._wall()
        teams = list(self._directory.teams())
        keys = {k.key_id: k for k in self._directory.keys()}.values()  # a key with several secrets: once
        spend: dict[tuple[str, Period], dict[str, float]] = {}

        def spent(scope: Literal["key", "team"], ident: str, period: Period) -> float:
            by = spend.get((scope, period))
            if by is None:
                by = spend[(scope, period)] = self._spend_by(scope, period)
            return by.get(ident, 0.0)

        team_rows = [_Row("team", t.team_id, t.name, t.team_id, p := _period(t.budget), t.budget, t.limits,
                          spent("team", t.team_id, p)) for t in teams]
        key_rows = [_Row("key", k.key_id, k.name, k.team_id, p := _period(k.budget), k.budget, k.limits,
                         spent("key", k.key_id, p)) for k in keys if k.usable_at(now)]
        shown = _top(team_rows, self._top) + _top(key_rows, self._top)
        checks: list[Check] = []
        where: list[tuple[int, str]] = []  # (row, what) per check
        for i, row in enumerate(shown):
            for kind, name in _KINDS:
                limit = getattr(row.limits, name)
                if limit is not None:
                    checks.append(Check(kind, row.scope, f"{self._prefix}{kind}:{row.scope}:{row.ident}", limit))
                    where.append((i, name))
            if row.budget is not None:
                label = period_window(row.budget.period, now).label
                checks.append(Check(BUDGET, row.scope, f"{self._prefix}b:{row.scope}:{row.ident}:{label}", -1))
                where.append((i, "budget"))
        values = await self._limiter.usage(checks)
        out = [_json(row) for row in shown]
        for (i, what), check, value in zip(where, checks, values, strict=True):
            if what == "budget":
                if value is not None:  # the shared counter: every replica's spend, reservations included
                    out[i]["spent_usd"] = round(max(out[i]["spent_usd"], value / NANO), 6)
                    out[i]["spent_from"] = "counter"
            else:
                out[i]["limits"][what] = {"limit": check.limit, "in_use": None if value is None else round(value, 2)}
        team_count = len(team_rows)
        return {"limits": self._limiter.describe(), "top": self._top,
                "teams": out[:min(self._top, team_count)], "keys": out[min(self._top, team_count):],
                "team_count": team_count, "key_count": len(key_rows)}


def _period(budget: Budget | None) -> Period:
    return budget.period if budget is not None else _NO_BUDGET_PERIOD


def _top(rows: list[_Row], n: int) -> list[_Row]:
    return sorted(rows, key=lambda r: (-r.spent_usd, r.ident))[:n]


def _json(row: _Row) -> dict[str, Any]:
    budget = row.budget
    out: dict[str, Any] = {"id": row.ident, "name": row.name, "period": row.period,
                           "spent_usd": round(row.spent_usd, 6), "spent_from": "spend log",
                           "soft_usd": budget.soft_usd if budget is not None else None,
                           "hard_usd": budget.hard_usd if budget is not None else None, "limits": {}}
    if row.scope == "key":
        out["team"] = row.team
    return out
