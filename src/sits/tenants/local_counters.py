"""A replica's own count of its requests' limits while Redis is away (or never configured): the same
checks as the Redis script, each limit cut to this replica's share (limit / live replicas), and what it
spent alone handed back to the shared counters when Redis returns (limiter.py)."""

from __future__ import annotations

import math
from collections.abc import Callable

from sits.tenants.limit_plan import (
    BUDGET,
    CONCURRENCY,
    RATE,
    TOKENS,
    WINDOW_MS,
    Check,
    Denied,
    Plan,
    Reservation,
    bulk,
    number,
)


class LocalCounters:
    """The same checks in this process's memory, each limit cut to this replica's share."""

    def __init__(self, wall_ms: Callable[[], int]) -> None:
        self._wall_ms = wall_ms
        self._tat: dict[str, float] = {}
        self._leases: dict[str, dict[int, float]] = {}
        self._spent: dict[str, int] = {}
        self._base: dict[str, int] = {}  # budget spent when this replica started counting it alone
        self._budget_checks: dict[str, Check] = {}  # by counter name: to hand the local spend to Redis later

    def admit(self, plan: Plan, tokens: int, nano: int, member: int, lease_ms: int, replicas: int,
              known_spent: dict[str, int]) -> Reservation | Denied:
        now = self._wall_ms()
        share = 1.0 / max(1, replicas)
        seen: list[float] = []
        for check in plan.checks:
            kind = check.kind
            if kind == RATE or kind == TOKENS:
                amount = tokens if kind == TOKENS else 1
                tat = max(self._tat.get(check.key, 0.0), now)
                step = min(amount * WINDOW_MS / (check.limit * share), WINDOW_MS)
                if tat + step - now > WINDOW_MS:
                    return Denied(check, math.ceil(tat + step - now - WINDOW_MS), math.ceil(tat))
                seen.append(tat)
            elif kind == CONCURRENCY:
                leases = self._leases.get(check.key)
                if leases:
                    for m in [m for m, until in leases.items() if until <= now]:
                        del leases[m]
                if leases and len(leases) >= max(1, math.floor(check.limit * share)):
                    return Denied(check, 1000, math.ceil(min(leases.values())))
                seen.append(0.0)
            else:
                spent = self._spent.get(check.key)
                if spent is None:
                    spent = known_spent.get(check.key, check.seed)
                    self._base[check.key] = spent
                    self._budget_checks[check.key] = check
                base = self._base.get(check.key, spent)
                if check.limit >= 0 and spent >= base + (check.limit - base) * share:
                    return Denied(check, max(0, check.period_end_ms - now) if check.period_end_ms else 0,
                                  check.period_end_ms)
                seen.append(spent)
        budgets: list[bytes] = [b"1"]
        for check, value in zip(plan.checks, seen, strict=True):
            if check.kind == RATE or check.kind == TOKENS:
                amount = tokens if check.kind == TOKENS else 1
                self._tat[check.key] = value + amount * WINDOW_MS / (check.limit * share)
            elif check.kind == CONCURRENCY:
                self._leases.setdefault(check.key, {})[member] = now + lease_ms
            else:
                self._spent[check.key] = int(value) + nano
                budgets.append(b"%d" % int(value))
        if len(self._tat) > 10_000:
            self._forget_idle(now)
        return Reservation(plan, member, "local", b",".join(budgets) if len(budgets) > 1 else b"")

    def settle(self, plan: Plan, tokens_delta: int, nano_delta: int, member: int, replicas: int) -> None:
        now = self._wall_ms()
        share = 1.0 / max(1, replicas)
        for check in plan.checks:
            if check.kind == TOKENS:
                tat = max(self._tat.get(check.key, 0.0), now) + tokens_delta * WINDOW_MS / (check.limit * share)
                self._tat[check.key] = tat
            elif check.kind == CONCURRENCY:
                self._leases.get(check.key, {}).pop(member, None)
            elif check.kind == BUDGET and check.key in self._spent:
                self._spent[check.key] += nano_delta

    def spent(self, key: str) -> int | None:
        return self._spent.get(key)

    def usage(self, check: Check, share: float) -> float | None:
        """What `check`'s counter holds here now (as `Limiter.usage`): units in use, leases or nano-USD."""
        now = self._wall_ms()
        if check.kind == RATE or check.kind == TOKENS:
            tat = self._tat.get(check.key, 0.0)
            return max(0.0, tat - now) * check.limit * share / WINDOW_MS
        if check.kind == CONCURRENCY:
            return float(sum(1 for until in self._leases.get(check.key, {}).values() if until > now))
        spent = self._spent.get(check.key)
        return None if spent is None else float(spent)

    def take_budget_spend(self) -> list[tuple[bytes, int, bytes, int]]:
        """Back on Redis: what this replica spent alone, as settlements for the shared counters (which
        then hold the truth again); the local budget counters start over at the next loss."""
        spent = []
        for key, value in self._spent.items():
            check = self._budget_checks.get(key)
            if check is not None and value != self._base.get(key, value):
                spent.append((bulk(key.encode()), 1, f"@;b:{number(check.limit)};".encode(), value - self._base[key]))
        self._spent.clear()
        self._base.clear()
        self._budget_checks.clear()
        return spent

    def _forget_idle(self, now: float) -> None:
        for key in [k for k, tat in self._tat.items() if tat < now]:
            del self._tat[key]
