"""Tracing, metrics and runtime sampling against a running gateway, a real OTLP/HTTP receiver and
the official SDK as the client."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import base_url, sdk
from tests.otlp_receiver import OtlpReceiver

MESSAGES = [{"role": "user", "content": "hi"}]
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
SERVER, CLIENT = 2, 3
ADMIN = {"SITS_ADMIN_KEY": "admin-secret"}


@pytest.fixture
async def receiver() -> AsyncIterator[OtlpReceiver]:
    r = OtlpReceiver()
    await r.start()
    yield r
    await r.stop()


def config(primary: str, backup: str | None = None, **telemetry: Any) -> dict[str, Any]:
    models: list[dict[str, Any]] = [{"name": "m1", "endpoints": [{"url": primary}],
                                     "fallbacks": ["backup"] if backup else []}]
    if backup:
        models.append({"name": "backup", "endpoints": [{"url": backup}]})
    return {"server": {"drain_timeout_s": 2}, "models": models, "telemetry": telemetry,
            "control": {"admin_key_env": "SITS_ADMIN_KEY"}}


async def scrape(gateway) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with aiohttp.ClientSession() as session, session.get(base_url(gateway) + "/metrics") as response:
        assert response.status == 200
        assert response.headers["content-type"].startswith("text/plain")
        text = await response.text()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_spans_link_to_the_caller_and_propagate_into_the_upstream(upstream, receiver, start_gateway):
    gateway = await start_gateway(config(upstream.url, tracing={"endpoint": receiver.url}))
    headers = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "baggage": "tenant=acme"}
    client = sdk(gateway)
    await client.chat.completions.create(model="m1", messages=MESSAGES, max_tokens=7, extra_headers=headers)

    def complete(spans):
        return any(s.kind == CLIENT for s in spans) and any(s.kind == SERVER for s in spans)
    spans = await receiver.wait_for(complete)
    server = next(s for s in spans if s.kind == SERVER)
    attempt = next(s for s in spans if s.kind == CLIENT)
    schedule = next(s for s in spans if s.name == "sits.schedule")
    assert server.trace_id == attempt.trace_id == schedule.trace_id == CLIENT_TRACE
    assert server.parent_span_id == CLIENT_SPAN  # the caller's span is the gateway span's parent
    assert attempt.parent_span_id == server.span_id and schedule.parent_span_id == server.span_id
    assert server.name == "POST /v1/chat/completions"
    assert server.attributes["gen_ai.request.model"] == "m1"
    assert server.attributes["gen_ai.request.max_tokens"] == 7
    assert server.attributes["gen_ai.usage.output_tokens"] == 4
    assert server.attributes["http.response.status_code"] == 200
    assert attempt.name == "chat m1"
    assert attempt.attributes["gen_ai.operation.name"] == "chat"
    assert attempt.attributes["server.port"] == upstream.port
    assert server.service_name == "sits"
    # The upstream saw the attempt span as its parent, and the caller's baggage.
    sent = upstream.log.headers[-1]
    assert sent["traceparent"] == f"00-{CLIENT_TRACE}-{attempt.span_id}-01"
    assert sent["baggage"] == "tenant=acme"


async def test_a_fallback_shows_as_two_attempts_the_first_failed(upstream, upstream_b, receiver, start_gateway):
    upstream.mode = "error500"
    gateway = await start_gateway(config(upstream.url, upstream_b.url, tracing={"endpoint": receiver.url}))
    await sdk(gateway).chat.completions.create(model="m1", messages=MESSAGES)
    spans = await receiver.wait_for(lambda s: sum(x.kind == CLIENT for x in s) == 2 and any(x.kind == SERVER for x in s))
    attempts = sorted((s for s in spans if s.kind == CLIENT), key=lambda s: s.attributes["sits.endpoint"])
    assert [a.attributes["sits.endpoint"] for a in attempts] == ["backup/ep-0", "m1/ep-0"]
    assert [a.status_code for a in attempts] == [0, 2]  # the failed attempt is marked as an error
    server = next(s for s in spans if s.kind == SERVER)
    assert server.attributes["gen_ai.response.model"] == "backup"


async def test_sampling_changes_at_runtime_without_restart(upstream, receiver, start_gateway):
    gateway = await start_gateway(config(upstream.url, tracing={"endpoint": receiver.url}), secrets=ADMIN)
    url = base_url(gateway)
    async with aiohttp.ClientSession() as session:
        async with session.get(url + "/v1/health/otel") as r:
            state = await r.json()
        assert state["enabled"] and state["sampling_ratio"] == 1.0 and state["environment"] == "poc"
        async with session.put(url + "/v1/telemetry/sampling", json={"environment": "production"}) as r:
            assert r.status == 401  # the admin key is required
        async with session.put(url + "/v1/telemetry/sampling", json={"ratio": 2},
                               headers={"authorization": "Bearer admin-secret"}) as r:
            assert r.status in (400, 422) and (await r.json())["error"]["param"] == "ratio"
        async with session.put(url + "/v1/telemetry/sampling", json={"ratio": 0.0},
                               headers={"authorization": "Bearer admin-secret"}) as r:
            assert r.status == 200 and (await r.json())["sampling_ratio"] == 0.0
    await sdk(gateway).chat.completions.create(model="m1", messages=MESSAGES)
    await asyncio.to_thread(gateway.tracing.flush)
    assert receiver.spans == []
    # Unsampled, a trace id still reaches the upstream, with the sampled flag (bit 0) off.
    assert int(upstream.log.headers[-1]["traceparent"].rsplit("-", 1)[1], 16) & 1 == 0
    async with aiohttp.ClientSession() as session:
        async with session.put(url + "/v1/telemetry/sampling", json={"environment": "canary"},
                               headers={"authorization": "Bearer admin-secret"}) as r:
            assert (await r.json())["sampling_ratio"] == 0.1


async def test_a_stream_usage_cut_across_reads_is_counted(upstream, start_gateway):
    # The relay reads a stream's usage once, at its end, from its last chunks: here the usage event comes
    # in two reads and [DONE] in a third, and the tokens are still counted.
    upstream.usage_split = True
    gateway = await start_gateway(config(upstream.url))
    stream = await sdk(gateway).chat.completions.create(model="m1", messages=MESSAGES, stream=True,
                                                        stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == upstream.stream_chunks
    m = await scrape(gateway)
    assert value(m, "sits_tokens_total", model="m1", direction="input") == 5
    assert value(m, "sits_tokens_total", model="m1", direction="output") == upstream.stream_chunks


async def test_metrics_after_real_traffic(upstream, upstream_b, start_gateway):
    upstream.chunk_delay = 0.01  # events arrive apart, so the relay sees gaps between them
    cfg = config(upstream.url, upstream_b.url)
    # A declared window is checked per request, so m1's filters run (and are timed); `backup`, one endpoint
    # declaring nothing, is decided once (docs/scheduling.md, "A pool of one decided once") and still counted.
    cfg["models"][0]["context_window"] = 32_768
    gateway = await start_gateway(cfg)
    client = sdk(gateway)
    for _ in range(3):
        await client.chat.completions.create(model="m1", messages=MESSAGES)
    for _ in range(2):
        stream = await client.chat.completions.create(model="m1", messages=MESSAGES, stream=True,
                                                      stream_options={"include_usage": True})
        async for _chunk in stream:
            pass
    with pytest.raises(Exception):
        await client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    upstream.mode = "error500"
    await client.chat.completions.create(model="m1", messages=MESSAGES)  # answered by the fallback

    m = await scrape(gateway)
    assert value(m, "sits_requests_total", model="m1", endpoint="m1/ep-0", status="200") == 5
    assert value(m, "sits_requests_total", model="backup", endpoint="backup/ep-0", status="200") == 1
    assert value(m, "sits_requests_total", model="unknown", endpoint="none", status="404") == 1
    assert value(m, "sits_request_duration_seconds_count", model="m1", endpoint="m1/ep-0") == 5
    assert value(m, "sits_time_to_first_token_seconds_count", model="m1", endpoint="m1/ep-0") == 5
    # 2 streams of 5 content events 10 ms apart: at least 4 gaps each between relayed chunks
    assert value(m, "sits_inter_token_latency_seconds_count", model="m1", endpoint="m1/ep-0") >= 8
    assert value(m, "sits_tokens_total", model="m1", direction="input") == 5 * 5
    assert value(m, "sits_tokens_total", model="m1", direction="output") == 3 * 4 + 2 * 5
    assert value(m, "sits_routing_decisions_total", model="m1", reason="only-endpoint") == 6
    assert value(m, "sits_fallbacks_total", model="m1", kind="fallback") == 1
    assert value(m, "sits_retries_total", model="m1") == 1
    assert value(m, "sits_upstream_attempts_total", endpoint="m1/ep-0", outcome="upstream_bad_status") == 1
    assert value(m, "sits_endpoint_in_flight_requests", model="m1", endpoint="m1/ep-0") == 0
    assert value(m, "sits_circuit_state", model="m1", endpoint="m1/ep-0", state="closed") == 1
    assert value(m, "sits_endpoint_available", model="backup", endpoint="backup/ep-0") == 1
    # The scheduler's own counters: every decision counted, plugin calls timed one decision in N.
    assert value(m, "sits_scheduler_decisions_total", profile="default") >= 7
    assert value(m, "sits_scheduler_plugin_timed_calls_total", plugin="healthy-filter") >= 1
    assert value(m, "sits_scheduler_plugin_timed_seconds_total", plugin="healthy-filter") > 0


async def test_cache_hits_and_queue_wait_are_counted(upstream, start_gateway):
    cfg = config(upstream.url)
    cfg["semantic_cache"] = {"enabled": True, "threshold": 1.0}
    cfg["models"][0]["cache"] = True
    cfg["admission"] = {"enabled": True}
    gateway = await start_gateway(cfg)
    client = sdk(gateway)
    for _ in range(3):
        await client.chat.completions.create(model="m1", messages=MESSAGES, temperature=0)
    m = await scrape(gateway)
    assert value(m, "sits_cache_lookups_total", result="miss") == 1
    assert value(m, "sits_cache_lookups_total", result="exact-hit") == 2
    assert value(m, "sits_routing_decisions_total", model="m1", reason="cache-hit") == 2
    assert value(m, "sits_admission_queue_wait_seconds_count", priority="1") == 1
    assert value(m, "sits_requests_total", model="m1", endpoint="cache", status="200") == 2


async def test_metrics_can_be_turned_off(upstream, start_gateway):
    gateway = await start_gateway(config(upstream.url) | {"telemetry": {"metrics": False}})
    async with aiohttp.ClientSession() as session, session.get(base_url(gateway) + "/metrics") as response:
        assert response.status == 404
        assert "metrics are off" in (await response.json())["error"]["message"]


async def test_slow_export_degrades_to_key_spans_and_recovers(upstream, receiver, start_gateway):
    gateway = await start_gateway(config(upstream.url, tracing={"endpoint": receiver.url}))
    gateway.tracing.guard.policy = dataclasses.replace(gateway.tracing.guard.policy, latency_alpha=1.0)
    client = sdk(gateway)
    url = base_url(gateway) + "/v1/health/otel"

    async def otel() -> dict[str, Any]:
        async with aiohttp.ClientSession() as session, session.get(url) as r:
            return await r.json()

    async def until(predicate: Any, what: str) -> dict[str, Any]:
        for _ in range(100):  # bounded: 10 s
            await client.chat.completions.create(model="m1", messages=MESSAGES)
            state = await otel()
            if predicate(state):
                return state
            await asyncio.sleep(0.1)
        raise AssertionError(f"never {what}: {state}")

    receiver.delay_s = 0.3  # the collector answers in 300 ms: over the 200 ms budget
    state = await until(lambda s: s["degraded"], "degraded")
    assert state["state"] == "degraded" and "export latency" in state["degraded_reason"]
    # Spans recorded before the guard tripped still go out; after two more exports only new ones are left.
    state = await until(lambda s: s["exports"] >= state["exports"] + 2, "exported twice more")
    receiver.spans.clear()
    await until(lambda s: s["exports"] >= state["exports"] + 1 and receiver.spans, "exported while degraded")
    assert receiver.spans and not any(s.name.startswith("sits.") for s in receiver.spans)  # key spans only
    receiver.delay_s = 0.0
    state = await until(lambda s: not s["degraded"], "recovered")
    assert state["state"] == "ok" and state["dropped_spans"] == 0


async def test_access_log_keeps_prompts_out_unless_enabled(upstream, start_gateway, caplog):
    caplog.set_level(logging.INFO, logger="sits.access")
    quiet = await start_gateway(config(upstream.url, logs={"access_log": True}))
    await sdk(quiet).chat.completions.create(model="m1", messages=[{"role": "user", "content": "my secret plan"}])
    chatty = await start_gateway(config(upstream.url, logs={"access_log": True, "log_prompts": True}))
    await sdk(chatty).chat.completions.create(model="m1", messages=[{"role": "user", "content": "my secret plan"}])
    records = [r for r in caplog.records if r.name == "sits.access"]
    assert len(records) == 2
    assert records[0].model == "m1" and records[0].status == 200 and records[0].endpoint == "m1/ep-0"
    assert not hasattr(records[0], "prompt")
    assert "my secret plan" in records[1].prompt


async def test_stream_usage_reaches_the_span_with_metrics_off(upstream, receiver, start_gateway):
    gateway = await start_gateway(config(upstream.url, tracing={"endpoint": receiver.url}, metrics=False))
    stream = await sdk(gateway).chat.completions.create(model="m1", messages=MESSAGES, stream=True,
                                                      stream_options={"include_usage": True})
    async for _chunk in stream:
        pass
    spans = await receiver.wait_for(lambda s: any(x.kind == SERVER for x in s))
    server = next(s for s in spans if s.kind == SERVER)
    assert server.attributes["gen_ai.usage.output_tokens"] == upstream.stream_chunks
