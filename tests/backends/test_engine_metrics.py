"""Engine /metrics parsing, with text as vLLM and SGLang print it, and the scraper over loopback."""

from __future__ import annotations

import pytest
from aiohttp import web

from sits.backends.engine_metrics import parse_engine_metrics
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
    scraper = EngineMetricsScraper(pool, stats, lambda: endpoints, clock=lambda: 42.0, timeout_s=2.0)
    try:
        await scraper.scrape_all()
    finally:
        await pool.close()
        await runner.cleanup()
    load = stats.get("m#0").engine
    assert load is not None and (load.running, load.waiting, load.observed_at) == (7, 3, 42.0)
    assert stats.get("m#1").engine is None
