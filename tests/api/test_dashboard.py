"""The dashboard, opened in headless Chromium (Debian's `chromium`) against a gateway with traffic."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import base_url, sdk

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MESSAGES = [{"role": "user", "content": "hi"}]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def two_models(url_a: str, url_b: str) -> dict:
    return {"server": {"drain_timeout_s": 2},
            "models": [{"name": "chat-small", "endpoints": [{"url": url_a}, {"url": url_b}]},
                       {"name": "chat-large", "endpoints": [{"url": url_b}]}]}


async def chromium(*args: str, timeout_s: float = 60.0) -> bytes:
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: `apt-get install -y chromium` (README's test command does)")
    proc = await asyncio.create_subprocess_exec(
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--hide-scrollbars", "--virtual-time-budget=3000", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env={**os.environ, "HOME": "/tmp"})
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        raise
    return out


async def test_dashboard_renders_live_data(upstream, upstream_b, start_gateway, tmp_path: Path):
    gateway = await start_gateway(two_models(upstream.url, upstream_b.url))
    client = sdk(gateway)
    for _ in range(6):
        await client.chat.completions.create(model="chat-small", messages=MESSAGES)
    await client.chat.completions.create(model="chat-large", messages=MESSAGES)
    url = base_url(gateway) + "/dashboard"

    dom = (await chromium("--dump-dom", url)).decode()
    assert 'data-loaded="1"' in dom, "the page never rendered a state from the gateway"
    rows = re.findall(r'<tr data-endpoint="([^"]+)">', dom)
    assert sorted(rows) == ["chat-large/ep-0", "chat-small/ep-0", "chat-small/ep-1"]
    total = re.search(r'id="kpi-requests">(\d+)<', dom)
    assert total is not None and int(total.group(1)) == 7
    assert dom.count("<td>chat-small</td>") >= 6 - 1  # endpoint rows plus decisions rows name the model
    assert "profile=" in dom  # the live decisions show each route explanation

    shot = tmp_path / "dashboard.png"
    await chromium("--window-size=1400,1000", f"--screenshot={shot}", url)
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 20_000  # a rendered page, not a blank one


async def test_dashboard_state_needs_the_admin_key_when_one_is_set(upstream, start_gateway):
    cfg = {"models": [{"name": "m1", "endpoints": [{"url": upstream.url}]}]}
    gateway = await start_gateway(cfg, secrets={"SITS_ADMIN_KEY": "k"})
    async with aiohttp.ClientSession() as session:
        async with session.get(base_url(gateway) + "/v1/dashboard/state") as r:
            assert r.status == 401
        async with session.get(base_url(gateway) + "/v1/dashboard/state", headers={"authorization": "Bearer k"}) as r:
            state = await r.json()
            assert r.status == 200 and state["models"][0]["endpoints"][0]["id"] == "m1/ep-0"
        async with session.get(base_url(gateway) + "/dashboard") as r:
            assert r.status == 200 and "text/html" in r.headers["content-type"]
            assert "<script src=\"/dashboard/dashboard.js\">" in await r.text()
        async with session.get(base_url(gateway) + "/dashboard/../app.py") as r:
            assert r.status == 404
