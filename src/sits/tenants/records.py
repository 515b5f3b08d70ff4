"""The tenant model as every part of the gateway sees it: immutable records, no I/O.

Organisations (optional) hold teams; teams hold keys. A key is stored only as a keyed hash
(`KeyRecord.key_hash`); its secret is shown once, at creation. The data plane reads these records
from an in-memory directory (`KeyDirectory`) that the store refreshes, never from the database per
request; what a finished request cost goes to a `SpendSink` that batches it off the hot path.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Literal, Protocol

from sits.state.token_price import Price as Price  # shared with the routing table; re-exported
from sits.tenants.usage import SpendRecord as SpendRecord  # re-exported
from sits.tenants.usage import Usage as Usage  # re-exported

Period = Literal["daily", "weekly", "monthly", "total"]
LimitKind = Literal["rpm", "tpm", "concurrency", "budget"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-minute and concurrency caps; None: no cap of that kind."""

    rpm: int | None = None
    tpm: int | None = None  # input + output tokens per minute
    concurrency: int | None = None

    @property
    def any(self) -> bool:
        return self.rpm is not None or self.tpm is not None or self.concurrency is not None


@dataclass(frozen=True, slots=True)
class Budget:
    """USD per period: `soft_usd` alerts (metric, log, header), `hard_usd` rejects with 429."""

    period: Period
    hard_usd: float | None = None
    soft_usd: float | None = None


@dataclass(frozen=True, slots=True)
class TeamRecord:
    team_id: str
    name: str
    organisation: str | None = None
    limits: Limits = Limits()
    budget: Budget | None = None
    metadata: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class KeyRecord:
    key_id: str  # public id, e.g. "key_3f9a..."; shown in logs, spans and metrics instead of the key
    name: str
    team_id: str
    key_hash: bytes  # keyed hash (HMAC-SHA256 under the gateway's key secret) of the secret
    allowed_models: tuple[str, ...] = ("*",)  # model names, aliases or fnmatch patterns
    priority: str | None = None  # admission class name ("realtime", "interactive", "batch"); None: default
    limits: Limits = Limits()
    model_limits: tuple[tuple[str, Limits], ...] = ()  # per model (pattern) within this key
    budget: Budget | None = None
    expires_at: float | None = None  # unix seconds; None: never
    revoked_at: float | None = None
    # A rotated key keeps working until this time (the overlap window), then stops.
    valid_until: float | None = None
    metadata: tuple[tuple[str, str], ...] = field(default=())

    def usable_at(self, now: float) -> bool:
        if self.revoked_at is not None and self.revoked_at <= now:
            return False
        if self.expires_at is not None and self.expires_at <= now:
            return False
        return self.valid_until is None or now < self.valid_until


class KeyDirectory(Protocol):
    """Keys and teams in memory, looked up by the keyed hash of a presented secret."""

    def by_hash(self, key_hash: bytes) -> KeyRecord | None: ...

    def team(self, team_id: str) -> TeamRecord | None: ...


class SpendSink(Protocol):
    """Takes spend records without blocking; a writer flushes them in batches."""

    def record(self, spend: SpendRecord) -> None: ...


def hash_key(secret: str, key_secret: bytes) -> bytes:
    """The stored form of a key: HMAC-SHA256 under the gateway's key secret (a leaked table reveals no key)."""
    return hmac.digest(key_secret, secret.encode(), hashlib.sha256)  # one-shot: the same digest, cheaper
