"""End to end under `sits serve --workers 2`: an adapter registered and activated through one worker
is listed and served by every worker (each follows the shared adapters file), fresh connections
landing on either."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import yaml

from tests.control.adapters.peft_factory import write_lora
from tests.control.adapters.test_adapter_api import SERVED, engines, registration  # noqa: F401 (fixture)
from tests.test_cli import fresh_connections, serving_two_workers

ADMIN = {"authorization": "Bearer adm"}  # serving_two_workers' admin key


async def test_an_adapter_registered_through_one_worker_is_served_by_every_worker(
        engines, tmp_path: Path, smollm2, smollm2_config):  # noqa: F811
    config = tmp_path / "sits.yaml"
    config.write_text(yaml.safe_dump({
        "control": {"health": {"interval_s": 60}},
        "models": [{"name": "smol", "endpoints": [{"url": f"{e.url}/v1", "upstream_model": SERVED} for e in engines]}],
    }))
    adapter = write_lora(tmp_path / "sql", smollm2, r=8)
    chat = {"model": "smol:sql", "messages": [{"role": "user", "content": "q"}]}
    # The admin calls share one kept-alive connection, so one worker alone takes both; the other
    # learns of them only by following the shared file. A worker is told by its request ids' prefix.
    async with serving_two_workers(["--config", str(config)], tmp_path / "data") as base, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as admin, \
            fresh_connections() as session:
        workers: set[str] = set()  # first both workers answer (and have read the empty file at startup)
        for _ in range(300):
            async with session.post(f"{base}/v1/chat/completions", json={**chat, "model": "smol"}) as response:
                assert response.status == 200
                workers.add(worker_of(response))
            if len(workers) == 2:
                break
        assert len(workers) == 2
        async with admin.post(f"{base}/v1/adapters", json=registration(adapter, smollm2_config),
                              headers=ADMIN) as response:
            assert response.status == 201, await response.text()
            admin_worker = worker_of(response)
        async with admin.post(f"{base}/v1/adapters/sql/activate", headers=ADMIN) as response:
            assert response.status == 200, await response.text()
            assert worker_of(response) == admin_worker
        await asyncio.sleep(1.5)  # the workers follow the shared file every 0.5 s
        answers: dict[str, list[tuple[int, str]]] = {}
        for _ in range(300):  # fresh connections until the other worker answered a few
            async with session.post(f"{base}/v1/chat/completions", json=chat) as response:
                body = await response.json()
                content = body["choices"][0]["message"]["content"] if response.status == 200 else str(body)
                answers.setdefault(worker_of(response), []).append((response.status, content))
            if len(answers) == 2 and min(len(a) for a in answers.values()) >= 5:
                break
        loaded_on = []
        for _ in range(8):
            async with session.get(f"{base}/v1/adapters", headers=ADMIN) as response:
                loaded_on.append([a["loaded_on"] for a in (await response.json())["data"]])
    others = [answer for worker, got in answers.items() if worker != admin_worker for answer in got]
    assert others and set(others) == {(200, "served by sql")}, answers
    assert set(answers[admin_worker]) == {(200, "served by sql")}
    assert all(len(seen) == 1 and len(seen[0]) == 2 for seen in loaded_on)  # both engines, seen by every worker


def worker_of(response: aiohttp.ClientResponse) -> str:
    """Each gateway process prefixes its request ids with its own random hex (api/dispatch.py)."""
    return response.headers["x-request-id"].rsplit("-", 1)[0]
