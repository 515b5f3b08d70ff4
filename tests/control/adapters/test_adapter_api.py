"""End to end: register, validate and activate adapters through the control API of a real gateway,
then route `model: "base:adapter"` with the OpenAI SDK to vLLM endpoints (recorded-response servers)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest

from tests.backends.vllm_replay import VllmReplay
from tests.conftest import base_url, sdk
from tests.control.adapters.peft_factory import SMOLLM2_ID, write_lora

ADMIN = {"authorization": "Bearer admin-key"}
SERVED = SMOLLM2_ID


@pytest.fixture
async def engines() -> AsyncIterator[list[VllmReplay]]:
    servers = [VllmReplay(SERVED), VllmReplay(SERVED)]
    for s in servers:
        await s.start()
    yield servers
    for s in servers:
        await s.stop()


@pytest.fixture
async def gateway(start_gateway, engines):
    config = {"server": {"drain_timeout_s": 2},
              "control": {"health": {"interval_s": 60}},
              "models": [{"name": "smol", "endpoints": [{"url": f"{e.url}/v1", "upstream_model": SERVED}
                                                        for e in engines]}]}
    return await start_gateway(config, secrets={"SITS_ADMIN_KEY": "admin-key"})


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def registration(path, base_config, name="sql", **extra):
    """`base_config`: the GGUF file or a config.json directory of SmolLM2-135M."""
    return {"name": name, "path": str(path), "base_model": "smol", "dtype": "float16",
            "base": {"model_id": SMOLLM2_ID, "config": str(base_config), "max_lora_rank": 16}, **extra}


async def call(http, gateway, method, path, body=None, headers=ADMIN):
    async with http.request(method, base_url(gateway) + path, json=body, headers=headers) as response:
        return response.status, await response.json()


async def test_register_activate_route_and_deactivate(gateway, engines, http, tmp_path, smollm2, smollm2_config):
    adapter = write_lora(tmp_path / "sql", smollm2, r=8)
    status, body = await call(http, gateway, "POST", "/v1/adapters", registration(adapter, smollm2_config))
    assert status == 201 and body["valid"] is True and body["violations"] == []
    assert body["model"] == "smol:sql" and body["rank"] == 8 and body["target_modules"] == ["q_proj", "v_proj"]

    holder = gateway.routing_table().models["smol"].endpoints[1]
    status, body = await call(http, gateway, "POST", "/v1/adapters/sql/activate", {"endpoints": [holder.id]})
    assert status == 200 and body["endpoints"] == {holder.id: "loaded"} and body["loaded_on"] == [holder.id]
    assert engines[1].loras == {"sql": str(adapter)} and engines[0].loras == {}

    async with sdk(gateway) as client:
        for _ in range(6):  # every request goes where the adapter is loaded, named as vLLM serves it
            answer = await client.chat.completions.create(model="smol:sql",
                                                          messages=[{"role": "user", "content": "q"}])
            assert answer.choices[0].message.content == "served by sql"
        plain = await client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "q"}])
    assert plain.choices[0].message.content == f"served by {SERVED}"  # the base model is untouched
    chats = [c for c in engines[1].log.calls if c[1] == "/v1/chat/completions" and c[2]["model"] == "sql"]
    assert len(chats) == 6
    assert not [c for c in engines[0].log.calls if c[1] == "/v1/chat/completions" and c[2]["model"] == "sql"]

    status, body = await call(http, gateway, "POST", "/v1/adapters/sql/deactivate")
    assert status == 200 and body["endpoints"] == {holder.id: "unloaded"} and body["loaded_on"] == []
    assert engines[1].loras == {}
    status, listing = await call(http, gateway, "GET", "/v1/adapters")
    assert status == 200 and [a["name"] for a in listing["data"]] == ["sql"]
    assert (await call(http, gateway, "DELETE", "/v1/adapters/sql"))[0] == 200
    assert (await call(http, gateway, "GET", "/v1/adapters/sql"))[0] == 404


async def test_a_broken_adapter_is_registered_with_its_violations_and_never_activated(
        gateway, engines, http, tmp_path, smollm2, smollm2_config):
    broken = write_lora(tmp_path / "broken", smollm2, r=32, targets=("q_proj", "qkv_proj"), layers=2,
                        base_id="meta-llama/Llama-3.1-8B")
    status, body = await call(http, gateway, "POST", "/v1/adapters", registration(broken, smollm2_config, "broken"))
    assert status == 201 and body["valid"] is False
    found = {v["field"] for v in body["violations"]}
    assert {"r", "base_model_name_or_path", "target_modules"} <= found
    status, body = await call(http, gateway, "POST", "/v1/adapters/broken/activate")
    assert status == 422 and body["error"]["param"] == "r" and "base_model_name_or_path" in body["error"]["message"]
    assert engines[0].log.calls == [] and engines[1].log.calls == []
    with pytest.raises(openai.NotFoundError) as info:  # an invalid adapter is no routable model
        async with sdk(gateway) as client:
            await client.chat.completions.create(model="smol:broken", messages=[{"role": "user", "content": "q"}])
    assert info.value.body["param"] == "model"


async def test_activation_on_every_endpoint_and_a_conflicting_delete(gateway, engines, http, tmp_path, smollm2,
                                                                     smollm2_config):
    adapter = write_lora(tmp_path / "chat", smollm2)
    await call(http, gateway, "POST", "/v1/adapters", registration(adapter, smollm2_config, "chat"))
    engines[0].loras["chat"] = str(adapter)  # loaded there already (e.g. by an earlier gateway run)
    status, body = await call(http, gateway, "POST", "/v1/adapters/chat/activate")
    assert status == 200 and sorted(body["endpoints"].values()) == ["already loaded", "loaded"]
    assert len(body["loaded_on"]) == 2
    status, body = await call(http, gateway, "DELETE", "/v1/adapters/chat")
    assert status == 409 and body["error"]["param"] == "name"
    status, body = await call(http, gateway, "POST", "/v1/adapters", registration(adapter, smollm2_config, "chat"))
    assert status == 409  # re-registering an active adapter would change it under the engines


@pytest.mark.parametrize(("body", "param"), [
    ({"name": "a:b", "path": "/x", "base_model": "smol"}, "name"),
    ({"name": "a", "path": "/x", "base_model": "smol", "colour": "red"}, "colour"),
    ({"name": "a", "path": "/x", "base_model": "nope"}, "base_model"),
    ({"name": "a", "path": "/x", "base_model": "smol"}, "base"),
    ({"name": "a", "path": "/x", "base_model": "smol", "kind": "dora"}, "kind"),
])
async def test_bad_registrations_name_the_field(gateway, http, body, param):
    status, answer = await call(http, gateway, "POST", "/v1/adapters", body)
    assert 400 <= status < 500 and answer["error"]["param"] == param


async def test_a_missing_directory_is_a_violation_of_path(gateway, http, tmp_path, smollm2_config):
    status, body = await call(http, gateway, "POST", "/v1/adapters", registration(tmp_path / "none", smollm2_config))
    assert status == 201 and [v["field"] for v in body["violations"]] == ["path"]


async def test_the_adapter_api_needs_the_admin_key(gateway, http):
    status, body = await call(http, gateway, "GET", "/v1/adapters", headers={})
    assert status == 401 and body["error"]["type"] == "authentication_error"
    assert (await call(http, gateway, "GET", "/v1/adapters/x", headers={}))[0] == 401


async def test_unknown_adapter_routes_and_models(gateway, http):
    assert (await call(http, gateway, "POST", "/v1/adapters/ghost/activate"))[0] == 404
    assert (await call(http, gateway, "POST", "/v1/adapters/ghost/explode"))[0] == 404
    with pytest.raises(openai.NotFoundError):
        async with sdk(gateway) as client:
            await client.chat.completions.create(model="smol:ghost", messages=[{"role": "user", "content": "q"}])


async def test_engine_failures_are_reported_per_endpoint(gateway, engines, http, tmp_path, smollm2, smollm2_config):
    adapter = write_lora(tmp_path / "sql", smollm2)
    await call(http, gateway, "POST", "/v1/adapters", registration(adapter, smollm2_config))
    engines[0].fail_load_with = (400, "Loading lora sql failed: No adapter found for /elsewhere")
    status, body = await call(http, gateway, "POST", "/v1/adapters/sql/activate")
    ids = [e.id for e in gateway.routing_table().models["smol"].endpoints]
    assert status == 200 and body["loaded_on"] == [ids[1]]  # one engine took it: usable there
    assert "No adapter found" in body["endpoints"][ids[0]] and body["endpoints"][ids[1]] == "loaded"
    engines[1].fail_load_with = engines[0].fail_load_with
    await call(http, gateway, "POST", "/v1/adapters/sql/deactivate")
    status, body = await call(http, gateway, "POST", "/v1/adapters/sql/activate")
    assert status == 502 and body["error"]["message"] == (
        f"adapter 'sql' was loaded nowhere: {ids[0]}: load_lora_adapter failed (400): Loading lora sql failed: "
        f"No adapter found for /elsewhere; {ids[1]}: load_lora_adapter failed (400): Loading lora sql failed: "
        "No adapter found for /elsewhere")
    assert (await call(http, gateway, "GET", "/v1/adapters/sql"))[1]["loaded_on"] == []


async def test_registrations_survive_a_restart_and_placement_is_asked_of_the_engines(
        start_gateway, engines, http, tmp_path, smollm2, smollm2_config):
    config = {"server": {"drain_timeout_s": 2}, "control": {"health": {"interval_s": 60}},
              "models": [{"name": "smol", "endpoints": [{"url": f"{e.url}/v1", "upstream_model": SERVED}
                                                        for e in engines]}]}
    data_dir = tmp_path / "data"
    first = await start_gateway(config, secrets={"SITS_ADMIN_KEY": "admin-key"}, data_dir=data_dir)
    await first.adapters_ready()
    adapter = write_lora(tmp_path / "sql", smollm2)
    await call(http, first, "POST", "/v1/adapters", registration(adapter, smollm2_config))
    holder = first.routing_table().models["smol"].endpoints[0].id
    await call(http, first, "POST", "/v1/adapters/sql/activate", {"endpoints": [holder]})
    await first.stop()

    second = await start_gateway(config, secrets={"SITS_ADMIN_KEY": "admin-key"}, data_dir=data_dir)
    await second.adapters_ready()
    status, body = await call(http, second, "GET", "/v1/adapters/sql")
    assert status == 200 and body["valid"] and body["loaded_on"] == [holder]  # from vLLM's /v1/models
    async with sdk(second) as client:
        answer = await client.chat.completions.create(model="smol:sql", messages=[{"role": "user", "content": "q"}])
    assert answer.choices[0].message.content == "served by sql"
    # a later adapter of the same base needs no base declaration: it was saved with the first
    other = write_lora(tmp_path / "chat", smollm2)
    status, body = await call(http, second, "POST", "/v1/adapters",
                              {"name": "chat", "path": str(other), "base_model": "smol"})
    assert status == 201 and body["valid"]


async def test_an_upstream_without_the_dynamic_lora_api_is_named_once(start_gateway, upstream, http, tmp_path,
                                                                      smollm2, smollm2_config):
    config = {"control": {"health": {"interval_s": 60}},
              "models": [{"name": "smol", "endpoints": [{"url": upstream.url, "upstream_model": SERVED}]}]}
    gateway = await start_gateway(config, secrets={"SITS_ADMIN_KEY": "admin-key"})
    await call(http, gateway, "POST", "/v1/adapters", registration(write_lora(tmp_path / "sql", smollm2), smollm2_config))
    endpoint = gateway.routing_table().models["smol"].endpoints[0].id
    status, body = await call(http, gateway, "POST", "/v1/adapters/sql/activate")
    assert status == 502
    assert body["error"]["message"] == (
        f"adapter 'sql' was loaded nowhere: {endpoint}: the upstream does not offer vLLM's dynamic LoRA API "
        "(POST /v1/load_lora_adapter answered 404; vLLM serves it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)")
    assert body["error"]["code"] == "upstream_error"


async def test_vllms_own_404_is_relayed_as_its_message(gateway, engines, http, tmp_path, smollm2, smollm2_config):
    await call(http, gateway, "POST", "/v1/adapters", registration(write_lora(tmp_path / "sql", smollm2), smollm2_config))
    for engine in engines:  # vLLM answers a missing adapter directory with a 404 in its error shape
        engine.fail_load_with = (404, "No adapter found for /elsewhere")
    status, body = await call(http, gateway, "POST", "/v1/adapters/sql/activate")
    assert status == 502 and "load_lora_adapter failed (404): No adapter found for /elsewhere" in body["error"]["message"]
    assert "dynamic LoRA API" not in body["error"]["message"]
