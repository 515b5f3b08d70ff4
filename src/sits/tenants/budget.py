"""Budgets: USD per period (daily, weekly, monthly, total) for a key or a team, soft and hard.

A request reserves its estimated cost at admission, in the same atomic script as the rate limits
(`limiter.py`), and settles on the actual cost when it ends. The check admits a request while the
period's spend (settled plus reserved) is below the hard limit, so concurrent requests can overspend
it by at most one request's reservation (the last one admitted). The soft limit only warns: a metric,
a log line and the `x-sits-budget-warning` response header.

Periods are calendar periods in UTC: a day from midnight, an ISO week from Monday, a month from the
1st. A counter starts from what the spend log says the period has spent so far (`period_spend`).
"""

from __future__ import annotations

import calendar
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final, NamedTuple

from sits.tenants.limit_plan import BUDGET, Check
from sits.tenants.records import Budget, Period

NANO: Final = 1_000_000_000  # budgets are counted in integer nano-USD
_DAY_S: Final = 86_400

# (scope "key" or "team", its id, period) -> USD spent so far in the current period
PeriodSpend = Callable[[str, str, Period], float]


def no_spend(scope: str, scope_id: str, period: Period) -> float:
    return 0.0


class PeriodWindow(NamedTuple):
    label: str  # e.g. "d20566" (days since the epoch); part of the counter's name
    ends_ms: int  # 0: never (a total budget)


def period_window(period: Period, now_s: float) -> PeriodWindow:
    if period == "total":
        return PeriodWindow("total", 0)
    day = int(now_s // _DAY_S)
    if period == "daily":
        return PeriodWindow(f"d{day}", (day + 1) * _DAY_S * 1000)
    if period == "weekly":
        monday = day - (day + 3) % 7  # 1970-01-01 was a Thursday
        return PeriodWindow(f"w{monday}", (monday + 7) * _DAY_S * 1000)
    at = datetime.fromtimestamp(now_s, UTC)
    last = calendar.monthrange(at.year, at.month)[1]
    ends = datetime(at.year, at.month, last, tzinfo=UTC).timestamp() + _DAY_S
    return PeriodWindow(f"m{at.year}{at.month:02d}", int(ends * 1000))


class BudgetChecks:
    """Builds a request's budget checks; what each period had spent before this process counted it
    is read once per period from `period_spend` and kept (with the counter's name and the period's end)."""

    def __init__(self, prefix: str, period_spend: PeriodSpend = no_spend, seed_ttl_s: float = 60.0,
                 clock: Callable[[], float] | None = None) -> None:
        """Seeds are read again after `seed_ttl_s`: a counter Redis lost (a restart without persistence)
        starts over from the spend log, which holds what was spent meanwhile."""
        import time

        self._prefix = prefix
        self._period_spend = period_spend
        self._seed_ttl_s = seed_ttl_s
        self._clock = clock or time.monotonic
        self._seeds_read_at = self._clock()
        self._windows: dict[tuple[str, int], PeriodWindow] = {}  # (period, day) -> its window
        self._counters: dict[tuple[str, str, str, str], tuple[str, int]] = {}  # -> (counter's name, seed)

    def check(self, scope: str, scope_id: str, budget: Budget, now_s: float) -> Check:
        period = budget.period
        day = int(now_s // _DAY_S)
        window = self._windows.get((period, day))
        if window is None:
            if len(self._windows) > 64:
                self._windows.clear()
            window = self._windows[(period, day)] = period_window(period, now_s)
        counter = self._counters.get((scope, scope_id, period, window.label))
        if counter is None or self._clock() - self._seeds_read_at > self._seed_ttl_s:
            if len(self._counters) > 10_000 or counter is not None:
                self._counters.clear()
                self._seeds_read_at = self._clock()
            counter = self._counters[(scope, scope_id, period, window.label)] = (
                f"{self._prefix}b:{scope}:{scope_id}:{window.label}",
                round(self._period_spend(scope, scope_id, period) * NANO))
        key, seed = counter
        hard = round(budget.hard_usd * NANO) if budget.hard_usd is not None else -1
        return Check(BUDGET, scope, key, hard, seed, window.ends_ms)


def soft_exceeded(budget: Budget, spent_nano: int) -> bool:
    return budget.soft_usd is not None and spent_nano >= budget.soft_usd * NANO
