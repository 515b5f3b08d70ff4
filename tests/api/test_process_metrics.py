"""/metrics shows what a leak would grow: resident memory, open file descriptors, event-loop tasks."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import base_url, one_model_config


async def _scrape(gateway) -> dict[str, float]:
    async with aiohttp.ClientSession() as session, session.get(base_url(gateway) + "/metrics") as response:
        text = await response.text()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}


async def test_metrics_show_memory_descriptors_and_tasks_that_move_with_open_connections(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    before = await _scrape(gateway)
    assert before["process_resident_memory_bytes"] > 10 * 2**20
    sessions = [aiohttp.ClientSession() for _ in range(5)]
    try:
        for session in sessions:  # five idle keep-alive connections: five more descriptors on the gateway
            async with session.get(base_url(gateway) + "/healthz") as response:
                assert response.status == 200
        during = await _scrape(gateway)
    finally:
        for session in sessions:
            await session.close()
    assert during["process_open_fds"] >= before["process_open_fds"] + 5
    assert during["sits_event_loop_tasks"] >= 1


async def test_metrics_count_the_pooled_idle_upstream_connections(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    assert (await _scrape(gateway))["sits_upstream_idle_connections"] == 0
    body = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url(gateway) + "/v1/chat/completions", json=body) as response:
            assert response.status == 200
    assert (await _scrape(gateway))["sits_upstream_idle_connections"] == 1  # kept for the next request
