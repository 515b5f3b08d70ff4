"""P0 latency under a P2 flood, end to end: real gateway, real HTTP, an engine-like upstream.

The upstream behaves like an inference engine that serves `--batch` requests at a time, each
taking `--service-ms`; more wait in its own FIFO queue (where priorities no longer exist). P0
requests arrive at a steady pace; `--flood` closed-loop P2 clients hammer the same model and
retry after 429/503 following Retry-After. Reports P0 p50/p99 unloaded vs flooded.

    .venv/bin/python bench/bench_priority_flood.py [--flood 64] [--p0 150]

Target (issue 7): P0 p99 under the flood within 2x of its unloaded value.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from sits.app import Gateway
from sits.configuration.gateway import parse_config
from sits.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results"


async def engine(batch: int, service_s: float) -> tuple[web.AppRunner, int]:
    slots = asyncio.Semaphore(batch)
    rng = random.Random(7)

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        async with slots:
            await asyncio.sleep(service_s * rng.uniform(0.8, 1.2))
        return web.json_response({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                               "finish_reason": "stop"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def p0_latencies(session: aiohttp.ClientSession, url: str, count: int, interval_s: float) -> list[float]:
    async def one() -> float:
        start = time.perf_counter()
        async with session.post(url, json={"model": "m", "messages": [{"role": "user", "content": "p0"}]},
                                headers={"x-sits-priority": "P0"}) as response:
            await response.read()
            assert response.status == 200, response.status
        return time.perf_counter() - start

    tasks = []
    for _ in range(count):
        tasks.append(asyncio.create_task(one()))
        await asyncio.sleep(interval_s)
    return list(await asyncio.gather(*tasks))


async def flood(session: aiohttp.ClientSession, url: str, stop: asyncio.Event, counts: dict[str, int]) -> None:
    while not stop.is_set():
        async with session.post(url, json={"model": "m", "messages": [{"role": "user", "content": "p2"}]},
                                headers={"x-sits-priority": "P2"}) as response:
            await response.read()
            counts[str(response.status)] = counts.get(str(response.status), 0) + 1
            if response.status in (429, 503):
                await asyncio.sleep(min(float(response.headers.get("retry-after", "1")), 1.0))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--service-ms", type=float, default=20.0)
    parser.add_argument("--p0", type=int, default=150)
    parser.add_argument("--interval-ms", type=float, default=25.0)
    parser.add_argument("--flood", type=int, default=64)
    args = parser.parse_args()
    runner, port = await engine(args.batch, args.service_ms / 1000)
    config = parse_config({"models": [{"name": "m", "endpoints": [{"url": f"http://127.0.0.1:{port}/v1"}]}]})
    with tempfile.TemporaryDirectory() as data:
        gateway = Gateway(Settings(host="127.0.0.1", port=0, data_dir=Path(data)), config)
        await gateway.start()
        url = f"http://127.0.0.1:{gateway.bound_port}/v1/chat/completions"
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            await p0_latencies(session, url, 40, args.interval_ms / 1000)  # warm-up: limiter learns the RTT
            unloaded = await p0_latencies(session, url, args.p0, args.interval_ms / 1000)
            stop, counts = asyncio.Event(), {}
            flooders = [asyncio.create_task(flood(session, url, stop, counts)) for _ in range(args.flood)]
            await asyncio.sleep(2.0)  # the flood settles
            flooded = await p0_latencies(session, url, args.p0, args.interval_ms / 1000)
            stop.set()
            await asyncio.gather(*flooders)
        await gateway.stop()
    await runner.cleanup()
    base, loaded = pct(unloaded, 0.99), pct(flooded, 0.99)
    result = {"engine_batch": args.batch, "service_ms": args.service_ms, "p2_clients": args.flood,
              "p0_unloaded_ms": {"p50": pct(unloaded, 0.5), "p99": base},
              "p0_flooded_ms": {"p50": pct(flooded, 0.5), "p99": loaded},
              "p99_ratio": loaded / base, "p2_statuses": counts,
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "priority-flood-latest.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print(f"P0 p99 flooded / unloaded = {loaded / base:.2f}x (target <= 2x); "
          f"p50 {statistics.median(flooded) * 1000:.1f} vs {statistics.median(unloaded) * 1000:.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
