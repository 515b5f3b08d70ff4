"""vLLM's dynamic LoRA and sleep-mode endpoints, against responses recorded from vLLM."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sits.backends.http_client import ConnectionPool
from sits.backends.vllm_admin import EngineAnswer, VllmAdmin
from sits.errors import Conflict, InvalidRequest, NotFound, UpstreamConnectError, UpstreamStatusError
from sits.state.routing_table import Endpoint
from tests.backends.vllm_replay import VllmReplay


def endpoint_of(server: VllmReplay, api_key: str | None = None) -> Endpoint:
    return Endpoint("vllm-0", "smol", "HuggingFaceTB/SmolLM2-135M-Instruct", "http", "127.0.0.1", server.port, "/v1",
                    api_key=api_key)


@pytest.fixture
async def vllm() -> AsyncIterator[VllmReplay]:
    server = VllmReplay()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def admin() -> AsyncIterator[VllmAdmin]:
    pool = ConnectionPool()
    yield VllmAdmin(pool)
    await pool.close()


async def test_load_and_unload_a_lora_adapter(vllm, admin):
    endpoint = endpoint_of(vllm)
    text = await admin.load_lora_adapter(endpoint, "sql", "/adapters/sql")
    assert text == "Success: LoRA adapter 'sql' added successfully."
    assert vllm.loras == {"sql": "/adapters/sql"}
    assert vllm.log.calls[0] == ("POST", "/v1/load_lora_adapter", {"lora_name": "sql", "lora_path": "/adapters/sql"})
    assert await admin.unload_lora_adapter(endpoint, "sql") == "Success: LoRA adapter 'sql' removed successfully."
    assert vllm.loras == {}


@pytest.mark.parametrize("legacy", [False, True])
async def test_loading_twice_is_a_conflict_in_either_error_shape(admin, legacy):
    server = VllmReplay(legacy_errors=legacy)
    await server.start()
    try:
        endpoint = endpoint_of(server)
        await admin.load_lora_adapter(endpoint, "sql", "/adapters/sql")
        with pytest.raises(Conflict) as info:
            await admin.load_lora_adapter(endpoint, "sql", "/adapters/sql")
        assert info.value.param == "name"
        await admin.load_lora_adapter(endpoint, "sql", "/adapters/sql-v2", inplace=True)
        assert server.loras["sql"] == "/adapters/sql-v2"
        assert server.log.calls[-1][2] == {"lora_name": "sql", "lora_path": "/adapters/sql-v2", "load_inplace": True}
    finally:
        await server.stop()


async def test_unloading_an_unknown_adapter_is_not_found(vllm, admin):
    with pytest.raises(NotFound) as info:
        await admin.unload_lora_adapter(endpoint_of(vllm), "ghost")
    assert "The lora adapter 'ghost' cannot be found." in info.value.message


async def test_an_engine_error_carries_vllms_message(vllm, admin):
    vllm.fail_load_with = (400, "Loading lora sql failed: No adapter found for /nowhere")
    with pytest.raises(UpstreamStatusError) as info:
        await admin.load_lora_adapter(endpoint_of(vllm), "sql", "/nowhere")
    assert info.value.upstream_status == 400 and "No adapter found for /nowhere" in info.value.message


async def test_sleep_wake_up_and_is_sleeping(vllm, admin):
    endpoint = endpoint_of(vllm)
    assert await admin.is_sleeping(endpoint) is False
    await admin.sleep(endpoint, level=1)
    assert vllm.sleeping and vllm.sleep_level == 1
    assert await admin.is_sleeping(endpoint) is True
    await admin.wake_up(endpoint, tags=("weights",))
    assert await admin.is_sleeping(endpoint) is False
    assert [c[:2] for c in vllm.log.calls] == [("GET", "/is_sleeping"), ("POST", "/sleep?level=1"),
                                               ("GET", "/is_sleeping"), ("POST", "/wake_up?tags=weights"),
                                               ("GET", "/is_sleeping")]


async def test_sleep_levels_are_checked_before_any_call(vllm, admin):
    with pytest.raises(InvalidRequest) as info:
        await admin.sleep(endpoint_of(vllm), level=3)
    assert info.value.param == "level" and vllm.log.calls == []


async def test_a_server_without_dev_mode_has_no_sleep_endpoints(admin):
    server = VllmReplay(sleep_mode=False)
    await server.start()
    try:
        with pytest.raises(UpstreamStatusError) as info:
            await admin.sleep(endpoint_of(server))
        assert info.value.upstream_status == 404
    finally:
        await server.stop()


async def test_the_endpoints_api_key_is_sent(vllm, admin):
    await admin.is_sleeping(endpoint_of(vllm, api_key="sk-engine"))
    await admin.is_sleeping(endpoint_of(vllm))
    assert vllm.authorizations == ["Bearer sk-engine", None]


@pytest.mark.parametrize(("body", "message"), [
    (b'{"error": {"message": "m1", "type": "X", "param": null, "code": 400}}', "m1"),
    (b'{"object": "error", "message": "m2", "type": "X", "param": null, "code": 400}', "m2"),
    (b'{"detail": "Not Found"}', "Not Found"),
    (b"plain text", "plain text"),
])
def test_error_messages_from_every_shape(body, message):
    assert EngineAnswer(400, body).error_message() == message


async def test_an_unreachable_engine_is_a_connect_error(admin):
    endpoint = Endpoint("gone", "m", "m", "http", "127.0.0.1", 1, "/v1")
    with pytest.raises(UpstreamConnectError):
        await admin.is_sleeping(endpoint)


async def test_served_models_lists_the_base_and_loaded_adapters(vllm, admin):
    endpoint = endpoint_of(vllm)
    assert await admin.served_models(endpoint) == {"HuggingFaceTB/SmolLM2-135M-Instruct"}
    await admin.load_lora_adapter(endpoint, "sql", "/adapters/sql")
    assert await admin.served_models(endpoint) == {"HuggingFaceTB/SmolLM2-135M-Instruct", "sql"}
