"""Composition-root helpers that decide identities."""

from __future__ import annotations

from sits.app import replica_id
from sits.settings import Settings


def test_each_worker_process_is_its_own_replica_and_keeps_its_id_across_restarts():
    one = Settings()
    assert replica_id("host:8080", one) == "host:8080"
    workers = [Settings().with_overrides(worker_index=i) for i in range(3)]
    ids = [replica_id("host:8080", s) for s in workers]
    assert ids == ["host:8080#w0", "host:8080#w1", "host:8080#w2"]
    assert ids == [replica_id("host:8080", Settings().with_overrides(worker_index=i)) for i in range(3)]
