"""Key lifecycle: create (the secret is shown once), rotate with an overlap window, revoke.

A secret is `sk-sits-` plus 256 random bits from `secrets`; the store keeps only its keyed hash
(`hash_key` under the gateway's key secret), so neither the database nor a log line can give a key back.
`key_id` (`key_` plus 64 random bits) is the public name used everywhere else.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from sits.tenants.records import KeyRecord, hash_key
from sits.tenants.store import KeyEntry, TenantStore

SECRET_PREFIX = "sk-sits-"


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A key with the secret it was just given: the only time the secret exists outside the client."""

    entry: KeyEntry
    secret: str


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def new_key_id() -> str:
    return "key_" + secrets.token_hex(8)


class KeyLifecycle:
    def __init__(self, store: TenantStore, key_secret: bytes, clock: Callable[[], float]) -> None:
        self._store = store
        self._key_secret = key_secret
        self._clock = clock

    def hash(self, secret: str) -> bytes:
        return hash_key(secret, self._key_secret)

    async def create(self, key: KeyRecord) -> IssuedKey:
        """`key` without id or hash: both are made here."""
        secret = new_secret()
        record = dataclasses.replace(key, key_id=key.key_id or new_key_id(), key_hash=self.hash(secret))
        entry = await self._store.create_key(record, self._clock())
        return IssuedKey(entry, secret)

    async def rotate(self, key_id: str, overlap_s: float) -> IssuedKey:
        secret = new_secret()
        now = self._clock()
        entry = await self._store.rotate_key(key_id, self.hash(secret), now + overlap_s, now)
        return IssuedKey(entry, secret)

    async def revoke(self, key_id: str) -> KeyEntry:
        entry = await self._store.revoke_key(key_id, self._clock())
        return entry
