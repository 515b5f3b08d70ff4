"""The adapter registry without HTTP: kinds, re-validation, variant entries."""

from __future__ import annotations

from types import MappingProxyType

import orjson

from sits.backends.http_client import ConnectionPool
from sits.backends.vllm_admin import VllmAdmin
from sits.control.adapters.registry import AdapterRegistry
from sits.control.adapters.schemas import AdapterRegistration, BaseModelDeclaration
from sits.state.routing_table import Endpoint, ModelEntry, RoutingTable
from tests.control.adapters.peft_factory import SMOLLM2_ID, write_ia3, write_lora

TABLE = RoutingTable(MappingProxyType({"smol": ModelEntry("smol", (
    Endpoint("smol/ep-0", "smol", SMOLLM2_ID, "http", "127.0.0.1", 1, "/v1"),
    Endpoint("smol/ep-1", "smol", SMOLLM2_ID, "http", "127.0.0.1", 2, "/v1"),
), fallbacks=("other",), cache=True)}), MappingProxyType({"tiny": "smol"}))


def registry() -> AdapterRegistry:
    return AdapterRegistry(lambda: TABLE, VllmAdmin(ConnectionPool()))


def reg(path, smollm2_config, name="a", **extra) -> AdapterRegistration:
    return AdapterRegistration(name=name, path=str(path), base_model="smol",
                               base=BaseModelDeclaration(model_id=SMOLLM2_ID, config=str(smollm2_config)), **extra)


async def test_the_declared_kind_must_match_the_files(tmp_path, smollm2, smollm2_config):
    adapters = registry()
    ia3 = write_ia3(tmp_path / "ia3", smollm2)
    assert [v.field for v in (await adapters.register(reg(ia3, smollm2_config))).violations] == ["kind"]
    assert (await adapters.register(reg(ia3, smollm2_config, kind="ia3"))).valid


async def test_validate_sees_files_that_changed_on_disk(tmp_path, smollm2, smollm2_config):
    adapters = registry()
    path = write_lora(tmp_path / "a", smollm2)
    assert (await adapters.register(reg(path, smollm2_config))).valid
    config = orjson.loads((path / "adapter_config.json").read_bytes())
    (path / "adapter_config.json").write_bytes(orjson.dumps({**config, "r": 64}))
    record = await adapters.validate("a")
    assert not record.valid and {v.field for v in record.violations} >= {"r"}
    assert adapters.resolve(TABLE, "smol:a") is None  # an invalid adapter stops resolving at once


async def test_the_variant_entry_serves_the_adapter_on_the_bases_endpoints(tmp_path, smollm2, smollm2_config):
    adapters = registry()
    await adapters.register(reg(write_lora(tmp_path / "a", smollm2), smollm2_config))
    variant = adapters.resolve(TABLE, "smol:a")
    assert variant is not None and variant.name == "smol"  # same admission gate and stats as the base
    assert [e.upstream_model for e in variant.endpoints] == ["a", "a"]
    assert [e.id for e in variant.endpoints] == ["smol/ep-0", "smol/ep-1"]
    assert variant.fallbacks == () and variant.cache is False  # the base's fallbacks know nothing of the adapter
    assert adapters.resolve(TABLE, "tiny:a") is not None  # the base may be named by an alias
    assert adapters.resolve(TABLE, "other:a") is None and adapters.resolve(TABLE, "smol:b") is None
    assert adapters.loaded_on(variant) == frozenset() and adapters.loaded_on(TABLE.models["smol"]) == frozenset()


async def test_deactivating_on_an_unknown_endpoint_changes_nothing(tmp_path, smollm2, smollm2_config):
    import pytest

    from sits.errors import NotFound

    calls = []

    class Recording(VllmAdmin):
        async def unload_lora_adapter(self, endpoint, name):  # type: ignore[override]
            calls.append(endpoint.id)
            return "Success"

    adapters = AdapterRegistry(lambda: TABLE, Recording(ConnectionPool()))
    await adapters.register(reg(write_lora(tmp_path / "a", smollm2), smollm2_config))
    with pytest.raises(NotFound) as info:
        await adapters.deactivate("a", ["smol/ep-0", "smol/ep-9"])
    assert info.value.param == "endpoints" and calls == []
    await adapters.deactivate("a", ["smol/ep-0"])
    assert calls == ["smol/ep-0"]


class EngineStandIn(VllmAdmin):
    """Engines that hold what `held` says (endpoint id -> adapter names) and load on request."""

    def __init__(self, held: dict[str, set[str]]) -> None:
        super().__init__(ConnectionPool())
        self.held = held

    async def served_models(self, endpoint):  # type: ignore[override]
        return frozenset(self.held.setdefault(endpoint.id, set()))

    async def load_lora_adapter(self, endpoint, name, path):  # type: ignore[override]
        self.held.setdefault(endpoint.id, set()).add(name)
        return "Success"

    async def unload_lora_adapter(self, endpoint, name):  # type: ignore[override]
        self.held.setdefault(endpoint.id, set()).discard(name)
        return "Success"


async def test_workers_sharing_a_store_follow_each_others_registrations(tmp_path, smollm2, smollm2_config):
    """`sits serve --workers 2`: what one worker registers, activates or removes, the other learns on sync."""
    from sits.control.adapters.store import AdapterStore

    held: dict[str, set[str]] = {}
    path = tmp_path / "data" / "adapters.json"
    one = AdapterRegistry(lambda: TABLE, EngineStandIn(held), AdapterStore(path))
    other = AdapterRegistry(lambda: TABLE, EngineStandIn(held), AdapterStore(path))
    await one.restore()
    await other.restore()
    assert not await other.sync()  # nothing changed yet

    await one.register(reg(write_lora(tmp_path / "a", smollm2), smollm2_config))
    assert other.resolve(TABLE, "smol:a") is None
    assert await other.sync()
    assert other.resolve(TABLE, "smol:a") is not None and other.get("a").valid

    await one.activate("a", ["smol/ep-1"])  # the engines hold it now; the other worker asks them again
    assert await other.sync()
    assert other.get("a").loaded_on == frozenset({"smol/ep-1"})

    await other.register(reg(write_lora(tmp_path / "b", smollm2), smollm2_config, name="b"))
    assert await one.sync() and sorted(r.name for r in one.records()) == ["a", "b"]
    assert not await other.sync()  # its own change: nothing to catch up with

    await one.deactivate("a")
    await one.remove("a")
    assert await other.sync()
    assert [r.name for r in other.records()] == ["b"] and other.resolve(TABLE, "smol:a") is None
    restarted = AdapterRegistry(lambda: TABLE, EngineStandIn(held), AdapterStore(path))
    assert [r.name for r in await restarted.restore()] == ["b"]  # the file holds every worker's registrations


async def test_a_damaged_shared_file_never_makes_a_worker_forget_its_adapters(tmp_path, smollm2, smollm2_config):
    from sits.control.adapters.store import AdapterStore

    path = tmp_path / "adapters.json"
    one = AdapterRegistry(lambda: TABLE, EngineStandIn({}), AdapterStore(path))
    await one.restore()
    await one.register(reg(write_lora(tmp_path / "a", smollm2), smollm2_config))
    path.write_text("{torn")
    assert not await one.sync()
    assert [r.name for r in one.records()] == ["a"]
