"""Bench only: run `sits` (the normal CLI, e.g. `serve --config ...`) with one tenant key known to the
key gate, for `bench_instructions.py --tenants`: the key gate, its limits and its budget priced on the
real serving path without a key store on disk.

The key is `BENCH_KEY` of team `bench-team`, hashed under $SITS_KEY_SECRET, with per-key rpm, tpm and
concurrency limits and a daily hard budget, all far above what the bench sends (nothing is refused:
the figure is the cost of checking, reserving and settling). Spend records are counted, not stored.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import sits.serve
from sits.app import Gateway
from sits.tenants.records import Budget, KeyRecord, Limits, SpendRecord, TeamRecord, hash_key

BENCH_KEY = os.environ.get("SITS_BENCH_KEY", "sk-bench-tenant-key")


class BenchKeys:
    def __init__(self, secret: bytes) -> None:
        key = KeyRecord(key_id="key_bench", name="bench", team_id="bench-team", key_hash=hash_key(BENCH_KEY, secret),
                        limits=Limits(rpm=10_000_000, tpm=10_000_000_000, concurrency=10_000),
                        budget=Budget("daily", hard_usd=1_000_000.0))
        self._keys = {key.key_hash: key}
        self._team = TeamRecord("bench-team", "bench", budget=Budget("monthly", hard_usd=10_000_000.0))

    def by_hash(self, key_hash: bytes) -> KeyRecord | None:
        return self._keys.get(key_hash)

    def team(self, team_id: str) -> TeamRecord | None:
        return self._team if team_id == "bench-team" else None


class CountingSink:
    def __init__(self) -> None:
        self.records = 0

    def record(self, spend: SpendRecord) -> None:
        self.records += 1


class BenchGateway(Gateway):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        secret = os.environ["SITS_KEY_SECRET"].encode()
        super().__init__(*args, key_directory=BenchKeys(secret), spend_sink=CountingSink(), **kwargs)


sits.serve.Gateway = BenchGateway  # type: ignore[misc]

from sits.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
