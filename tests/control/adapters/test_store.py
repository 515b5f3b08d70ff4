"""Adapter registrations on disk: round trip, and a damaged file never stops a gateway."""

from __future__ import annotations

import orjson

from sits.control.adapters.schemas import AdapterRegistration, BaseModelDeclaration
from sits.control.adapters.store import AdapterStore

REG = AdapterRegistration(name="sql", path="/a/sql", base_model="smol", dtype="float16",
                          base=BaseModelDeclaration(model_id="org/base", config="/m/config.json", max_lora_rank=32))


def test_registrations_round_trip(tmp_path):
    store = AdapterStore(tmp_path / "adapters.json")
    assert store.load() == []
    store.save([REG, REG.model_copy(update={"name": "chat", "kind": "ia3"})])
    assert [r.name for r in store.load()] == ["sql", "chat"]
    assert store.load()[0] == REG


def test_a_damaged_file_or_entry_is_skipped(tmp_path):
    path = tmp_path / "adapters.json"
    path.write_text("{not json")
    assert AdapterStore(path).load() == []
    path.write_bytes(orjson.dumps([{"name": "a:b", "path": "/x", "base_model": "m"}, REG.model_dump()]))
    assert [r.name for r in AdapterStore(path).load()] == ["sql"]
