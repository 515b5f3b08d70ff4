"""What a request's limits are made of, as the limiter and its local fallback both see them: the checks
(`Check`), one shape of request's checks encoded for the Redis script once (`Plan`), and what an admission
answers (`Reservation`, `Denied`). The script itself: limit_scripts.py; who asks it: limiter.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

from sits.tenants.credits import MIN_CONCURRENCY, MIN_RATE_PER_MINUTE, MIN_TOKENS_PER_MINUTE, Credit

WINDOW_MS: Final = 60_000  # rpm and tpm are per minute
RATE: Final = "r"
TOKENS: Final = "t"
CONCURRENCY: Final = "c"
BUDGET: Final = "b"
KIND_NAMES: Final = {RATE: "rpm", TOKENS: "tpm", CONCURRENCY: "concurrency", BUDGET: "budget"}

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


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class Plan:
    """One shape of request (a key, its team, a model, this period): its checks, with their part of the
    Redis command encoded once; a request only adds its amounts (and, at settlement, its lease number)."""

    __slots__ = ("checks", "tokens", "budgets", "keys", "key_count", "admit_spec", "settle_keys",
                 "settle_count", "settle_spec", "give_back_spec", "slotted", "hard", "creditable", "credit", "granting",
                 "grant_after", "grant_size", "slot_size")

    def __init__(self, checks: Sequence[Check]) -> None:
        self.checks = tuple(checks)
        self.tokens = any(c.kind == TOKENS for c in checks)
        self.budgets = tuple(c for c in checks if c.kind == BUDGET)
        # Nothing of a request is written into the checks: T and B stand for its tokens and nano-USD, sent
        # beside them (limit_scripts.py), so a request adds two numbers to its batch, not a rewrite.
        amount = {RATE: "1", CONCURRENCY: "1", TOKENS: "T", BUDGET: "B"}
        spec = "".join(f"{c.kind}:{number(c.limit)}:{amount[c.kind]}:{c.seed}:{c.period_end_ms};" for c in checks)
        self.admit_spec = bulk(spec.encode())  # the checks, one encoded argument of the batch command
        self.keys = b"".join(bulk(c.key.encode()) for c in checks)
        self.key_count = len(checks)
        settled = [c for c in checks if c.kind != RATE]
        self.settle_keys = b"".join(bulk(c.key.encode()) for c in settled)
        self.settle_count = len(settled)
        # "@;" (where a settlement's three numbers are read, limit_scripts.py) and its checks' "kind:limit;"
        self.settle_spec = ("@;" + "".join(f"{c.kind}:{number(c.limit)};" for c in settled)).encode()
        # A credit's give-back (credits.py): "&;" (where its numbers are read) and every check's "kind:limit;"
        self.give_back_spec = ("&;" + "".join(f"{c.kind}:{number(c.limit)};" for c in checks)).encode()
        self.slotted = any(c.kind == CONCURRENCY for c in checks)
        self.hard = any(c.kind == BUDGET and c.limit >= 0 for c in checks)  # a hard budget applies
        # Credits (credits.py, limiter.py): whether this plan may use them, the one its requests take now,
        # whether a grant is on its way, no grant asked before `grant_after` (monotonic s: one was refused),
        # and the size of the next grant (requests, concurrency slots).
        self.creditable = False  # set by the limiter when credits are on and `creditable(checks)`
        self.credit: Credit | None = None
        self.granting = False
        self.grant_after = 0.0
        self.grant_size = 0
        self.slot_size = 0


def encode_eval(source: str, checks: Sequence[Check]) -> bytes:
    kinds = "".join(c.kind for c in checks).encode()
    parts = [b"*%d\r\n" % (4 + len(checks) + len(checks)), bulk(b"EVAL"), bulk(source.encode()),
             bulk(b"%d" % len(checks))]
    parts += [bulk(c.key.encode()) for c in checks]
    parts.append(bulk(kinds))
    parts += [bulk(number(c.limit).encode()) for c in checks]
    return b"".join(parts)


def creditable(checks: Sequence[Check]) -> bool:
    """Whether a plan's requests may be admitted on credit (credits.py): every limit large enough that a
    replica's grant is a small part of it (budgets: any; a grant takes at most a share of what is left)."""
    for check in checks:
        kind, limit = check.kind, check.limit
        if kind == RATE and limit < MIN_RATE_PER_MINUTE or kind == TOKENS and limit < MIN_TOKENS_PER_MINUTE \
                or kind == CONCURRENCY and limit < MIN_CONCURRENCY:
            return False
    return True


class Denied(NamedTuple):
    check: Check
    retry_after_ms: int
    reset_at_ms: int  # 0: never (a total budget)


class Reservation:
    """What a request took; given back or corrected at settlement on the backend that took it. A native
    class, not a named tuple: made and read once per request, each field a struct read compiled."""

    __slots__ = ("plan", "member", "backend", "budget_answer", "credit")

    def __init__(self, plan: Plan, member: int, backend: str, budget_answer: bytes,
                 credit: Credit | None = None) -> None:
        self.plan = plan
        self.credit = credit  # the credit it was admitted on (backend "credit"), settled there while it lasts
        self.member = member  # its lease id, within this limiter (`Limiter.lease_id`)
        self.backend = backend  # "redis", "credit" or "local"
        # Each budget check's counter before this request (nano-USD) as the script answered it: "1,<v>,<v>..."
        # (b"" without budgets). Read only where a soft budget is checked: `budget_spent`.
        self.budget_answer = budget_answer

    @property
    def budget_spent(self) -> list[int]:
        return budget_values(self.budget_answer)


def budget_values(answer: bytes) -> list[int]:
    """The budget counters of an admission's answer ("1,<v>,<v>..."), in the plan's order."""
    return [int(v) for v in answer[2:].split(b",")] if len(answer) > 2 else []
