from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as redis_async

from sits.backends.local.model_files import resolve_gguf
from tests.api.surfaces.scripted_upstream import ScriptedUpstream
from tests.llama_server import SMOLLM2, LlamaServer

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedUpstream]:
    server = ScriptedUpstream()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def llama(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LlamaServer]:
    """A real llama-server with the embedded SmolLM2 model."""
    gguf = resolve_gguf(SMOLLM2, tmp_path_factory.getbasetemp().parent / "sits-data")
    server = await LlamaServer(gguf).start()
    yield server
    await server.stop()


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A response-store key prefix of the test's own in the local Redis, its keys deleted afterwards."""
    prefix = f"sits-test:resp:{os.getpid()}:{os.urandom(4).hex()}:"
    yield prefix
    client = redis_async.from_url(REDIS_URL)
    keys = [k async for k in client.scan_iter(prefix + "*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()
