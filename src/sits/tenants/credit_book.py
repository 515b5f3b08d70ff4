"""A limiter's per-replica credits (credits.py): which plans may take them and how large their next grant
is, a grant's answer made a plan's credit, an ended credit's remainder handed back to Redis, the sweep
that ends the credits nobody used up, and the counts `/v1/cluster` and the metrics show.

The request path itself does not come through here: a request takes and settles its plan's credit in
`Limiter.reserve` and `Limiter.settle` (a few attribute reads, no call), and only a credit's start and
end do."""

from __future__ import annotations

from asyncio import TimerHandle, get_running_loop
from collections.abc import Callable
from typing import Any

from sits.tenants.credits import FIRST_GRANT, FIRST_SLOTS, MAX_GRANT, MAX_SLOTS, Credit
from sits.tenants.limit_plan import Plan

# What an ended credit did not use, for Redis: (plan, rate units, tokens, nano-USD, free slots' lease numbers).
GiveBack = tuple[Plan, int, int, int, list[int]]


class CreditBook:
    def __init__(self, lifetime_s: float, clock: Callable[[], float], give_back: Callable[[GiveBack], None]) -> None:
        """`lifetime_s`: how long a credit admits after its grant was asked (`limits.credit_s`), and how
        much of a rate's minute a grant leaves free; `give_back`: sends a remainder with the next call."""
        self.lifetime_s = lifetime_s
        self.margin_ms = int(lifetime_s * 1000)
        self._clock = clock
        self._give_back = give_back
        self._holding: set[Plan] = set()  # the plans holding a credit (`plan.credit`), and some that did
        self._sweep_timer: TimerHandle | None = None
        self.given = 0
        self.refused = 0
        self._ended_requests = 0  # admitted on credits that have ended

    def enroll(self, plan: Plan) -> None:
        """`plan` may take credits (its limits are all large enough: `limit_plan.creditable`)."""
        plan.creditable = True
        plan.grant_size, plan.slot_size = FIRST_GRANT, FIRST_SLOTS

    def granted(self, plan: Plan, tokens: int, nano: int, first_slot: int, answer: bytes,
                sent_at: float) -> Credit | None:
        """A grant's answer ("g<requests>:<slots>:<budget answer>", or "0"): the plan's new credit (its
        earlier one ends), or None, refused, and no grant asked for the plan for `lifetime_s`."""
        plan.granting = False
        if not answer.startswith(b"g"):
            self.refused += 1
            plan.grant_after = self._clock() + self.lifetime_s
            return None
        self.given += 1
        given, slots, budgets = answer[1:].split(b":", 2)
        requests = int(given)
        if plan.credit is not None:
            self.end(plan, plan.credit)
        self._holding.add(plan)
        credit = plan.credit = Credit(requests, requests * tokens, requests * nano,
                                      list(range(first_slot, first_slot + int(slots))) if plan.slotted else None,
                                      sent_at + self.lifetime_s, budgets if len(budgets) > 1 else b"")
        if self._sweep_timer is None:
            self._sweep_timer = get_running_loop().call_later(self.lifetime_s / 2, self._sweep)
        return credit

    def end(self, plan: Plan, credit: Credit) -> None:
        """`credit` admits no more: what it did not use goes back to Redis; the plan's next grant is sized
        on how it was used. Its requests still in flight settle on Redis."""
        if plan.credit is credit:
            plan.credit = None
        used = credit.granted - credit.requests
        self._ended_requests += used
        if credit.requests <= credit.refill_at:  # half used within its lifetime: ask for more next time
            plan.grant_size = min(MAX_GRANT, plan.grant_size * 2)
        elif used < credit.granted // 4:
            plan.grant_size = max(FIRST_GRANT, plan.grant_size // 2)
        if credit.slots_short:
            plan.slot_size = min(MAX_SLOTS, plan.slot_size * 2)
        free = credit.free if credit.free is not None else []
        if credit.requests or credit.tokens or credit.nano or free:
            self._give_back((plan, credit.requests, credit.tokens, credit.nano, free))
        credit.requests = credit.tokens = credit.nano = 0
        credit.free = []

    def overran(self, plan: Plan) -> None:
        """A request of `plan` cost more than it reserved under a hard budget: its credit ends (the budget
        may be spent meanwhile, which only Redis can tell), and its next requests go to Redis a lifetime."""
        if plan.credit is not None:
            self.end(plan, plan.credit)
        plan.grant_after = self._clock() + self.lifetime_s

    def _sweep(self) -> None:
        """Every half lifetime while credits are held: the ended ones give back what they did not use (a
        credit admits nothing after it ends in any case: `Limiter.reserve` reads the clock)."""
        self._sweep_timer = None
        now = self._clock()
        holding: set[Plan] = set()
        for plan in self._holding:
            credit = plan.credit
            if credit is None:
                continue
            if now >= credit.expires:
                self.end(plan, credit)
            else:
                holding.add(plan)
        self._holding = holding
        if holding:
            self._sweep_timer = get_running_loop().call_later(self.lifetime_s / 2, self._sweep)

    def drop(self) -> None:
        """Redis is lost: credits admit no more, and what they held stays counted there (over, never under)."""
        for plan in self._holding:
            credit = plan.credit
            if credit is not None:
                self._ended_requests += credit.granted - credit.requests
                plan.credit = None
        self._holding = set()

    def close(self) -> None:
        """Shutdown: every credit ends, what it holds handed back."""
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
        for plan in self._holding:
            if plan.credit is not None:
                self.end(plan, plan.credit)
        self._holding = set()

    def counts(self) -> tuple[int, int, int]:
        """Grants given, grants refused, and requests admitted on credit (for the metrics)."""
        held = sum(p.credit.granted - p.credit.requests for p in self._holding if p.credit is not None)
        return self.given, self.refused, self._ended_requests + held

    def describe(self) -> dict[str, Any]:
        given, refused, on_credit = self.counts()
        return {"enabled": True, "lifetime_s": self.lifetime_s,
                "plans_holding": sum(1 for p in self._holding if p.credit is not None),
                "grants": given + refused, "grants_refused": refused, "requests_on_credit": on_credit}
