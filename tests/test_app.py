"""Composition-root helpers that decide identities."""

from __future__ import annotations

from sits.settings import Settings


def test_each_worker_process_is_its_own_replica_and_keeps_its_id_across_restarts():
    one = Settings()
    assert one.replica_of("host:8080") == "host:8080"
    workers = [Settings().with_overrides(worker_index=i) for i in range(3)]
    ids = [s.replica_of("host:8080") for s in workers]
    assert ids == ["host:8080#w0", "host:8080#w1", "host:8080#w2"]
    assert ids == [Settings().with_overrides(worker_index=i).replica_of("host:8080") for i in range(3)]
