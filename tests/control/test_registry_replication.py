"""Runtime registrations travel between replicas' registries; a replica refuses what it must."""

from __future__ import annotations

import time

from sits.backends.address_policy import AddressPolicy
from sits.control.registration import ModelRegistration, ModelUpdate
from sits.control.registry import Registry
from sits.control.registry_records import EndpointRecord, ModelRecord
from sits.control.registry_replication import RegistryReplication
from sits.state.crdt import HybridClock
from sits.state.endpoint_health import HealthBoard, HealthPolicy
from sits.state.registry_store import RegistryStore
from sits.state.replication.replica import Replica


async def node(name: str, tmp_path, config_records: tuple[ModelRecord, ...] = (),
               secrets: dict[str, str] | None = None) -> tuple[Registry, RegistryReplication, Replica]:
    registry = Registry(RegistryStore(tmp_path / f"{name}.sqlite3"), secrets or {}, AddressPolicy(allow_loopback=True),
                        HealthBoard(HealthPolicy()), publish=lambda table: None)
    await registry.load(list(config_records), {})
    replica = Replica(name, HybridClock(name, lambda: time.time_ns() // 1_000_000), time.monotonic)
    sync = RegistryReplication(replica, registry)
    replica.watch(sync.on_document)
    return registry, sync, replica


async def test_register_update_remove_reach_the_other_replica(tmp_path):
    a, a_sync, a_replica = await node("a", tmp_path)
    b, b_sync, b_replica = await node("b", tmp_path)
    await a.register(ModelRegistration(name="chat@v4", endpoint="http://127.0.0.1:9/v1", tier="base"), None)

    async def sync_a_to_b() -> None:
        b_replica.receive(a_replica.doc, "test")
        await b_sync.settle()

    await sync_a_to_b()
    assert b.get("chat@v4").tier == "base" and b.get("chat@v4").source == "api"
    assert b_replica.doc.registry == a_replica.doc.registry

    await a.update("chat@v4", ModelUpdate(tier="heavy"), None)
    await sync_a_to_b()
    assert b.get("chat@v4").tier == "heavy"
    version = b.version
    await sync_a_to_b()  # nothing new: no commit, no version bump
    assert b.version == version

    await a.remove("chat@v4", None)
    await sync_a_to_b()
    assert [r.name for r in b.records()] == []


async def test_a_config_model_here_wins_over_a_replicated_one(tmp_path):
    a, a_sync, a_replica = await node("a", tmp_path)
    mine = ModelRecord("chat@v4", (EndpointRecord("chat@v4/ep-0", "http://127.0.0.1:10/v1"),), source="config")
    b, b_sync, b_replica = await node("b", tmp_path, (mine,))
    await a.register(ModelRegistration(name="chat@v4", endpoint="http://127.0.0.1:9/v1"), None)
    b_replica.receive(a_replica.doc, "test")
    await b_sync.settle()
    assert b.get("chat@v4") == mine


async def test_a_replicated_model_this_replica_cannot_build_is_refused_and_counted(tmp_path):
    a, a_sync, a_replica = await node("a", tmp_path, secrets={"KEY": "x"})  # the key variable is set on a, not on b
    b, b_sync, b_replica = await node("b", tmp_path)
    await a.register(ModelRegistration(name="keyed", endpoint="http://127.0.0.1:9/v1", key_env="KEY"), None)
    b_replica.receive(a_replica.doc, "test")
    await b_sync.settle()
    assert b.records() == [] and b_sync.refused == 1
