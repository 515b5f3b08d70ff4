"""llama.cpp's slot API against real llama-server processes: a conversation's KV cache saved on one
instance and restored on another answers the next turn from cache there (cached prompt tokens in the
answer's usage), while an instance that never saw it re-prefills; errors map to SitsErrors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from sits.backends.http_client import ConnectionPool
from sits.backends.llama_cpp_slots import LlamaCppSlots
from sits.errors import SlotActionFailed, SlotActionsUnsupported
from sits.state.routing_table import Endpoint
from sits.backends.local.model_files import resolve_gguf
from tests.llama_server import HISTORY, NEXT_TURN, SMOLLM2, LlamaServer, slot_sharing_servers



@pytest.fixture(scope="module")
def smollm2_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return resolve_gguf(SMOLLM2, tmp_path_factory.getbasetemp().parent / "sits-data")


@pytest_asyncio.fixture
async def shared(smollm2_gguf: Path, tmp_path: Path) -> AsyncIterator[tuple[LlamaServer, LlamaServer, Path]]:
    """Two instances of SmolLM2 saving slots into one folder."""
    folder = tmp_path / "slots"
    started = await slot_sharing_servers(smollm2_gguf, folder)
    yield started[0], started[1], folder
    for server in started:
        await server.stop()


@pytest_asyncio.fixture
async def client() -> AsyncIterator[LlamaCppSlots]:
    pool = ConnectionPool()
    yield LlamaCppSlots(pool, pool, timeout_s=30)
    await pool.close()


def endpoint(server: LlamaServer, name: str) -> Endpoint:
    return Endpoint(id=f"smollm2/{name}", model="smollm2", upstream_model="smollm2", scheme="http",
                    host="127.0.0.1", port=server.port, base_path="/v1")


async def chat(server: LlamaServer, messages: list[dict[str, str]]) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{server.url}/chat/completions",
                             json={"messages": messages, "max_tokens": 1, "temperature": 0}) as response:
            assert response.status == 200, await response.text()
            return await response.json()


def cached(answer: dict[str, Any]) -> int:
    return int(answer["usage"]["prompt_tokens_details"]["cached_tokens"])


async def test_a_restored_slot_answers_the_next_turn_from_cache_and_a_cold_instance_does_not(
        shared, client, smollm2_gguf):
    a, b, folder = shared
    first = await chat(a, HISTORY)
    history_tokens = first["usage"]["prompt_tokens"]
    assert history_tokens > 300 and cached(first) == 0
    [slot] = await client.slots(endpoint(a, "ep-0"))
    assert slot.id == 0 and not slot.processing and slot.cached_tokens == history_tokens

    saved = await client.save(endpoint(a, "ep-0"), 0, "conversation.bin")
    assert (saved.slot, saved.filename, saved.tokens) == (0, "conversation.bin", history_tokens)
    assert (folder / "conversation.bin").stat().st_size == saved.bytes > 0
    restored = await client.restore(endpoint(b, "ep-1"), 0, "conversation.bin")
    assert (restored.tokens, restored.bytes) == (history_tokens, saved.bytes)
    # (/slots shows a slot's cached prompt only once a request used it: the restored slot still reads 0)

    warm = await chat(b, NEXT_TURN)
    assert cached(warm) == history_tokens  # the whole history came from the restored cache
    assert warm["timings"]["cache_n"] == history_tokens
    assert warm["timings"]["prompt_n"] == warm["usage"]["prompt_tokens"] - history_tokens

    cold_server = await LlamaServer(smollm2_gguf).start()
    try:
        cold = await chat(cold_server, NEXT_TURN)
    finally:
        await cold_server.stop()
    assert cold["usage"]["prompt_tokens"] == warm["usage"]["prompt_tokens"] and cached(cold) == 0

    assert await client.erase(endpoint(b, "ep-1"), 0) == warm["usage"]["prompt_tokens"]
    assert (await client.slots(endpoint(b, "ep-1")))[0].cached_tokens == 0


async def test_errors_are_sits_errors(shared, client, smollm2_gguf):
    a, _, _ = shared
    with pytest.raises(SlotActionFailed, match="Unable to restore slot"):
        await client.restore(endpoint(a, "ep-0"), 0, "never-saved.bin")
    with pytest.raises(SlotActionFailed, match="Invalid filename"):
        await client.save(endpoint(a, "ep-0"), 0, "../outside.bin")
    with pytest.raises(SlotActionFailed, match="has no slot 3"):  # the server itself would wrap 3 to slot 0
        await client.save(endpoint(a, "ep-0"), 3, "x.bin")

    plain = await LlamaServer(smollm2_gguf).start()  # no --slot-save-path
    try:
        with pytest.raises(SlotActionsUnsupported, match="--slot-save-path") as info:
            await client.save(endpoint(plain, "ep-2"), 0, "x.bin")
        assert info.value.http_status == 501 and not info.value.retryable
        assert (await client.slots(endpoint(plain, "ep-2")))[0].cached_tokens == 0  # listing still works
    finally:
        await plain.stop()
