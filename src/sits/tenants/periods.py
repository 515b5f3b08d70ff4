"""Budget periods as whole UTC days: spend in a period is the roll-ups from its first day on."""

from __future__ import annotations

import datetime as dt

from sits.tenants.records import Period

SECONDS_PER_DAY = 86_400
_EPOCH = dt.date(1970, 1, 1)


def day_of(unix_s: float) -> int:
    """Whole days since 1970-01-01 UTC."""
    return int(unix_s // SECONDS_PER_DAY)


def first_day(period: Period, now: float) -> int:
    """The first day of the period `now` falls in (daily: today, weekly: Monday, monthly: the 1st; total: 0)."""
    today = day_of(now)
    if period == "daily":
        return today
    if period == "weekly":
        return today - date_of(today).weekday()
    if period == "monthly":
        return today - (date_of(today).day - 1)
    return 0


def date_of(day: int) -> dt.date:
    return _EPOCH + dt.timedelta(days=day)


def day_of_date(date: dt.date) -> int:
    return (date - _EPOCH).days
