"""The dashboard, opened in headless Chromium (Debian's `chromium`) against a gateway with traffic."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
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


def tenants_config(url: str) -> dict:
    prefix = f"sits:test-panel:{os.getpid()}:{time.monotonic_ns()}:"
    return {"server": {"drain_timeout_s": 2},
            "models": [{"name": "m1", "endpoints": [{"url": url}], "price": {"input": 1000.0, "output": 1000.0}}],
            "tenants": {"enabled": True, "limits": {"redis_url": "redis://127.0.0.1:6379/0", "key_prefix": prefix,
                                                    "redis_timeout_s": 2.0}}}


async def test_the_spend_and_limits_panel_shows_teams_and_keys_to_an_admin_only(upstream, start_gateway):
    admin = {"Authorization": "Bearer admin-k"}
    gateway = await start_gateway(tenants_config(upstream.url),
                                  secrets={"SITS_ADMIN_KEY": "admin-k", "SITS_KEY_SECRET": "panel-secret"})
    url = base_url(gateway)
    async with aiohttp.ClientSession() as session:
        for i in range(12):  # more teams than the panel shows: it keeps the top ten by spend
            async with session.post(url + "/v1/teams", headers=admin, json={
                    "team_id": f"team-{i:02d}", "name": f"Team {i}",
                    "budget": {"period": "monthly", "hard_usd": 1.0, "soft_usd": 0.02}}) as r:
                assert r.status == 201
        async with session.post(url + "/v1/keys", headers=admin, json={
                "name": "search-app", "team_id": "team-11", "limits": {"rpm": 4, "concurrency": 4}}) as r:
            key = await r.json()
    client = sdk(gateway, api_key=key["key"])
    for _ in range(3):  # 9 tokens each at $1000 per million: $0.009 a request
        await client.chat.completions.create(model="m1", messages=MESSAGES)
    await asyncio.sleep(0.2)  # the last settlement reaches Redis (within limiter.SETTLE_DELAY_S)

    async with aiohttp.ClientSession() as session:
        async with session.get(url + "/v1/dashboard/state", headers=admin) as r:
            panel = (await r.json())["tenants"]
        async with session.get(url + "/v1/dashboard/state", headers={"Authorization": f"Bearer {key['key']}"}) as r:
            assert r.status == 401  # a tenant key is no admin: no dashboard, no other team's spend
    assert panel["limits"]["mode"] == "redis" and panel["team_count"] == 12 and len(panel["teams"]) == 10
    top = panel["teams"][0]
    assert top["id"] == "team-11" and top["spent_usd"] == pytest.approx(0.027) and top["hard_usd"] == 1.0
    assert [k["id"] for k in panel["keys"]] == [key["key_id"]]
    rpm = panel["keys"][0]["limits"]["rpm"]  # GCRA: 3 taken, given back at 4 a minute since
    assert rpm["limit"] == 4 and 2.5 < rpm["in_use"] <= 3.0
    assert panel["keys"][0]["limits"]["concurrency"] == {"limit": 4, "in_use": 0}

    dom = (await chromium("--dump-dom", f"{url}/dashboard#key=admin-k")).decode()
    assert 'data-loaded="1"' in dom
    assert '<section id="tenants">' in dom, "the panel stayed hidden for the admin"
    team_rows = re.findall(r'<tr data-team="([^"]+)">(.*?)</tr>', dom)
    assert len(team_rows) == 10 and team_rows[0][0] == "team-11"
    assert "$0.0270" in team_rows[0][1] and 'class="num soft">2.7%<' in team_rows[0][1]
    key_row = re.search(rf'<tr data-key="{key["key_id"]}">(.*?)</tr>', dom)
    assert key_row is not None and re.search(r">(2\.\d|3\.0) / 4<", key_row.group(1)) and ">0 / 4<" in key_row.group(1)
    assert "limits global (Redis)" in dom


async def test_the_panel_is_not_served_without_the_admin_key(upstream, start_gateway):
    """On loopback with no admin key configured the dashboard state is open, but spend stays out of it."""
    gateway = await start_gateway(tenants_config(upstream.url), secrets={"SITS_KEY_SECRET": "panel-secret"})
    async with aiohttp.ClientSession() as session:
        async with session.get(base_url(gateway) + "/v1/dashboard/state") as r:
            state = await r.json()
    assert r.status == 200 and "models" in state and "tenants" not in state
    dom = (await chromium("--dump-dom", base_url(gateway) + "/dashboard")).decode()
    assert 'data-loaded="1"' in dom and '<section id="tenants" hidden="">' in dom
