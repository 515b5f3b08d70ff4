"""RegistryStore: roundtrip, all-or-nothing commits, optimistic versions, and a real crash."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sits.state.registry_store import RegistryStore, RegistryStoreError, StaleRegistryVersion, StoredRegistry


@pytest.fixture
def store(tmp_path: Path):
    s = RegistryStore(tmp_path / "data" / "registry.sqlite3")
    yield s
    s.close()


def test_empty_store_is_version_zero(store):
    assert store.load() == StoredRegistry(0, {})


def test_roundtrip_survives_reopen(store, tmp_path):
    v1 = store.commit(0, {"a": b"\x00one", "b": b"two"}, set())
    v2 = store.commit(v1, {"a": b"uno", "c": b""}, {"b", "never-existed"})
    assert (v1, v2) == (1, 2)
    store.close()
    reopened = RegistryStore(store.path)
    try:
        assert reopened.load() == StoredRegistry(2, {"a": b"uno", "c": b""})
    finally:
        reopened.close()


def test_load_returns_a_copy(store):
    store.commit(0, {"a": b"1"}, set())
    store.load().records["a"] = b"changed"
    assert store.load().records == {"a": b"1"}


def test_stale_version_is_refused_and_changes_nothing(tmp_path):
    path = tmp_path / "registry.sqlite3"
    first, second = RegistryStore(path), RegistryStore(path)  # e.g. two processes
    try:
        first.commit(0, {"a": b"1"}, set())
        with pytest.raises(StaleRegistryVersion) as info:
            second.commit(0, {"b": b"2"}, {"a"})
        assert (info.value.expected, info.value.actual) == (0, 1)
        assert second.load() == StoredRegistry(1, {"a": b"1"})
        assert second.commit(1, {"b": b"2"}, {"a"}) == 2
        assert first.load() == StoredRegistry(2, {"b": b"2"})
    finally:
        first.close()
        second.close()


def test_failure_mid_commit_leaves_previous_state(store):
    store.commit(0, {"keep": b"k", "gone": b"g", "a": b"old"}, set())
    # A fault inside the transaction, after the deletes and some upserts already ran.
    with sqlite3.connect(store.path) as db:
        db.execute(
            "CREATE TRIGGER poison BEFORE INSERT ON records WHEN NEW.key = 'poison'"
            " BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
        )
    with pytest.raises(RegistryStoreError, match="injected fault"):
        store.commit(1, {"a": b"new", "b": b"b", "poison": b"x", "c": b"c"}, {"gone"})
    assert store.load() == StoredRegistry(1, {"keep": b"k", "gone": b"g", "a": b"old"})
    # and the store is usable afterwards
    assert store.commit(1, {"a": b"new"}, {"gone"}) == 2
    assert store.load() == StoredRegistry(2, {"keep": b"k", "a": b"new"})


@pytest.mark.parametrize(
    ("upserts", "deletes", "error"),
    [
        ({"a": "not bytes"}, set(), TypeError),
        ({1: b"x"}, set(), TypeError),
        ({}, {2}, TypeError),
        ({"a": b"x"}, {"a"}, ValueError),
    ],
)
def test_malformed_change_is_refused_before_writing(store, upserts, deletes, error):
    with pytest.raises(error):
        store.commit(0, upserts, deletes)
    assert store.load() == StoredRegistry(0, {})


def test_file_is_in_wal_mode(store):
    store.load()
    with sqlite3.connect(store.path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def _open_together(path: Path, barrier, outcomes) -> None:
    barrier.wait()
    try:
        RegistryStore(path).load()
        outcomes.put("ok")
    except RegistryStoreError as exc:
        outcomes.put(str(exc))


def test_workers_opening_a_new_store_together_all_open_it(tmp_path):
    """`sits serve --workers N` starts its workers at once, each opening the registry file: SQLite refuses
    the switch to WAL ("database is locked", without waiting) while another process holds the new file.
    Without the retry, thirty rounds of six processes met it in every run here (a worker then never
    started); with it, every process opens the store."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    failures = []
    for round_ in range(30):
        folder = tmp_path / f"r{round_}"
        folder.mkdir()
        barrier, outcomes = ctx.Barrier(6), ctx.Queue()
        workers = [ctx.Process(target=_open_together, args=(folder / "registry.sqlite3", barrier, outcomes))
                   for _ in range(6)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(30)
        failures += [o for o in (outcomes.get(timeout=5) for _ in workers) if o != "ok"]
    assert failures == []


def test_unopenable_path_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(RegistryStoreError, match="cannot open registry store"):
        RegistryStore(tmp_path / "file" / "registry.sqlite3").load()


async def test_async_callers_use_a_thread(store):
    import asyncio

    version = await asyncio.to_thread(store.commit, 0, {"a": b"1"}, set())
    assert (await asyncio.to_thread(store.load)) == StoredRegistry(version, {"a": b"1"})


# -- a real crash ------------------------------------------------------------------------------

SMALL_COMMITS = 40
BIG_RECORDS = 3000
BIG_VALUE = 16 * 1024

WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from sits.state.registry_store import RegistryStore

    store = RegistryStore(Path(sys.argv[1]))
    small, big, size = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    version = 0
    for i in range(1, small + 1):
        deletes = {f"k{i - 3}"} if i > 3 else set()
        version = store.commit(version, {f"k{i}": f"v{i}".encode()}, deletes)
        print(f"ack {version} {i}", flush=True)
    upserts = {f"big{j:05d}": bytes([j % 251]) * size for j in range(big)}
    upserts["k1"] = b"overwritten"
    print("big-start", flush=True)
    version = store.commit(version, upserts, {f"k{small}"})
    print(f"ack {version} big", flush=True)
    """
)


def expected_after_small_commits(n: int) -> dict[str, bytes]:
    records: dict[str, bytes] = {}
    for i in range(1, n + 1):
        records.pop(f"k{i - 3}", None)
        records[f"k{i}"] = f"v{i}".encode()
    return records


@pytest.mark.parametrize("kill_after_wal_grows_by", [0, 4 << 20, 24 << 20])
def test_sigkill_mid_commit_keeps_every_acknowledged_change(tmp_path, kill_after_wal_grows_by):
    path = tmp_path / "registry.sqlite3"
    wal = Path(f"{path}-wal")
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(SMALL_COMMITS), str(BIG_RECORDS), str(BIG_VALUE)],
        stdout=subprocess.PIPE,
        text=True,
    )
    acked: list[tuple[int, str]] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("ack"):
                _, version, what = line.split()
                acked.append((int(version), what))
            elif line.startswith("big-start"):
                break
        # Kill while the big transaction is being written (its pages spill into the WAL).
        start = wal.stat().st_size
        deadline = time.monotonic() + 30
        while wal.stat().st_size < start + kill_after_wal_grows_by and time.monotonic() < deadline:
            if child.poll() is not None:
                break
            time.sleep(0.001)
        grown = wal.stat().st_size - start
        finished_first = child.poll() is not None  # a fast disk may beat us; then it must be complete
        if not finished_first:
            os.kill(child.pid, signal.SIGKILL)
        rest = child.stdout.read()
    finally:
        child.kill()
        child.wait()
    assert child.returncode == (0 if finished_first else -signal.SIGKILL)
    acked += [(int(line.split()[1]), line.split()[2]) for line in rest.splitlines() if line.startswith("ack")]

    assert [v for v, _ in acked[:SMALL_COMMITS]] == list(range(1, SMALL_COMMITS + 1))
    reopened = RegistryStore(path)
    try:
        state = reopened.load()
    finally:
        reopened.close()
    before_big = expected_after_small_commits(SMALL_COMMITS)
    if state.version == SMALL_COMMITS:  # the interrupted commit is absent, every acked one present
        assert acked[-1] == (SMALL_COMMITS, str(SMALL_COMMITS))
        assert state.records == before_big
        assert grown >= kill_after_wal_grows_by  # it really died with the big write under way
    else:  # or it is complete, never partial
        assert state.version == SMALL_COMMITS + 1
        after_big = dict(before_big, k1=b"overwritten")
        del after_big[f"k{SMALL_COMMITS}"]
        after_big.update({f"big{j:05d}": bytes([j % 251]) * BIG_VALUE for j in range(BIG_RECORDS)})
        assert state.records == after_big
