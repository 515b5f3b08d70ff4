"""Worker processes of one gateway share the registry's store: each sees the others' changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from sits.backends.address_policy import AddressPolicy
from sits.control.registration import ModelRegistration, ModelUpdate
from sits.control.registry import Registry
from sits.errors import Conflict
from sits.state.endpoint_health import HealthBoard, HealthPolicy
from sits.state.registry_store import RegistryStore


async def worker(path: Path) -> Registry:
    registry = Registry(RegistryStore(path), {}, AddressPolicy(allow_loopback=True), HealthBoard(HealthPolicy()),
                        publish=lambda table: None)
    await registry.load([], {})
    return registry


async def test_a_change_through_one_worker_reaches_the_other_on_sync(tmp_path: Path):
    store = tmp_path / "registry.sqlite3"
    a, b = await worker(store), await worker(store)
    await a.register(ModelRegistration(name="chat", endpoint="http://127.0.0.1:9/v1", tier="base"), None)
    assert await b.sync() is True
    assert b.get("chat").tier == "base" and b.version == a.version
    assert await b.sync() is False  # nothing new


async def test_a_change_starts_from_the_stored_state_not_a_stale_one(tmp_path: Path):
    store = tmp_path / "registry.sqlite3"
    a, b = await worker(store), await worker(store)
    await a.register(ModelRegistration(name="chat", endpoint="http://127.0.0.1:9/v1"), None)
    # b never synced, yet its change applies on top of a's (it catches up first), and a sees both
    await b.update("chat", ModelUpdate(tier="heavy"), None)
    await b.register(ModelRegistration(name="embed", endpoint="http://127.0.0.1:9/v1"), None)
    await a.sync()
    assert a.get("chat").tier == "heavy" and a.get("embed").source == "api" and a.version == b.version == 3


async def test_losing_a_commit_race_is_a_409_and_nothing_half_applied(tmp_path: Path, monkeypatch):
    store = tmp_path / "registry.sqlite3"
    a, b = await worker(store), await worker(store)
    monkeypatch.setattr(b._store, "stored_version", lambda: b.version)  # b's catch-up sees nothing new
    await a.register(ModelRegistration(name="chat", endpoint="http://127.0.0.1:9/v1"), None)
    with pytest.raises(Conflict, match="another gateway process committed first"):
        await b.register(ModelRegistration(name="other", endpoint="http://127.0.0.1:9/v1"), None)
    assert b.get("chat").name == "chat" and b.version == 1  # b reloaded the winner's state
    await a.sync()
    with pytest.raises(Exception, match="not registered"):
        a.get("other")
