"""KV-cache migration behind SITS with real llama-server instances: when an endpoint of a model drains
(removed through the control API) its conversation's cache is moved to the surviving instance, whose
next turn then reads the whole history from cache; the operator call does the same on demand."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from tests.conftest import base_url, sdk
from sits.backends.local.model_files import resolve_gguf
from tests.llama_server import HISTORY, NEXT_TURN, SMOLLM2, LlamaServer, slot_sharing_servers

ADMIN = {"SITS_ADMIN_KEY": "admin-secret"}
AUTH = {"Authorization": "Bearer admin-secret"}


@pytest.fixture(scope="module")
def smollm2_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return resolve_gguf(SMOLLM2, tmp_path_factory.getbasetemp().parent / "sits-data")


@pytest_asyncio.fixture
async def shared(smollm2_gguf: Path, tmp_path: Path) -> AsyncIterator[tuple[LlamaServer, LlamaServer, Path]]:
    folder = tmp_path / "slots"
    started = await slot_sharing_servers(smollm2_gguf, folder)
    yield started[0], started[1], folder
    for server in started:
        await server.stop()


def config(folder: Path, **models: Any) -> dict[str, Any]:
    return {"server": {"drain_timeout_s": 2}, "control": {"allow_loopback": True},
            "kv_migration": {"enabled": True, "min_tokens": 64, "shared_dir": str(folder)}, **models}


async def call(gateway: Any, method: str, path: str, json: Any = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http:
        async with http.request(method, base_url(gateway) + path, json=json, headers=AUTH) as response:
            return response.status, await response.json()


async def test_a_draining_endpoints_conversation_continues_from_cache_on_the_survivor(shared, start_gateway):
    a, b, folder = shared
    gateway = await start_gateway(config(folder), secrets=ADMIN)
    status, _ = await call(gateway, "POST", "/v1/models/register", {"name": "smollm2", "endpoints": [
        {"url": a.url, "upstream_model": "smollm2"}, {"url": b.url, "upstream_model": "smollm2"}]})
    assert status == 201
    client = sdk(gateway)
    first = await client.chat.completions.with_raw_response.create(model="smollm2", messages=HISTORY, max_tokens=1)
    served_by = first.headers["x-sits-endpoint"]
    history_tokens = first.parse().usage.prompt_tokens
    assert history_tokens > 300

    status, _ = await call(gateway, "DELETE", f"/v1/models/smollm2/endpoints/{served_by.split('/')[1]}")
    assert status == 200
    await gateway.kv_migrator.idle()
    status, body = await call(gateway, "GET", "/v1/kv/migrations")
    [report] = body["migrations"]
    survivor = "smollm2/ep-1" if served_by == "smollm2/ep-0" else "smollm2/ep-0"
    assert (report["source"], report["reason"], report["skipped"]) == (served_by, "drain", [])
    [moved] = report["moved"]
    assert (moved["target"], moved["tokens"]) == (survivor, history_tokens) and moved["bytes"] > 0
    assert list(folder.iterdir()) == []  # the migrated file is removed from the shared folder

    second = await client.chat.completions.with_raw_response.create(model="smollm2", messages=NEXT_TURN,
                                                                    max_tokens=1)
    assert second.headers["x-sits-endpoint"] == survivor
    assert second.parse().usage.prompt_tokens_details.cached_tokens == history_tokens


async def test_the_operator_call_copies_hot_slots_and_reports_what_it_could_not(shared, start_gateway,
                                                                                smollm2_gguf):
    a, b, folder = shared
    plain = await LlamaServer(smollm2_gguf).start()  # no --slot-save-path
    try:
        gateway = await start_gateway(config(folder, models=[{"name": "smollm2", "endpoints": [
            {"url": a.url, "upstream_model": "smollm2"}, {"url": b.url, "upstream_model": "smollm2"},
            {"url": plain.url, "upstream_model": "smollm2"}]}]), secrets=ADMIN)
        async with aiohttp.ClientSession() as http:  # a conversation that reached instance a directly
            async with http.post(f"{a.url}/chat/completions", json={"messages": HISTORY, "max_tokens": 1}) as r:
                history_tokens = (await r.json())["usage"]["prompt_tokens"]

        status, report = await call(gateway, "POST", "/v1/kv/migrate", {"from": "smollm2/ep-0",
                                                                         "to": ["smollm2/ep-1"]})
        assert status == 200 and report["skipped"] == []
        assert [(m["target"], m["tokens"]) for m in report["moved"]] == [("smollm2/ep-1", history_tokens)]
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{b.url}/chat/completions", json={"messages": NEXT_TURN, "max_tokens": 1}) as r:
                assert (await r.json())["usage"]["prompt_tokens_details"]["cached_tokens"] == history_tokens

        status, report = await call(gateway, "POST", "/v1/kv/migrate", {"from": "smollm2/ep-0",
                                                                         "to": ["smollm2/ep-2"]})
        assert status == 200 and report["moved"] == []
        [why] = report["skipped"]
        assert "--slot-save-path" in why

        status, body = await call(gateway, "POST", "/v1/kv/migrate", {"from": "smollm2/ep-9"})
        assert status == 404 and body["error"]["param"] == "from"
    finally:
        await plain.stop()


async def test_off_by_default_a_drain_moves_nothing(start_gateway):
    gateway = await start_gateway({"server": {"drain_timeout_s": 2}, "control": {"allow_loopback": True}},
                                  secrets=ADMIN)
    assert gateway.config.kv_migration.enabled is False
    status, _ = await call(gateway, "POST", "/v1/models/register", {"name": "m", "endpoints": [
        {"url": "http://127.0.0.1:9/v1"}, {"url": "http://127.0.0.1:10/v1"}]})
    assert status == 201
    status, _ = await call(gateway, "DELETE", "/v1/models/m/endpoints/ep-0")
    assert status == 200
    await gateway.kv_migrator.idle()
    assert await call(gateway, "GET", "/v1/kv/migrations") == (200, {"migrations": []})
