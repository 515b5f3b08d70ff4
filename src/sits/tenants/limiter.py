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

When Redis cannot be reached, each replica enforces its share of every limit (limit / live replicas,
from the cluster view) in memory, reports it (`mode`, a metric, `/v1/cluster`), and tries Redis again
every `retry_redis_s`, going back to it without a restart. Worst-case excess per mode:
docs/limits-and-budgets.md.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

from sits.tenants.limit_scripts import BATCH, USAGE_LUA
from sits.tenants.redis_wire import RedisReplyError, RedisUnavailable, RedisWire

log = logging.getLogger("sits.tenants")

WINDOW_MS: Final = 60_000  # rpm and tpm are per minute
RATE: Final = "r"
TOKENS: Final = "t"
CONCURRENCY: Final = "c"
BUDGET: Final = "b"
KIND_NAMES: Final = {RATE: "rpm", TOKENS: "tpm", CONCURRENCY: "concurrency", BUDGET: "budget"}
# A finished request's settlement (lease back, tokens and cost corrected) waits at most this long for
# the next admissions' script call to ride with, then goes alone.
SETTLE_DELAY_S: Final = 0.02
_MAX_PENDING_SETTLEMENTS: Final = 50_000  # beyond: the oldest are dropped (leases expire, reservations stay spent)

class Check(NamedTuple):
    """One counter a request must pass and takes: `limit` per minute (rates), at once (concurrency) or
    in nano-USD (budget; -1: soft only, counted but never refused). A request takes 1 of a rate or a
    concurrency counter, its reserved tokens of a `tpm` one and its reserved cost of a budget."""

    kind: str  # RATE, TOKENS, CONCURRENCY or BUDGET
    scope: str  # "key", "team" or "key-model": named in the 429
    key: str  # the counter's name in Redis (and in the local fallback)
    limit: float
    seed: int = 0  # budget: what the period has spent so far, when the counter is not in Redis yet
    period_end_ms: int = 0  # budget: when its period ends (0: never)


def _bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class Plan:
    """One shape of request (a key, its team, a model, this period): its checks, with their part of the
    Redis command encoded once; a request only fills in its amounts and its lease id."""

    __slots__ = ("checks", "tokens", "budgets", "keys", "key_count", "admit_spec", "_settle_keys",
                 "_settle_count", "_settle_spec")

    def __init__(self, checks: Sequence[Check]) -> None:
        self.checks = tuple(checks)
        self.tokens = any(c.kind == TOKENS for c in checks)
        self.budgets = tuple(c for c in checks if c.kind == BUDGET)
        # Nothing of a request is written into the checks: T and B stand for its tokens and nano-USD, sent
        # beside them (limit_scripts.py), so a request costs one short formatted string, not a rewrite.
        amount = {RATE: "1", CONCURRENCY: "1", TOKENS: "T", BUDGET: "B"}
        spec = "".join(f"{c.kind}:{_number(c.limit)}:{amount[c.kind]}:{c.seed}:{c.period_end_ms};" for c in checks)
        self.admit_spec = f"${len(spec)}\r\n{spec}\r\n"  # the checks, one encoded argument of the batch command
        self.keys = b"".join(_bulk(c.key.encode()) for c in checks)
        self.key_count = len(checks)
        settled = [c for c in checks if c.kind != RATE]
        self._settle_keys = b"".join(_bulk(c.key.encode()) for c in settled)
        self._settle_count = len(settled)
        self._settle_spec = "".join(f"{c.kind}:{_number(c.limit)};" for c in settled)

    def settlement(self, tokens_delta: int, nano_delta: int, member: int) -> tuple[bytes, int, str]:
        """(encoded keys, how many, their settlements) for one request, to send in a batch."""
        return self._settle_keys, self._settle_count, f"@{tokens_delta}:{nano_delta}:{member};{self._settle_spec}"


def _encode_eval(source: str, checks: Sequence[Check]) -> bytes:
    kinds = "".join(c.kind for c in checks).encode()
    parts = [b"*%d\r\n" % (4 + len(checks) + len(checks)), _bulk(b"EVAL"), _bulk(source.encode()),
             _bulk(b"%d" % len(checks))]
    parts += [_bulk(c.key.encode()) for c in checks]
    parts.append(_bulk(kinds))
    parts += [_bulk(_number(c.limit).encode()) for c in checks]
    return b"".join(parts)


class Denied(NamedTuple):
    check: Check
    retry_after_ms: int
    reset_at_ms: int  # 0: never (a total budget)


