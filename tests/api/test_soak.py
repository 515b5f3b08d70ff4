"""A bounded soak: thousands of mixed requests through faults; memory stays flat."""

from __future__ import annotations

import asyncio
import gc

import openai

from sits.backends.local.host_memory import resident_bytes
from tests.conftest import sdk


async def test_memory_stays_flat_under_mixed_faulty_traffic(upstream, upstream_b, start_gateway):
    upstream.mode = upstream_b.mode = "flaky"
    config = {"server": {"drain_timeout_s": 2}, "control": {"allow_loopback": True},
              "resilience": {"static_answer": "Busy, retry soon."},
              "models": [{"name": "m", "endpoints": [{"url": upstream.url}, {"url": upstream_b.url}]}]}
    gateway = await start_gateway(config)
    client = sdk(gateway)
    sem = asyncio.Semaphore(16)
    failures: list[BaseException] = []

    async def one(i: int) -> None:
        async with sem:
            try:
                if i % 3 == 0:
                    stream = await client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": f"q{i}"}], stream=True)
                    async for _ in stream:
                        pass
                else:
                    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"q{i}"}])
            except openai.APIError as exc:  # every request must get an answer
                failures.append(exc)

    async def batch(start: int, count: int) -> None:
        await asyncio.gather(*(one(i) for i in range(start, start + count)))
        upstream.log.requests.clear(), upstream.log.headers.clear()  # the test server's own log, not the gateway's
        upstream_b.log.requests.clear(), upstream_b.log.headers.clear()

    await batch(0, 600)  # warm-up: pools, caches, interned strings
    gc.collect()
    before = resident_bytes()
    assert before is not None
    for start in range(600, 3600, 600):
        await batch(start, 600)
    gc.collect()
    grown = (resident_bytes() or 0) - before
    assert failures == []
    assert grown < 16 * 1024 * 1024, f"resident memory grew by {grown / 2**20:.1f} MiB over 3,000 requests"
