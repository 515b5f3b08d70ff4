"""Switching which model is resident on a shared GPU with vLLM sleep mode, through a real gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest

from tests.backends.vllm_replay import VllmReplay
from tests.conftest import base_url, sdk

ADMIN = {"authorization": "Bearer admin-key"}


@pytest.fixture
async def engines() -> AsyncIterator[dict[str, VllmReplay]]:
    servers = {"a": VllmReplay("model-a"), "b": VllmReplay("model-b"), "c": VllmReplay("model-c", sleep_mode=False)}
    for s in servers.values():
        await s.start()
    servers["b"].sleeping = True  # b shares a's GPU and starts asleep
    yield servers
    for s in servers.values():
        await s.stop()


@pytest.fixture
async def gateway(start_gateway, engines):
    config = {"server": {"drain_timeout_s": 2}, "control": {"health": {"interval_s": 60}},
              "models": [{"name": n, "endpoints": [{"url": f"{e.url}/v1", "upstream_model": e.served_model}]}
                         for n, e in engines.items()]}
    return await start_gateway(config, secrets={"SITS_ADMIN_KEY": "admin-key"})


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def endpoint_id(gateway, model: str) -> str:
    return gateway.routing_table().models[model].endpoints[0].id


async def call(http, gateway, method, path, body=None, headers=ADMIN):
    async with http.request(method, base_url(gateway) + path, json=body, headers=headers) as response:
        return response.status, await response.json()


async def ask(gateway, model: str) -> str:
    async with sdk(gateway) as client:
        answer = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    return answer.choices[0].message.content or ""


def chats(server: VllmReplay) -> int:
    return sum(1 for c in server.log.calls if c[1] == "/v1/chat/completions")


async def test_switching_the_resident_model_and_back(gateway, engines, http):
    a, b = endpoint_id(gateway, "a"), endpoint_id(gateway, "b")
    assert await ask(gateway, "a") == "served by model-a"
    status, body = await call(http, gateway, "POST", "/v1/engines/switch", {"sleep": [a], "wake": [b]})
    assert status == 200 and body["slept"] == [a] and body["woken"] == [b] and body["drained"] is True
    assert engines["a"].sleeping and engines["a"].sleep_level == 1 and not engines["b"].sleeping
    order = [c[1] for s in ("a", "b") for c in engines[s].log.calls if c[1] != "/v1/chat/completions"]
    assert order == ["/sleep?level=1", "/wake_up", "/is_sleeping"]
    assert await ask(gateway, "b") == "served by model-b"
    before = chats(engines["a"])
    with pytest.raises(openai.InternalServerError) as info:  # asleep: no capacity, and the engine is not called
        await ask(gateway, "a")
    assert info.value.status_code == 503 and chats(engines["a"]) == before
    status, _ = await call(http, gateway, "POST", "/v1/engines/switch", {"sleep": [b], "wake": [a], "level": 2})
    assert status == 200 and engines["b"].sleep_level == 2
    assert await ask(gateway, "a") == "served by model-a"


async def test_a_failed_wake_up_puts_the_outgoing_model_back(gateway, engines, http):
    a, c = endpoint_id(gateway, "a"), endpoint_id(gateway, "c")
    status, body = await call(http, gateway, "POST", "/v1/engines/switch", {"sleep": [a], "wake": [c]})
    # this server runs without sleep mode: /wake_up is a 404 there
    assert status == 502 and "rolled back" in body["error"]["message"]
    assert "wake_up failed (404)" in body["error"]["message"]
    assert not engines["a"].sleeping  # woken again
    assert await ask(gateway, "a") == "served by model-a"


async def test_every_endpoints_sleep_state(gateway, engines, http):
    status, body = await call(http, gateway, "GET", "/v1/engines/sleeping")
    states = body["endpoints"]
    assert status == 200 and states[endpoint_id(gateway, "a")] is False and states[endpoint_id(gateway, "b")] is True
    assert "404" in states[endpoint_id(gateway, "c")]  # no sleep mode on that server


@pytest.mark.parametrize(("body", "status", "param"), [
    ({"sleep": ["X"], "wake": ["X"]}, 400, "wake"),
    ({"sleep": ["nope"]}, 404, "sleep"),
    ({"level": 3}, 422, "level"),
    ({"sleep": [], "colour": 1}, 422, "colour"),
])
async def test_bad_switches_name_the_field_and_change_nothing(gateway, engines, http, body, status, param):
    answer_status, answer = await call(http, gateway, "POST", "/v1/engines/switch", body)
    assert answer_status == status and answer["error"]["param"] == param
    assert all(c[1] == "/v1/chat/completions" for s in engines.values() for c in s.log.calls)


async def test_engine_control_needs_the_admin_key(gateway, http):
    assert (await call(http, gateway, "POST", "/v1/engines/switch", {}, headers={}))[0] == 401
