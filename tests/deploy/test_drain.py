"""The shutdown order the Deployment relies on, on a real `sits serve` process: after SIGTERM (sent by the
kubelet once preStop has slept) SITS takes no new connection, so readiness fails; the request already in
flight still completes with 200; then the process exits 0, well within terminationGracePeriodSeconds."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.manifests import gateway_deployment
from tests.upstream_server import FakeUpstream

DRAIN_TIMEOUT_S = 20.0
REPLICA = "sits-7c9d8f6b5-x2x4q"  # a pod name, as the downward API gives it


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_ready(port: int, timeout: float = 45.0) -> None:
    deadline = time.monotonic() + timeout
    while await readiness(port) != 200:
        assert time.monotonic() < deadline, f"gateway on {port} not ready"
        await asyncio.sleep(0.1)


async def readiness(port: int) -> int | str:
    """What the kubelet's readiness probe sees: a new connection, GET /readyz."""
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True),
                                         timeout=aiohttp.ClientTimeout(total=2)) as session, \
                session.get(f"http://127.0.0.1:{port}/readyz") as response:
            return response.status
    except (aiohttp.ClientConnectionError, OSError, TimeoutError):
        return "refused"


async def in_flight_gauge(session: aiohttp.ClientSession, port: int) -> float:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
        text = await response.text()
    return sum(sample.value for family in text_string_to_metric_families(text)
               if family.name == "sits_endpoint_in_flight_requests" for sample in family.samples)


async def test_sigterm_stops_new_connections_finishes_the_request_in_flight_and_exits_0(tmp_path):
    upstream = FakeUpstream()
    await upstream.start()
    upstream.mode = "hang"  # answers only when released
    config = tmp_path / "sits.yaml"
    config.write_text(yaml.safe_dump({"server": {"drain_timeout_s": DRAIN_TIMEOUT_S},
                                      "models": [{"name": "m1", "endpoints": [{"url": upstream.url}]}]}))
    port = free_port()
    log = tmp_path / "sits.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(  # noqa: ASYNC220 (starting it does not block)
            [sys.executable, "-m", "sits", "serve", "--config", str(config)], stdout=sink, stderr=subprocess.STDOUT,
            env={**os.environ, "SITS_HOST": "127.0.0.1", "SITS_PORT": str(port), "SITS_LOG_LEVEL": "warning",
                 "SITS_DATA_DIR": str(tmp_path / "data"), "SITS_ADMIN_KEY": "adm", "SITS_REPLICA_ID": REPLICA},
        )
    try:
        await wait_ready(port)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/v1/cluster",
                                   headers={"authorization": "Bearer adm"}) as response:
                assert (await response.json())["replica_id"] == REPLICA  # SITS_REPLICA_ID, as the pod sets it
            body = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
            in_flight = asyncio.create_task(session.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body))
            deadline = time.monotonic() + 20
            while not upstream.log.requests:
                assert time.monotonic() < deadline, "the request never reached the upstream"
                await asyncio.sleep(0.02)
            # The HPA's pods metric is built from this gauge (deploy/kubernetes/prometheus-adapter/rules.yaml).
            async with aiohttp.ClientSession() as scraper:
                assert await in_flight_gauge(scraper, port) == 1

            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 15
            while (seen := await readiness(port)) == 200:
                assert time.monotonic() < deadline, "still ready 15 s after SIGTERM"
                await asyncio.sleep(0.05)
            assert seen in ("refused", 503)
            assert not in_flight.done() and proc.poll() is None  # not ready while the request is still held

            upstream.release()
            response = await asyncio.wait_for(in_flight, DRAIN_TIMEOUT_S)
            assert response.status == 200
            assert (await response.json())["choices"][0]["message"]["content"] == "hello from upstream"
            response.release()
        grace = gateway_deployment("base")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        returncode = await asyncio.to_thread(proc.wait, grace)
        assert returncode == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            pytest.fail("sits serve did not exit after draining")
        await upstream.stop()