class Reservation:
    """What a request took; given back or corrected at settlement on the backend that took it. A native
    class, not a named tuple: made and read once per request, each field a struct read compiled."""

    __slots__ = ("plan", "member", "backend", "budget_answer")

    def __init__(self, plan: Plan, member: int, backend: str, budget_answer: bytes) -> None:
        self.plan = plan
        self.member = member  # its lease id, within this limiter (`Limiter.lease_id`)
        self.backend = backend  # "redis" or "local"
        # Each budget check's counter before this request (nano-USD) as the script answered it: "1,<v>,<v>..."
        # (b"" without budgets). Read only where a soft budget is checked: `budget_spent`.
        self.budget_answer = budget_answer

    @property
    def budget_spent(self) -> list[int]:
        return _budget_values(self.budget_answer)


def _budget_values(answer: bytes) -> list[int]:
    """The budget counters of an admission's answer ("1,<v>,<v>..."), in the plan's order."""
    return [int(v) for v in answer[2:].split(b",")] if len(answer) > 2 else []


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

    def take_budget_spend(self) -> list[tuple[bytes, int, str]]:
        """Back on Redis: what this replica spent alone, as settlements for the shared counters (which
        then hold the truth again); the local budget counters start over at the next loss."""
        spent = []
        for key, value in self._spent.items():
            check = self._budget_checks.get(key)
            if check is not None and value != self._base.get(key, value):
                spent.append((_bulk(key.encode()), 1, f"@0:{value - self._base[key]}:;b:{_number(check.limit)};"))
        self._spent.clear()
        self._base.clear()
        self._budget_checks.clear()
        return spent

    def _forget_idle(self, now: float) -> None:
        for key in [k for k, tat in self._tat.items() if tat < now]:
            del self._tat[key]


# One request waiting for its batch's answer: (plan, tokens, nano, member, future); a tuple, not an object,
# since one is made per request.
_Admission = tuple[Plan, int, int, int, "asyncio.Future[Reservation | Denied | RedisUnavailable]"]


