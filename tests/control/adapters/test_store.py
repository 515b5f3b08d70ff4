"""Adapter registrations on disk: round trip, and a damaged file never stops a gateway."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import orjson

from sits.control.adapters.schemas import AdapterRegistration, BaseModelDeclaration
from sits.control.adapters.store import AdapterStore

REG = AdapterRegistration(name="sql", path="/a/sql", base_model="smol", dtype="float16",
                          base=BaseModelDeclaration(model_id="org/base", config="/m/config.json", max_lora_rank=32))


def test_registrations_round_trip(tmp_path):
    store = AdapterStore(tmp_path / "adapters.json")
    assert store.load_versioned().registrations == []
    store.update(upsert=REG)
    store.update(upsert=REG.model_copy(update={"name": "chat", "kind": "ia3"}))
    assert [r.name for r in store.load_versioned().registrations] == ["chat", "sql"]  # saved in name order
    assert store.load_versioned().registrations[1] == REG


def test_a_damaged_file_or_entry_is_skipped(tmp_path):
    path = tmp_path / "adapters.json"
    path.write_text("{not json")
    assert AdapterStore(path).load_versioned().registrations == []
    path.write_bytes(orjson.dumps([{"name": "a:b", "path": "/x", "base_model": "m"}, REG.model_dump()]))
    assert [r.name for r in AdapterStore(path).load_versioned().registrations] == ["sql"]


def test_a_file_from_before_versions_reads_as_version_0(tmp_path):
    path = tmp_path / "adapters.json"
    path.write_bytes(orjson.dumps([REG.model_dump()]))
    saved = AdapterStore(path).load_versioned()
    assert saved.version == 0 and saved.registrations == [REG]


def test_each_update_applies_one_change_to_what_is_saved_and_raises_the_version(tmp_path):
    one, other = AdapterStore(tmp_path / "adapters.json"), AdapterStore(tmp_path / "adapters.json")
    assert one.update(upsert=REG) == (0, 1)
    assert other.update(upsert=REG.model_copy(update={"name": "chat"})) == (1, 2)  # keeps "sql"
    assert [r.name for r in one.load_versioned().registrations] == ["chat", "sql"]
    assert one.update() == (2, 3) and one.version() == 3  # a touch: same registrations, a new version
    assert one.update(remove="sql") == (3, 4)
    assert [r.name for r in other.load_versioned().registrations] == ["chat"]


def _register_many(path: str, prefix: str) -> None:
    store = AdapterStore(Path(path))
    for i in range(15):
        store.update(upsert=REG.model_copy(update={"name": f"{prefix}{i}"}))


def test_processes_sharing_the_file_never_lose_each_others_registrations(tmp_path):
    path = tmp_path / "adapters.json"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_register_many, args=(str(path), p)) for p in ("a", "b", "c")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    saved = AdapterStore(path).load_versioned()
    assert len(saved.registrations) == 45 and saved.version == 45
