"""What each key and team has spent in its current periods, in memory, for budget counters to start from.

Loaded from the roll-ups when the spend log starts (and again every `SpendLog` reload), then kept up to
date with every batch the spend log commits, so a lookup is a dict read: the budget side asks for it on
the request path (once per period per key), where no database read may happen. Rows other replicas
flush reach it with the next reload. When a period rolls over (midnight UTC, Monday, the 1st) its
totals start again from zero with the rows committed from then on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from sits.tenants.periods import day_of, first_day
from sits.tenants.records import Period, SpendRecord

PERIODS: tuple[Period, ...] = ("daily", "weekly", "monthly", "total")
Scope = Literal["key", "team"]


class SpendTotals:
    def __init__(self) -> None:
        self._first: dict[Period, int] = {}  # the first day of the period the totals below are for
        self._usd: dict[tuple[Scope, str, Period], float] = {}

    def replace(self, first: Mapping[Period, int], usd: dict[tuple[Scope, str, Period], float]) -> None:
        """Everything, as the roll-ups say now (read while no batch commits)."""
        self._first = dict(first)
        self._usd = usd

    def add(self, batch: Iterable[SpendRecord], now: float) -> None:
        """A batch just committed."""
        by_day: dict[tuple[Scope, str, int], float] = {}  # summed first: a batch repeats few keys and teams
        for spend in batch:
            if spend.cost_usd:
                day = day_of(spend.at)
                if spend.key_id is not None:
                    by_day[("key", spend.key_id, day)] = by_day.get(("key", spend.key_id, day), 0.0) + spend.cost_usd
                if spend.team_id is not None:
                    by_day[("team", spend.team_id, day)] = by_day.get(("team", spend.team_id, day), 0.0) + \
                        spend.cost_usd
        for period in PERIODS:
            start = self._current(period, now)
            usd = self._usd
            for (scope, ident, day), cost in by_day.items():
                if day >= start:
                    usd[(scope, ident, period)] = usd.get((scope, ident, period), 0.0) + cost

    def get(self, scope: Scope, ident: str, period: Period, now: float) -> float:
        if self._first.get(period) != first_day(period, now):
            return 0.0  # a new period: nothing committed in it yet as far as this replica knows
        return self._usd.get((scope, ident, period), 0.0)

    def all_of(self, scope: Scope, period: Period, now: float) -> dict[str, float]:
        """Every key's or team's total in the current `period` (the dashboard's ranking; not per request)."""
        if self._first.get(period) != first_day(period, now):
            return {}
        return {ident: usd for (s, ident, p), usd in self._usd.items() if s == scope and p == period}

    def _current(self, period: Period, now: float) -> int:
        start = first_day(period, now)
        if self._first.get(period) != start:  # rolled over: the old period's totals are no longer wanted
            self._usd = {k: v for k, v in self._usd.items() if k[2] != period}
            self._first[period] = start
        return start