class Limiter:
    """Admits or refuses a request's checks on Redis (one shared round trip), or alone when Redis is away."""

    def __init__(self, redis: RedisWire | None, members: Callable[[], Sequence[str]], *,
                 lease_s: float = 600.0, retry_redis_s: float = 1.0, max_batch: int = 0,
                 clock: Callable[[], float] = time.monotonic,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        """`redis`: where limits are shared (None: this replica counts alone, its share of each limit)."""
        self._redis = redis
        self._members = members
        self.lease_ms = int(lease_s * 1000)
        self._head = b"$7\r\nEVALSHA\r\n" + _bulk(BATCH.sha.encode())
        self._lease_arg = _bulk(b"%d" % self.lease_ms)
        # Lease ids: this prefix (unique across replicas and restarts) and a number per request, joined by
        # the script, so a request sends only its number.
        self._lease_prefix = os.urandom(6).hex() + "-"
        self._prefix_arg = _bulk(self._lease_prefix.encode())
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
        self._settlements: list[tuple[bytes, int, str]] = []
        self._scheduled = False
        self._settle_timer: asyncio.TimerHandle | None = None
        self._in_flight = 0  # batches sent and not answered yet
        self._idle: asyncio.Event | None = None

    def plan(self, checks: Sequence[Check]) -> Plan:
        return Plan(checks)

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
        `RedisUnavailable` result when Redis failed it: then `alone`); otherwise the answer, counted here."""
        self._member_no += 1
        member = self._member_no
        if self.mode == "redis":
            loop = asyncio.get_running_loop()
            future: asyncio.Future[Reservation | Denied | RedisUnavailable] = loop.create_future()
            admissions = self._admissions
            admissions.append((plan, tokens, nano, member, future))
            if len(admissions) == self._max_batch:  # full: Redis works on it while this turn reads on
                self._send()
            elif not self._scheduled:
                self._scheduled = True
                loop.call_soon(self._send)
            return future
        return self.local.admit(plan, tokens, nano, member, self.lease_ms, len(self._members()), self._known_spent)

    def alone(self, plan: Plan, tokens: int, nano: int, failure: RedisUnavailable) -> Reservation | Denied:
        """Redis failed this request's call: from now on (until the probe finds it back) count here alone."""
        self._lost(failure)
        self._member_no += 1
        return self.local.admit(plan, tokens, nano, self._member_no, self.lease_ms, len(self._members()),
                                self._known_spent)

    def _send(self) -> None:
        """One script call for what this loop turn has to ask: its settlements, then its admissions."""
        self._scheduled = False
        if self._settle_timer is not None:
            self._settle_timer.cancel()
            self._settle_timer = None
        admissions, settlements = self._admissions, self._settlements
        if not admissions and not settlements:
            return
        self._admissions, self._settlements = [], []
        keys = [k for k, _, _ in settlements]
        count = sum(n for _, n, _ in settlements)
        for a in admissions:
            plan = a[0]
            keys.append(plan.keys)
            count += plan.key_count
        spec = "".join(s for _, _, s in settlements).encode()
        amounts = "|".join([f"{a[1]}:{a[2]}:{a[3]}" for a in admissions]).encode()  # tokens:nano:member
        command = b"".join((b"*%d\r\n" % (count + 7 + len(admissions)), self._head, _bulk(b"%d" % count),
                            *keys, self._lease_arg, _bulk(spec), self._prefix_arg, _bulk(amounts),
                            "".join([a[0].admit_spec for a in admissions]).encode()))
        assert self._redis is not None
        self._in_flight += 1
        self._redis.send(command, lambda reply: self._answered(reply, admissions, settlements, command))

    def _answered(self, reply: Any, admissions: list[_Admission], settlements: list[tuple[bytes, int, str]],
                  command: bytes) -> None:
        if command and isinstance(reply, RedisReplyError) and str(reply).startswith("NOSCRIPT") and self._redis:
            self._redis.load(BATCH)  # a restarted Redis: load the script, send the same call again
            self._redis.send(command, lambda again: self._answered(again, admissions, settlements, b""))
            return
        self._in_flight -= 1
        if self._in_flight == 0 and self._idle is not None:
            self._idle.set()
        if isinstance(reply, Exception):
            error = reply if isinstance(reply, RedisUnavailable) else RedisUnavailable(f"the limits script: {reply}")
            for a in admissions:
                if not a[4].done():
                    a[4].set_result(error)  # a result, not raised: the gate then counts alone
            if settlements:  # lost with Redis: leases expire, reservations stay counted (over, never under)
                log.warning("limits: %d settlements did not reach Redis (%s)", len(settlements), error)
            return
        answers = reply.split(b"|") if len(admissions) > 1 else (reply,)
        for (plan, tokens, nano, member, future), answer in zip(admissions, answers, strict=False):
            outcome: Reservation | Denied
            if answer == b"1":
                outcome = Reservation(plan, member, "redis", b"")
            elif answer[0] == 49:  # "1,<budget values>": kept as they came, read when needed
                known = self._answers
                if len(known) > 10_000:
                    known.clear()
                known[plan] = (answer, nano)
                outcome = Reservation(plan, member, "redis", answer)
            else:
                _, index, retry_ms, reset_ms = answer.split(b",")
                outcome = Denied(plan.checks[int(index) - 1], int(retry_ms), int(reset_ms))
            try:
                future.set_result(outcome)
            except asyncio.InvalidStateError:  # its request went away meanwhile (the future was cancelled)
                if type(outcome) is Reservation:  # what it took goes back: its lease, its tokens and cost
                    self.settle(outcome, -tokens, -nano)

    def _lost(self, exc: Exception) -> None:
        if self.mode != "redis":
            return
        self.fallbacks += 1
        log.warning("limits: Redis unreachable (%s); each replica enforces its share of every limit until it "
                    "is back", exc)
        self.mode = "fallback"
        self.since = self._clock()
        self._known_spent = self._spent_when_lost()
        # Requests stay local (no wait on a dead Redis); one background probe per retry_redis_s brings it back.
        self._probe = asyncio.get_running_loop().create_task(self._probe_until_back())

    def _spent_when_lost(self) -> dict[str, int]:
        """Each budget counter as Redis last answered it, with the reservation of that answer: where
        counting alone starts. A counter in several plans (a team's budget) takes the highest value:
        over, never under."""
        known: dict[str, int] = {}
        for plan, (answer, nano) in self._answers.items():
            for check, spent in zip(plan.budgets, _budget_values(answer), strict=False):
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
                self._settlements.extend(alone)
                self._schedule()

    def _schedule(self) -> None:
        self._settle_timer = None
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._send)

    # -- settlement ---------------------------------------------------------------------

    def settle(self, reservation: Reservation, tokens_delta: int, nano_delta: int) -> None:
        """Give the concurrency lease back and correct tokens and cost to the actual usage (no await: it
        goes with the next loop turn's script call)."""
        plan = reservation.plan
        if reservation.backend == "local":
            self.local.settle(plan, tokens_delta, nano_delta, reservation.member, len(self._members()))
            return
        if not plan._settle_count or self.mode != "redis":
            return  # Redis away: its leases expire, its reservations stay counted (over, never under)
        settlements = self._settlements
        settlements.append(plan.settlement(tokens_delta, nano_delta, reservation.member))
        if len(settlements) > _MAX_PENDING_SETTLEMENTS:
            del settlements[: len(settlements) - _MAX_PENDING_SETTLEMENTS]
        # They ride with the next admissions' call; without one within SETTLE_DELAY_S, they go alone.
        if self._settle_timer is None and not self._scheduled:
            self._settle_timer = asyncio.get_running_loop().call_later(SETTLE_DELAY_S, self._schedule)

    async def close(self) -> None:
        """Send what is still to settle (graceful shutdown) and wait for the answer, bounded."""
        if self._probe is not None:
            self._probe.cancel()
        if self.mode == "redis" and (self._settlements or self._admissions):
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
            command = _encode_eval(USAGE_LUA, checks)
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
                "pending_settlements": len(self._settlements)}
