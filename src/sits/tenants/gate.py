"""The key gate of the data plane: who is calling, may they use this model, are they within their
limits and budget, and what the request cost when it ends.

Pure logic over the in-memory `KeyDirectory` and the `Limiter`: no database read per request. The
HTTP edge (`api/tenant_gate.py`) authenticates in the dispatcher's `before` hook, calls `admit` once
the model is known and hands the returned `Ticket` to the request's observation, which calls
`Ticket.finish` exactly once (success, error, end of stream or client gone). Never the key itself
in a log, a span or a metric: its public `key_id` and its team.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import Final, NamedTuple

from sits.errors import Forbidden, RateLimited, Unauthorized
from sits.state.routing_table import RoutingTable
from sits.tenants.budget import NANO, BudgetChecks, soft_exceeded
from sits.tenants.limit_plan import CONCURRENCY, KIND_NAMES, RATE, TOKENS, Check, Denied, Plan, Reservation
from sits.tenants.limiter import Limiter
from sits.tenants.redis_wire import RedisUnavailable
from sits.tenants.usage import SpendRecord, Usage
from sits.telemetry.metrics import Count
from sits.tenants.metrics import TenantMetrics
from sits.tenants.pricing import FREE_SOURCES, PriceBook, usage_from
from sits.tenants.records import (
    Budget,
    KeyDirectory,
    KeyRecord,
    Limits,
    Price,
    SpendSink,
    TeamRecord,
    hash_key,
)

log = logging.getLogger("sits.tenants")

AUTO: Final = "auto"
_MAX_USER_CHARS: Final = 256
_NO_USAGE: Final = Usage()
_ANY_MODEL: Final = ("*",)
_MAX_REMEMBERED_KEYS: Final = 10_000
_SHAPE_TTL_S: Final = 60.0  # a budget counter's seed is read again after this long
_NANO_PER_MILLION: Final = NANO / 1_000_000  # prices are per million tokens, budgets counted in nano-USD


class GateSettings(NamedTuple):
    key_secret: bytes  # the HMAC secret key hashes are computed under
    default_output_reservation: int  # output tokens reserved when the request names no max_tokens
    prefix: str = "sits:lim:"  # Redis key prefix of every counter


class Ticket:
    """One admitted request: what it reserved, settled once by `finish`."""

    __slots__ = ("_gate", "key", "team", "user", "model", "request_id", "reservation", "prompt_tokens",
                 "output_tokens", "reserved_nano", "warning", "table", "pending", "shape", "generated", "_done")

    def __init__(self, gate: TenantGate, key: KeyRecord, team: TeamRecord | None, user: str | None, model: str,
                 request_id: str, table: RoutingTable, shape: _Shape) -> None:
        self._gate = gate
        self.key, self.team, self.user, self.model, self.request_id = key, team, user, model, request_id
        self.table = table  # the table the request started with (its prices)
        self.shape = shape
        self.reservation: Reservation | None = None
        self.prompt_tokens = self.output_tokens = self.reserved_nano = 0
        self.warning: str | None = None  # soft budget passed: said in the x-sits-budget-warning header
        # While its counters are being asked: what `TenantGate.end` takes (Redis's answer, or its failure).
        self.pending: asyncio.Future[Reservation | Denied | RedisUnavailable] | None = None
        # What a stream that reported no usage generated (its relay fills it in): counted at settlement.
        self.generated: str | None = None
        self._done = False

    def finish(self, model: str, endpoint: str, status: int, seconds: float, raw_usage: bytes = b"",
               counts: tuple[int, int] | None = None) -> None:
        """Settle and log the spend; `raw_usage` is the answer (or the stream's last events) holding
        `usage`, `counts` the (prompt, completion) tokens when only those are known."""
        if self._done:
            return
        self._done = True
        gate = self._gate
        table = self.table
        shape = self.shape
        free = endpoint in FREE_SOURCES
        usage = usage_from(raw_usage, counts) if raw_usage else None
        if usage is None and counts is not None:
            usage = Usage(counts[0], 0, counts[1], 0)
        if usage is None:
            if endpoint == "none" or free:
                usage = _NO_USAGE  # no model ran
            else:  # a model answered but said nothing of its usage
                usage = self._unreported(model)
        cost = 0.0 if free else gate._prices.cost(table, endpoint, usage)
        if self.reservation is not None:
            gate.limiter.settle(self.reservation, usage.input_tokens + usage.output_tokens - self.prompt_tokens
                                - self.output_tokens, int(cost * NANO + 0.5) - self.reserved_nano)
        gate.metrics.used(shape.team_id, model, table, usage, cost)
        requested = self.model
        if requested != model:  # the model named is the one that answered: no alias to look up
            requested = table.aliases.get(requested, requested)
        gate._sink.record(SpendRecord(
            self.request_id, gate._wall(), shape.key_id, shape.team_id, self.user, model, endpoint, usage, cost,
            seconds * 1000.0, status, free,
            requested != model and requested != AUTO and requested in table.models and not free))

    def _unreported(self, model: str) -> Usage:
        """Usage for an answer that reported none: a stream's generated text counted with the model's
        tokenizer (characters / 4 without one); otherwise the reservation, an upper bound."""
        if self.generated is None:
            return Usage(self.prompt_tokens, 0, self.output_tokens, 0)
        return Usage(self.prompt_tokens, 0, self._gate._prompt_tokens(model, self.generated), 0)

    def span_attributes(self) -> dict[str, str]:
        return {"sits.key_id": self.key.key_id, "sits.team": self.key.team_id}


class _Shape:
    """What a key, its team and a model add up to (`TenantGate._shape`). A native class, not a named tuple:
    the request path reads several of its fields per request, a struct read each compiled."""

    __slots__ = ("key", "team", "key_id", "team_id", "table", "until", "allowed", "plan", "priced", "input_nano",
                 "output_nano", "budgets", "soft", "team_label", "admitted", "counted")

    def __init__(self, key: KeyRecord, team: TeamRecord | None, table: RoutingTable, until: float, allowed: bool,
                 plan: Plan | None, price: Price | None, budgets: tuple[tuple[str, str, Budget], ...],
                 soft: tuple[float, ...], team_label: str, admitted: tuple[str, str, str], counted: Count) -> None:
        self.key, self.team, self.table = key, team, table
        self.key_id, self.team_id = key.key_id, key.team_id  # read at each settlement: a struct read here
        self.until = until  # wall seconds
        self.allowed = allowed  # whether the key may use the model
        self.plan = plan  # None: no limit and no budget applies
        # What a reservation is priced at, in nano-USD a token (priced: a budget applies and the model has a price).
        self.priced = plan is not None and bool(plan.budgets) and price is not None
        self.input_nano = price.input * _NANO_PER_MILLION if price is not None else 0.0
        self.output_nano = price.output * _NANO_PER_MILLION if price is not None else 0.0
        self.budgets = budgets
        self.soft = soft  # each budget's soft limit in nano-USD (inf: none); empty when no budget has one
        self.team_label = team_label
        self.admitted = admitted  # the metric's labels
        self.counted = counted  # the admitted requests' series of that metric


class TenantGate:
    def __init__(self, directory: KeyDirectory, sink: SpendSink, limiter: Limiter, budgets: BudgetChecks,
                 table: Callable[[], RoutingTable], metrics: TenantMetrics, settings: GateSettings,
                 prompt_tokens: Callable[[str, str], int] = lambda model, text: len(text) // 4 + 1,
                 wall: Callable[[], float] = time.time) -> None:
        """`prompt_tokens(model, text)`: the prompt's tokens for a reservation (the tokenizer when loaded)."""
        self._directory = directory
        self._prompt_tokens = prompt_tokens
        self._sink = sink
        self.limiter = limiter
        self._budgets = budgets
        self._table = table
        self.metrics = metrics
        self._settings = settings
        self._wall = wall
        self._prices = PriceBook()
        self._default_output = settings.default_output_reservation
        # By the key record's id, then the model: two lookups by an int and a str (hash kept), not one by a
        # tuple made and hashed per request. A shape is used only for the very records it was made of.
        self._shapes: dict[int, dict[str, _Shape]] = {}
        self._hashes: dict[str, bytes] = {}  # presented key -> its keyed hash, for keys that exist
        self._endless: KeyRecord | None = None
        self._warned: set[str] = set()

    # -- who, and what for ------------------------------------------------------------------

    def authenticate(self, token: str | None) -> KeyRecord:
        """The key presented as a bearer token: 401 when it is missing, unknown, revoked or expired.

        The lookup is by the keyed hash of the token, which a caller cannot steer without the secret,
        so the dictionary lookup leaks nothing useful by its timing. The hashes of keys that were found
        are kept (bounded), so a known key costs a dictionary lookup instead of an HMAC; the directory
        is still asked each time, so a revocation counts at the next request."""
        if token is None:
            self.metrics.requests.inc(("none", "none", "unauthorized"))
            raise Unauthorized("this gateway needs 'Authorization: Bearer <api key>'")
        key_hash = self._hashes.get(token)
        if key_hash is None:
            key_hash = hash_key(token, self._settings.key_secret)
            key = self._directory.by_hash(key_hash)
            if key is not None:  # only keys that exist: unknown ones cannot fill the memo
                if len(self._hashes) >= _MAX_REMEMBERED_KEYS:
                    self._hashes.clear()
                self._hashes[token] = key_hash
        else:
            key = self._directory.by_hash(key_hash)
        if key is None:
            self.metrics.requests.inc(("none", "none", "unauthorized"))
            raise Unauthorized("invalid API key")
        if key is self._endless:
            return key  # the last key found to have no end (records are replaced, never changed, on reload)
        if key.revoked_at is None and key.expires_at is None and key.valid_until is None:
            self._endless = key
            return key  # no end of any kind: usable (the common case, without a call)
        now = self._wall()
        if not key.usable_at(now):
            self.metrics.requests.inc((self.metrics.team(key.team_id), "none", "unauthorized"))
            raise Unauthorized(f"API key {key.key_id} is {_why_unusable(key, now)}")
        return key

    def check_model(self, key: KeyRecord, model: str, table: RoutingTable) -> None:
        """403 naming what the key may use when `model` (or the model an alias points to) is not allowed."""
        if key.allowed_models == _ANY_MODEL or _may_use(key, model, table):
            return
        allowed = key.allowed_models
        self.metrics.requests.inc((self.metrics.team(key.team_id), self._model_label(model, table), "forbidden"))
        raise Forbidden(f"API key {key.key_id} may not use model '{model}'; it may use: {', '.join(allowed)}",
                        param="model", code="model_not_allowed")

    # -- admission -------------------------------------------------------------------------

    async def admit(self, key: KeyRecord, model: str, user: str | None, request_id: str, prompt_text: str,
                    max_tokens: int | None) -> Ticket:
        """A ticket, or 403 / 429 (a refused request is logged in the spend log too, at no cost)."""
        ticket = self.begin(key, self.team_of(key), model, user, request_id, prompt_text, max_tokens)
        if ticket.pending is not None:
            ticket = self.end(ticket, await ticket.pending)
        return ticket

    def team_of(self, key: KeyRecord) -> TeamRecord | None:
        return self._directory.team(key.team_id)

    def begin(self, key: KeyRecord, team: TeamRecord | None, model: str, user: str | None, request_id: str,
              prompt_text: str, max_tokens: int | None) -> Ticket:
        """The first half of `admit`, with no await: a ticket that is admitted already (nothing to count,
        or counted here alone), or one whose `pending` future the caller awaits and hands to `end` (the
        request's part of this loop turn's Redis call). 403 when the key may not use the model. `team`:
        the key's team (`team_of`), looked up once per request by the caller."""
        if user is not None and len(user) > _MAX_USER_CHARS:
            user = user[:_MAX_USER_CHARS]
        table = self._table()
        models = self._shapes.get(id(key))
        shape = models.get(model) if models is not None else None
        if shape is None or shape.key is not key or shape.team is not team or shape.table is not table \
                or self._wall() >= shape.until:
            shape = self._shape(key, team, model, table, self._wall())
        if not shape.allowed:
            try:
                self.check_model(key, model, table)
            except Forbidden:
                self._refused(key, model, user, request_id, Forbidden.http_status)
                raise
        ticket = Ticket(self, key, team, user, model, request_id, table, shape)
        plan = shape.plan
        if plan is None:  # nothing to count: no Redis round trip at all
            shape.counted.value += 1.0
            return ticket
        prompt = self._prompt_tokens(model, prompt_text) if plan.tokens or plan.budgets else 0
        output = max_tokens if max_tokens is not None else self._default_output
        reserve_nano = math.ceil(prompt * shape.input_nano + output * shape.output_nano) if shape.priced else 0
        ticket.prompt_tokens, ticket.output_tokens, ticket.reserved_nano = prompt, output, reserve_nano
        outcome = self.limiter.reserve(plan, prompt + output, reserve_nano)
        if isinstance(outcome, asyncio.Future):
            ticket.pending = outcome
            return ticket
        return self.end(ticket, outcome)

    def end(self, ticket: Ticket, outcome: Reservation | Denied | RedisUnavailable) -> Ticket:
        """The second half of `admit`: what the limiter answered (Redis's failure: counted here alone)."""
        ticket.pending = None
        shape = ticket.shape
        limiter = self.limiter
        if type(outcome) is RedisUnavailable:
            outcome = limiter.alone(shape.plan, ticket.prompt_tokens + ticket.output_tokens,  # type: ignore[arg-type]
                                    ticket.reserved_nano, outcome)
        if limiter.mode != "redis":
            self.metrics.local_admissions.inc((limiter.mode,))
        if type(outcome) is Denied:
            kind = KIND_NAMES[outcome.check.kind]
            key = ticket.key
            self.metrics.requests.inc((shape.team_label, shape.admitted[1], kind))
            self._refused(key, ticket.model, ticket.user, ticket.request_id, RateLimited.http_status)
            raise _refusal(outcome, kind, key, self._wall())
        shape.counted.value += 1.0
        ticket.reservation = outcome  # type: ignore[assignment]
        if shape.soft:  # some budget has a soft limit: is it passed?
            for spent, threshold in zip(outcome.budget_spent, shape.soft, strict=False):  # type: ignore[union-attr]
                if spent >= threshold:
                    ticket.warning = self._soft_warning(outcome, shape.budgets, ticket.key,  # type: ignore[arg-type]
                                                        shape.team_label)
                    break
        return ticket

    @staticmethod
    def may_warn(key: KeyRecord, team: TeamRecord | None) -> bool:
        """Whether a request of `key` (of `team`) can pass a soft budget (its own or its team's has one)."""
        if key.budget is not None and key.budget.soft_usd is not None:
            return True
        return team is not None and team.budget is not None and team.budget.soft_usd is not None

    def _shape(self, key: KeyRecord, team: TeamRecord | None, model: str, table: RoutingTable,
               now: float) -> _Shape:
        """What a key, its team and a model add up to: the checks and their encoded commands, kept until
        the key, the team or the table change, a budget period ends, or a minute passes (budget seeds).
        A model the key may not use gets a shape that says only that: no checks, no series counted."""
        if key.allowed_models != _ANY_MODEL and not _may_use(key, model, table):
            return self._keep(key, team, model, _Shape(key, team, table, now + _SHAPE_TTL_S, False, None, None, (),
                                                       (), "", ("", "", ""), Count()))
        budgets = [(scope, scope_id, budget) for scope, scope_id, budget in (
            ("key", key.key_id, key.budget), ("team", key.team_id, team.budget if team is not None else None))
            if budget is not None]
        limits = [(scope, scope_id, lim) for scope, scope_id, lim in (
            ("key", key.key_id, key.limits), ("team", key.team_id, team.limits if team is not None else None),
            ("key-model", f"{key.key_id}:{model}", _model_limits(key, model))) if lim is not None and lim.any]
        prefix = self._settings.prefix
        checks: list[Check] = []
        for scope, scope_id, lim in limits:
            if lim.rpm is not None:
                checks.append(Check(RATE, scope, f"{prefix}r:{scope}:{scope_id}", lim.rpm))
            if lim.tpm is not None:
                checks.append(Check(TOKENS, scope, f"{prefix}t:{scope}:{scope_id}", lim.tpm))
            if lim.concurrency is not None:
                checks.append(Check(CONCURRENCY, scope, f"{prefix}c:{scope}:{scope_id}", lim.concurrency))
        until = now + _SHAPE_TTL_S
        for scope, scope_id, budget in budgets:
            check = self._budgets.check(scope, scope_id, budget, now)
            checks.append(check)
            if check.period_end_ms:
                until = min(until, check.period_end_ms / 1000)
        team_label = self.metrics.team(key.team_id)
        admitted = (team_label, self._model_label(model, table), "admitted")
        return self._keep(key, team, model, _Shape(
            key, team, table, until, True, self.limiter.plan(checks) if checks else None,
            self._prices.estimate(table, model), tuple(budgets),
            tuple(b.soft_usd * NANO if b.soft_usd is not None else math.inf for _, _, b in budgets)
            if any(b.soft_usd is not None for _, _, b in budgets) else (), team_label,
            admitted, self.metrics.requests.count(admitted)))

    def _keep(self, key: KeyRecord, team: TeamRecord | None, model: str, shape: _Shape) -> _Shape:
        models = self._shapes.get(id(key))
        if models is None or len(models) > 1_000:
            if len(self._shapes) > 10_000:
                self._shapes.clear()
            models = self._shapes[id(key)] = {}
        models[model] = shape
        return shape

    def _soft_warning(self, reservation: Reservation, budgets: tuple[tuple[str, str, Budget], ...], key: KeyRecord,
                      team_label: str) -> str | None:
        warnings = []
        for (scope, scope_id, budget), spent in zip(budgets, reservation.budget_spent, strict=False):
            if budget is not None and soft_exceeded(budget, spent):
                self.metrics.soft_budget.inc((team_label, scope))
                warnings.append(f"{scope} {scope_id} spent ${spent / NANO:.4f} of its {budget.period} soft budget "
                                f"${budget.soft_usd:g}")
                marker = f"{scope}:{scope_id}:{budget.period}"
                if marker not in self._warned and len(self._warned) < 10_000:  # one log line per budget
                    self._warned.add(marker)
                    log.warning("soft budget passed: %s (key %s)", warnings[-1], key.key_id)
        return "; ".join(warnings) or None

    # -- settlement ------------------------------------------------------------------------

    def finish(self, ticket: Ticket, model: str, endpoint: str, status: int, seconds: float, raw_usage: bytes,
               counts: tuple[int, int] | None) -> None:
        """Settle `ticket` (once): `Ticket.finish`, which the request's observation calls."""
        ticket.finish(model, endpoint, status, seconds, raw_usage, counts)

    def _refused(self, key: KeyRecord, model: str, user: str | None, request_id: str, status: int) -> None:
        self._sink.record(SpendRecord(request_id=request_id, at=self._wall(), key_id=key.key_id, team_id=key.team_id,
                                      user=user, model=model, endpoint="none", usage=_NO_USAGE, cost_usd=0.0,
                                      latency_ms=0.0, status=status))

    @staticmethod
    def _model_label(model: str, table: RoutingTable) -> str:
        return model if model in table.models or model in table.aliases or model == AUTO else "unknown"


def _may_use(key: KeyRecord, model: str, table: RoutingTable) -> bool:
    """Whether `model`, or the model it is an alias of, matches one of the key's allowed patterns."""
    target = table.aliases.get(model)
    return any(fnmatchcase(model, p) or (target is not None and fnmatchcase(target, p)) for p in key.allowed_models)


def _model_limits(key: KeyRecord, model: str) -> Limits | None:
    for pattern, limits in key.model_limits:
        if fnmatchcase(model, pattern):
            return limits
    return None


def _why_unusable(key: KeyRecord, now: float) -> str:
    if key.revoked_at is not None and key.revoked_at <= now:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    return "rotated out (its overlap window has ended)"


def _refusal(denied: Denied, kind: str, key: KeyRecord, now: float) -> RateLimited:
    check = denied.check
    scope = f"team {key.team_id}" if check.scope == "team" else f"key {key.key_id}"
    retry_s = max(1, math.ceil(denied.retry_after_ms / 1000)) if denied.reset_at_ms or kind != "budget" else 0
    if kind == "concurrency":
        reset, denied = "when one of its requests in flight ends", denied._replace(reset_at_ms=0)
    else:
        reset = _iso(denied.reset_at_ms / 1000) if denied.reset_at_ms else "never (a total budget)"
    if kind == "budget":
        what = f"the {check.scope} hard budget (${check.limit / NANO:g}) is spent"
    elif kind == "concurrency":
        what = f"{check.scope} concurrency limit of {check.limit:g} requests in flight reached"
    else:
        what = f"{check.scope} {kind} limit of {check.limit:g} per minute reached"
    message = f"{what} for {scope}; limit: {kind}; resets at {reset}"
    headers = [("x-sits-limit", kind), ("x-sits-limit-scope", check.scope)]
    if retry_s:
        message += f"; retry after {retry_s}s"
        headers.append(("retry-after", str(retry_s)))
    if denied.reset_at_ms:
        headers.append(("x-ratelimit-reset", _iso(denied.reset_at_ms / 1000)))
    code = "budget_exceeded" if kind == "budget" else "rate_limit_exceeded"
    return RateLimited(message, param=kind, code=code, headers=tuple(headers))


def _iso(unix_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_s))

