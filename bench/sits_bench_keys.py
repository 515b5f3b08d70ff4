"""Bench only: run `sits` (the normal CLI, e.g. `serve --config ...`) with one tenant key known to the
key gate, for `bench_instructions.py --tenants`: the key gate, its limits and its budget priced on the
real serving path without a key store on disk.

The key is `BENCH_KEY` of team `bench-team`, hashed under $SITS_KEY_SECRET and held by the gateway's
own key directory, with per-key rpm, tpm and concurrency limits and a daily hard budget, all far above
what the bench sends (nothing is refused: the figure is the cost of checking, reserving and settling).
Spend records are counted, not stored.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import sits.serve
from sits.app import Gateway
from sits.tenants.directory import LiveKeyDirectory
from sits.tenants.records import Budget, KeyRecord, Limits, SpendRecord, TeamRecord, hash_key
from sits.tenants.store import Snapshot, TenantStore

BENCH_KEY = os.environ.get("SITS_BENCH_KEY", "sk-bench-tenant-key")


def bench_directory(secret: bytes) -> LiveKeyDirectory:
    """The gateway's own key directory, holding the bench key and its team (no store read: `load`)."""
    key = KeyRecord(key_id="key_bench", name="bench", team_id="bench-team", key_hash=hash_key(BENCH_KEY, secret),
                    limits=Limits(rpm=10_000_000, tpm=10_000_000_000, concurrency=10_000),
                    budget=Budget("daily", hard_usd=1_000_000.0))
    team = TeamRecord("bench-team", "bench", budget=Budget("monthly", hard_usd=10_000_000.0))
    directory = LiveKeyDirectory(TenantStore(None), refresh_s=3600.0)  # type: ignore[arg-type]  # never started
    directory.load(Snapshot(version=1, teams=(team,), keys=(key,)))
    return directory


class CountingSink:
    def __init__(self) -> None:
        self.records = 0

    def record(self, spend: SpendRecord) -> None:
        self.records += 1


class BenchGateway(Gateway):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        secret = os.environ["SITS_KEY_SECRET"].encode()
        super().__init__(*args, key_directory=bench_directory(secret), spend_sink=CountingSink(), **kwargs)


sits.serve.Gateway = BenchGateway  # type: ignore[misc]

from sits.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
