"""Per-replica credits: a plan's limits taken from Redis in advance, so most requests are admitted and
settled in this process's memory, with no Redis round trip and no await.

A replica asks Redis for a *grant* of a plan (one shape of request: a key, its team, a model): n requests'
worth of every check at once (n rate units, n times the asking request's tokens and nano-USD) and s
concurrency slots (s leases in the concurrency set), in the same atomic script as per-request admissions
(limit_scripts.py). The grant is all or nothing, and takes at most headroom / (2 x live replicas) of every
check, so replicas near a limit fall back to per-request admission and never hold much of what is left.

The bounds are those of per-request admission (docs/limits-and-budgets.md):

- rates: a grant is taken only if the counter would still have `lifetime` to spare in its minute, and a
  credit admits nothing after `lifetime` from when its grant was sent, so every unit is used at a time
  when per-request admission would also have let it through;
- concurrency: a credited request holds one of the grant's leases, so the set counts it as any other;
- budgets: a grant fits the hard limit whole (no reservation beyond it), and a request's cost beyond
  what it reserved is charged to Redis like a per-request one's.

What a credit still holds when it ends (its lifetime passed, replaced by the next grant, shutdown) is given
back: unused rate units and tokens, nano-USD, free slots (limiter.py). Lost with Redis, credits are dropped
and what they held stays counted (over, never under).
"""

from __future__ import annotations

from typing import Final

# Limits below these are enforced request by request: a grant there would hold a large part of the limit.
MIN_RATE_PER_MINUTE: Final = 600.0
MIN_TOKENS_PER_MINUTE: Final = 100_000.0
MIN_CONCURRENCY: Final = 32.0
FIRST_GRANT: Final = 16  # requests asked by a plan's first grant; doubled while a credit is used up in time
MAX_GRANT: Final = 1024
MIN_GRANT: Final = 4  # a grant that would give fewer requests is refused: per-request admission instead
FIRST_SLOTS: Final = 8  # concurrency slots asked; doubled when a credit ran out of slots first
MAX_SLOTS: Final = 256


class Credit:
    """What one grant gave this replica for one plan, used by requests in memory until `expires`."""

    __slots__ = ("requests", "tokens", "nano", "free", "refill_at", "expires", "answer", "granted", "slots_short")

    def __init__(self, requests: int, tokens: int, nano: int, free: list[int] | None, expires: float,
                 answer: bytes) -> None:
        self.requests = requests  # rate units left (one a request)
        self.tokens = tokens  # tokens left (a request takes its reservation, gives back what it did not use)
        self.nano = nano  # nano-USD left, of every budget check alike
        self.free = free  # free concurrency slots: their lease numbers (None: the plan has no concurrency check)
        self.refill_at = requests // 2  # when this many requests are left, the next grant is asked
        self.expires = expires  # monotonic seconds: admits nothing from then on
        # "1,<v>,<v>...": each budget counter after the grant, the admission answer of its requests (a soft
        # budget is checked on it: what the grant took counts as spent, so a warning comes early, never late).
        self.answer = answer
        self.granted = requests
        self.slots_short = False  # a request found no free slot while requests were left

