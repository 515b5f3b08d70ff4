"""Rate limits, concurrency and budget reservations, taken together and atomically for one request.

A request's checks (rpm, tpm, concurrency and budget, for its key, its team and its model within the
key) are taken in Redis by one script: every check is tested first and then every counter is taken, or
none is, so concurrent requests on any replica see one consistent count. Rates use GCRA (one number per
scope: the "theoretical arrival time", a sliding minute without buckets); concurrency is a sorted set of
leases (a replica that dies leaks nothing past `concurrency_lease_s`); budgets are integer nano-USD
counters per period. What one event-loop turn of this replica has to ask (the admissions of the requests
that arrived, the settlements of those that ended: actual tokens and cost, leases given back) goes in
ONE script call (EVALSHA): at most one Redis round trip per request, shared; a turn with more than
`max_batch` admissions sends each full batch at once, so Redis works on it while the turn reads on.

Where every limit of a plan is large (credits.py), a replica takes a grant of many requests' worth of its
checks in that same call and admits and settles the plan's requests in memory until the grant is used up or
its lifetime passes (no round trip, no await), asking for the next grant when half is used; what a credit
did not use is given back (credit_book.py; a request takes and settles a credit here, in `reserve`
and `settle`).

When Redis cannot be reached, each replica enforces its share of every limit (limit / live replicas,
from the cluster view) in memory, reports it (`mode`, a metric, `/v1/cluster`), and tries Redis again
every `retry_redis_s`, going back to it without a restart. Worst-case excess per mode:
docs/limits-and-budgets.md. The checks and what an admission answers: limit_plan.py; the count alone:
local_counters.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from asyncio import get_running_loop
from collections.abc import Callable, Sequence
from struct import pack
from typing import Any, Final

from sits.tenants.credit_book import CreditBook, GiveBack
from sits.tenants.credits import MIN_GRANT
from sits.tenants.limit_plan import (
    Check,
    Denied,
    Plan,
    Reservation,
    budget_values,
    bulk,
    creditable,
    encode_eval,
)
from sits.tenants.limit_scripts import BATCH, USAGE_LUA
from sits.tenants.local_counters import LocalCounters
from sits.tenants.redis_wire import RedisReplyError, RedisUnavailable, RedisWire

log = logging.getLogger("sits.tenants")

# A finished request's settlement (lease back, tokens and cost corrected) waits at most this long for
# the next admissions' script call to ride with, then goes alone.
SETTLE_DELAY_S: Final = 0.02
_MAX_PENDING_SETTLEMENTS: Final = 50_000  # beyond: the oldest are dropped (leases expire, reservations stay spent)

# One request waiting for its batch's answer: (plan, tokens, nano, future); a tuple, not an object, since one
# is made per request. Its lease number is given when its batch is sent (`_Batch.first` and its place).
_Admission = tuple[Plan, int, int, "asyncio.Future[Reservation | Denied | RedisUnavailable]"]
# A finished request's correction: (plan, tokens delta, nano-USD delta, lease number).
_Settlement = tuple[Plan, int, int, int]
# What this replica spent alone, handed to the shared counters when Redis is back: (encoded key, 1, its
# settlement's spec, nano-USD).
_Handover = tuple[bytes, int, bytes, int]
# A grant asked (credits.py): (plan, tokens and nano-USD a request, requests, slots, first slot's lease number).
_Grant = tuple[Plan, int, int, int, int, int]


class _Batch:
    """One script call on its way: what it asked, and where its answer goes (the wire calls it once)."""

    __slots__ = ("limiter", "admissions", "settlements", "handovers", "grants", "sent_at", "first", "command")

    def __init__(self, limiter: Limiter, admissions: list[_Admission], settlements: list[_Settlement],
                 handovers: list[_Handover], grants: list[_Grant], sent_at: float, first: int,
                 command: bytes) -> None:
        self.limiter = limiter
        self.admissions, self.settlements, self.handovers = admissions, settlements, handovers
        self.grants = grants
        self.sent_at = sent_at  # with grants: their credits end `credit_s` after this (monotonic s)
        self.first = first  # the first admission's lease number; the others follow in order
        self.command = command  # b"" once sent again after NOSCRIPT

    def __call__(self, reply: Any) -> None:
        self.limiter._answered(reply, self)


class Limiter:
    """Admits or refuses a request's checks on Redis (one shared round trip), or alone when Redis is away."""

    def __init__(self, redis: RedisWire | None, members: Callable[[], Sequence[str]], *,
                 lease_s: float = 600.0, retry_redis_s: float = 1.0, max_batch: int = 0,
                 credit_s: float | None = 0.5, clock: Callable[[], float] = time.monotonic,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        """`redis`: where limits are shared (None: this replica counts alone, its share of each limit);
        `credit_s`: a credit's lifetime (credits.py; None: every request admitted on Redis)."""
        self._redis = redis
        self._members = members
        self.lease_ms = int(lease_s * 1000)
        self._head = b"$7\r\nEVALSHA\r\n" + bulk(BATCH.sha.encode())
        self._lease_arg = bulk(b"%d" % self.lease_ms)
        # Lease ids: this prefix (unique across replicas and restarts) and a number per request, joined by
        # the script, so a request sends only its number.
        self._lease_prefix = os.urandom(6).hex() + "-"
        self._prefix_arg = bulk(self._lease_prefix.encode())
        self._member_no = 0
        self._retry_s = retry_redis_s
        self._max_batch = max_batch  # 0: one call per loop turn
        self._clock = clock
        self.local = LocalCounters(wall_ms)
        # The last admission's answer of each plan with budgets, and what it reserved: the budget values
        # Redis last said, read only when Redis is lost (`_known_spent`), where the fallback starts.
        self._answers: dict[Plan, tuple[bytes, int]] = {}
        self._known_spent: dict[str, int] = {}
        self.mode = "redis" if redis is not None else "alone"  # or "fallback" while Redis is away
        self._probe: asyncio.Task[None] | None = None
        self.fallbacks = 0  # times Redis was lost
        self.since = clock()
        self._admissions: list[_Admission] = []  # this loop turn's, sent together
        self._settlements: list[_Settlement] = []
        self._handovers: list[_Handover] = []
        self._scheduled = False
        self._settle_timer: asyncio.TimerHandle | None = None
        self._in_flight = 0  # batches sent and not answered yet
        self._idle: asyncio.Event | None = None
        self.credits = CreditBook(credit_s, clock, self._give_back) if credit_s is not None else None
        self._grants: list[_Grant] = []  # asked this loop turn
        self._give_backs: list[GiveBack] = []
    def plan(self, checks: Sequence[Check]) -> Plan:
        plan = Plan(checks)
        if self.credits is not None and creditable(checks):
            self.credits.enroll(plan)
        return plan

    # -- admission ----------------------------------------------------------------------

    def lease_id(self, reservation: Reservation) -> str:
        """The id a request's concurrency lease has in Redis."""
        return f"{self._lease_prefix}{reservation.member}"

    async def admit(self, plan: Plan, tokens: int, nano: int) -> Reservation | Denied:
        reserved = self.reserve(plan, tokens, nano)
        if not isinstance(reserved, asyncio.Future):
            return reserved
        outcome = await reserved
        if isinstance(outcome, RedisUnavailable):
            return self.alone(plan, tokens, nano, outcome)
        return outcome

    def reserve(self, plan: Plan, tokens: int,
                nano: int) -> Reservation | Denied | asyncio.Future[Reservation | Denied | RedisUnavailable]:
        """Take the request's counters: on Redis, a future answered with this loop turn's script call (a
        `RedisUnavailable` result when Redis failed it: then `alone`); otherwise the answer, counted here (on
        the plan's credit, or alone)."""
        credit = plan.credit
        if credit is not None and credit.requests > 0 and credit.tokens >= tokens and credit.nano >= nano \
                and self._clock() < credit.expires:
            free = credit.free
            if free is None or free:
                credit.requests -= 1
                credit.tokens -= tokens
                credit.nano -= nano
                if credit.requests == credit.refill_at and not plan.granting:
                    self._ask_grant(plan, tokens, nano)
                return Reservation(plan, free.pop() if free is not None else 0, "credit", credit.answer, credit)
            credit.slots_short = True  # every slot in use: this request on Redis, the next grant with more
            if not plan.granting:
                self._ask_grant(plan, tokens, nano)
        if self.mode == "redis":
            loop = get_running_loop()
            future: asyncio.Future[Reservation | Denied | RedisUnavailable] = loop.create_future()
            admissions = self._admissions
            admissions.append((plan, tokens, nano, future))
            if plan.creditable and not plan.granting:  # none, or it ended, ran out or was too small for this one
                self._ask_grant(plan, tokens, nano)
            if len(admissions) == self._max_batch:  # full: Redis works on it while this turn reads on
                self._send()
            elif not self._scheduled:
                self._scheduled = True
                loop.call_soon(self._send)
            return future
        self._member_no += 1
        return self.local.admit(plan, tokens, nano, self._member_no, self.lease_ms, len(self._members()),
                                self._known_spent)

    def alone(self, plan: Plan, tokens: int, nano: int, failure: RedisUnavailable) -> Reservation | Denied:
        """Redis failed this request's call: from now on (until the probe finds it back) count here alone."""
        self._lost(failure)
        self._member_no += 1
        return self.local.admit(plan, tokens, nano, self._member_no, self.lease_ms, len(self._members()),
                                self._known_spent)

    def _ask_grant(self, plan: Plan, tokens: int, nano: int) -> None:
        """A grant of `plan` goes with this loop turn's call, sized on `tokens` and `nano` a request."""
        if self.mode != "redis" or plan.grant_after and self._clock() < plan.grant_after:
            return  # its last grant was refused: requests go one by one a while
        plan.granting = True
        self._grants.append((plan, tokens, nano, plan.grant_size, plan.slot_size if plan.slotted else 0, 0))
        self._schedule()

    def _send(self) -> None:
        """One script call for what this loop turn has to ask: its settlements, then its admissions (each
        given the next lease number here, so a request sends only its tokens and nano-USD)."""
        self._scheduled = False
        admissions, settlements, handovers = self._admissions, self._settlements, self._handovers
        grants, give_backs = self._grants, self._give_backs
        if not admissions and not settlements and not handovers and not grants and not give_backs:
            return
        self._admissions, self._settlements = [], []
        if handovers:
            self._handovers = []
        if grants:
            self._grants = []
        if give_backs:
            self._give_backs = []
        parts = [b"", self._head, b""]  # the header and the key count, once both are known
        count = 0
        spec: list[bytes] = []
        # Every number of the call, packed as little-endian 64-bit integers in one argument (read in order by
        # the script): each settlement's tokens, nano-USD and lease number, then the first admission's lease
        # number and each admission's tokens and nano-USD. No number is formatted as text per request.
        numbers: list[int] = []
        for plan, tokens_delta, nano_delta, member in settlements:
            parts.append(plan.settle_keys)
            count += plan.settle_count
            spec.append(plan.settle_spec)
            numbers.append(tokens_delta)
            numbers.append(nano_delta)
            numbers.append(member)
        for key, n, handed, nano in handovers:
            parts.append(key)
            count += n
            spec.append(handed)
            numbers.append(0)
            numbers.append(nano)
            numbers.append(0)
        for plan, requests, tokens, nano, free in give_backs:
            parts.append(plan.keys)
            count += plan.key_count
            spec.append(plan.give_back_spec)
            numbers += (requests, tokens, nano, len(free))
            numbers += free
        first = self._member_no + 1
        self._member_no += len(admissions)
        numbers.append(first)
        numbers.append(len(grants))
        for a in admissions:
            plan = a[0]
            parts.append(plan.keys)
            count += plan.key_count
            numbers.append(a[1])
            numbers.append(a[2])
        sent_at = 0.0
        if grants:
            assert self.credits is not None
            sent_at = self._clock()
            numbers += (max(1, len(self._members())), self.credits.margin_ms, MIN_GRANT)
            for i, (plan, tokens, nano, requests, slots, _) in enumerate(grants):
                parts.append(plan.keys)
                count += plan.key_count
                numbers += (requests, slots, tokens, nano, self._member_no + 1)
                grants[i] = (plan, tokens, nano, requests, slots, self._member_no + 1)
                self._member_no += slots
        parts[0] = b"*%d\r\n" % (count + 7 + len(admissions) + len(grants))
        parts[2] = bulk(b"%d" % count)
        parts += (self._lease_arg, bulk(b"".join(spec)), self._prefix_arg,
                  bulk(pack(f"<{len(numbers)}q", *numbers)))
        parts += [a[0].admit_spec for a in admissions]
        if grants:
            parts += [g[0].admit_spec for g in grants]
        command = b"".join(parts)
        assert self._redis is not None
        self._in_flight += 1
        self._redis.send(command, _Batch(self, admissions, settlements, handovers, grants, sent_at, first, command))

    def _answered(self, reply: Any, batch: _Batch) -> None:
        if batch.command and isinstance(reply, RedisReplyError) and str(reply).startswith("NOSCRIPT") \
                and self._redis is not None:
            self._redis.load(BATCH)  # a restarted Redis: load the script, send the same call again
            command, batch.command = batch.command, b""
            self._redis.send(command, batch)
            return
        self._in_flight -= 1
        if self._in_flight == 0 and self._idle is not None:
            self._idle.set()
        admissions = batch.admissions
        if isinstance(reply, Exception):
            error = reply if isinstance(reply, RedisUnavailable) else RedisUnavailable(f"the limits script: {reply}")
            for a in admissions:
                if not a[3].done():
                    a[3].set_result(error)  # a result, not raised: the gate then counts alone
            for grant in batch.grants:
                grant[0].granting = False
            if batch.settlements or batch.handovers:  # lost with Redis: leases expire, reservations stay counted
                log.warning("limits: %d settlements did not reach Redis (%s)",
                            len(batch.settlements) + len(batch.handovers), error)
            return
        answers = reply.split(b"|") if len(admissions) + len(batch.grants) > 1 else [reply]
        member = batch.first
        last_plan: Plan | None = None  # the plan whose budget answer is to keep, when the next is another
        last_answer, last_nano = b"", 0
        for i in range(min(len(admissions), len(answers))):
            plan, tokens, nano, future = admissions[i]
            answer: bytes = answers[i]
            outcome: Reservation | Denied
            if answer == b"1":
                outcome = Reservation(plan, member + i, "redis", b"")
            elif answer[0] == 49:  # "1,<budget values>": kept as they came, read when needed
                if last_plan is not None and last_plan is not plan:
                    self._keep_answer(last_plan, last_answer, last_nano)
                last_plan, last_answer, last_nano = plan, answer, nano
                outcome = Reservation(plan, member + i, "redis", answer)
            else:
                _, index, retry_ms, reset_ms = answer.split(b",")
                outcome = Denied(plan.checks[int(index) - 1], int(retry_ms), int(reset_ms))
            try:
                future.set_result(outcome)
            except asyncio.InvalidStateError:  # its request went away meanwhile (the future was cancelled)
                if type(outcome) is Reservation:  # what it took goes back: its lease, its tokens and cost
                    self.settle(outcome, -tokens, -nano)
        if last_plan is not None:
            self._keep_answer(last_plan, last_answer, last_nano)
        if batch.grants:
            credits = self.credits
            assert credits is not None
            for j, (plan, tokens, nano, _, _, first_slot) in enumerate(batch.grants):
                at = len(admissions) + j
                # A grant answered after Redis was lost is not used (what it took stays counted there).
                answer = answers[at] if at < len(answers) and self.mode == "redis" else b"0"
                credit = credits.granted(plan, tokens, nano, first_slot, answer, batch.sent_at)
                if credit is not None and plan.budgets:
                    self._keep_answer(plan, credit.answer, 0)

    def _give_back(self, give_back: GiveBack) -> None:
        """An ended credit's remainder (credit_book.py), with the next script call."""
        if self.mode == "redis":
            self._give_backs.append(give_back)
            self._schedule()

    def _keep_answer(self, plan: Plan, answer: bytes, nano: int) -> None:
        """The last budget answer of `plan` (and what it reserved): where counting alone starts if Redis
        is lost (`_spent_when_lost`). Kept once per run of a plan in a batch: the last is what counts."""
        known = self._answers
        if len(known) > 10_000:
            known.clear()
        known[plan] = (answer, nano)

    def _lost(self, exc: Exception) -> None:
        if self.mode != "redis":
            return
        self.fallbacks += 1
        log.warning("limits: Redis unreachable (%s); each replica enforces its share of every limit until it "
                    "is back", exc)
        self.mode = "fallback"
        self.since = self._clock()
        if self.credits is not None:
            self.credits.drop()
        for grant in self._grants:
            grant[0].granting = False
        self._grants, self._give_backs = [], []
        self._known_spent = self._spent_when_lost()
        # Requests stay local (no wait on a dead Redis); one background probe per retry_redis_s brings it back.
        self._probe = asyncio.get_running_loop().create_task(self._probe_until_back())

    def _spent_when_lost(self) -> dict[str, int]:
        """Each budget counter as Redis last answered it, with the reservation of that answer: where
        counting alone starts. A counter in several plans (a team's budget) takes the highest value:
        over, never under."""
        known: dict[str, int] = {}
        for plan, (answer, nano) in self._answers.items():
            for check, spent in zip(plan.budgets, budget_values(answer), strict=False):
                known[check.key] = max(known.get(check.key, 0), spent + nano)
        self._answers.clear()
        return known

    async def _probe_until_back(self) -> None:
        assert self._redis is not None
        while self.mode == "fallback":
            await asyncio.sleep(self._retry_s)
            try:
                await self._redis.ping()
            except (RedisUnavailable, RedisReplyError):  # still away: try again later
                continue
            log.warning("limits: Redis is back; limits are shared again")
            self.mode = "redis"
            self.since = self._clock()
            alone = self.local.take_budget_spend()
            if alone:  # what was spent meanwhile joins the shared budget counters
                self._handovers.extend(alone)
                self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            get_running_loop().call_soon(self._send)

    def _settle_timer_fired(self) -> None:
        """What still waits goes now (a call that went meanwhile took the earlier ones)."""
        self._settle_timer = None
        if self._settlements or self._handovers:
            self._schedule()

    # -- settlement ---------------------------------------------------------------------

    def settle(self, reservation: Reservation, tokens_delta: int, nano_delta: int) -> None:
        """Give the concurrency lease back and correct tokens and cost to the actual usage (no await: it
        goes with the next loop turn's script call)."""
        plan = reservation.plan
        if nano_delta > 0 and plan.hard and plan.credit is not None and self.credits is not None:
            self.credits.overran(plan)  # it cost more than it reserved: its plan's credit ends
        credit = reservation.credit
        if credit is not None and credit is plan.credit:  # its credit still admits: settled there
            credit.tokens -= tokens_delta
            credit.nano -= nano_delta
            if credit.free is not None:
                credit.free.append(reservation.member)
            return
        if reservation.backend == "local":
            self.local.settle(plan, tokens_delta, nano_delta, reservation.member, len(self._members()))
            return
        if not plan.settle_count or self.mode != "redis":
            return  # Redis away: its leases expire, its reservations stay counted (over, never under)
        settlements = self._settlements
        settlements.append((plan, tokens_delta, nano_delta, reservation.member))
        if len(settlements) > _MAX_PENDING_SETTLEMENTS:
            del settlements[: len(settlements) - _MAX_PENDING_SETTLEMENTS]
        # They ride with the next admissions' call; without one within SETTLE_DELAY_S, they go alone. The
        # timer is not stopped when a call takes them: it fires once, finds nothing or the later ones, and
        # the next settlement arms it again (one timer per SETTLE_DELAY_S under load, not one per call).
        if self._settle_timer is None and not self._scheduled:
            self._settle_timer = get_running_loop().call_later(SETTLE_DELAY_S, self._settle_timer_fired)

    async def close(self) -> None:
        """Send what is still to settle (graceful shutdown) and wait for the answer, bounded."""
        if self._probe is not None:
            self._probe.cancel()
        if self._settle_timer is not None:
            self._settle_timer.cancel()
            self._settle_timer = None
        if self.credits is not None:
            self.credits.close()  # what credits hold goes back with the call below
        if self.mode == "redis" and (self._settlements or self._admissions or self._handovers or self._give_backs):
            self._send()
        if self._in_flight:
            self._idle = asyncio.Event()
            try:
                await asyncio.wait_for(self._idle.wait(), 2.0)
            except (TimeoutError, asyncio.TimeoutError):
                pass

    async def usage(self, checks: Sequence[Check]) -> list[float | None]:
        """What each counter holds now, where limits are counted (Redis, or this replica's share): a rate's
        units in use over the sliding minute, a concurrency's requests in flight, a budget's nano-USD (None:
        not counted yet). For the dashboard, once a poll: one script call for all of them."""
        if not checks:
            return []
        if self.mode == "redis" and self._redis is not None:
            command = encode_eval(USAGE_LUA, checks)
            try:
                reply = await self._redis.call(command)
            except (RedisUnavailable, RedisReplyError) as exc:
                log.debug("limits: usage read failed: %s", exc)
                return [None] * len(checks)
            if isinstance(reply, list):
                return [float(v) if v not in (b"", None) else None for v in reply]
            return [None] * len(checks)
        share = 1.0 / max(1, len(self._members()))
        return [self.local.usage(c, share) for c in checks]

    def describe(self) -> dict[str, Any]:
        """For /v1/cluster: where limits are counted now."""
        replicas = len(self._members())
        return {"mode": self.mode, "shared": self.mode == "redis",
                "live_replicas": replicas, "share": 1.0 if self.mode == "redis" else round(1 / max(1, replicas), 4),
                "since_s": round(self._clock() - self.since, 3), "redis_losses": self.fallbacks,
                "pending_settlements": len(self._settlements) + len(self._handovers),
                "credits": self.credits.describe() if self.credits is not None else {"enabled": False}}
