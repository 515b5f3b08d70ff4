"""Generation tokens/s of an embedded local model: directly against its llama.cpp worker vs through SITS.

One run, same worker, same prompt, same settings; direct and gateway rounds are interleaved so
drift (thermal, other load) hits both alike. Streaming (token by token), as users consume it.

    .venv/bin/python bench/run_local_bench.py [--model smollm2-135m] [--rounds 6] [--max-tokens 128]

Writes bench/results/local-latest.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from sits.backends.local.supervisor import LocalWorkerPool
from sits.configuration.embedded_default import embedded_default_config
from sits.control.local_models import local_model_specs

RESULTS = Path(__file__).resolve().parent / "results"
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


async def generate(session: aiohttp.ClientSession, base: str, model: str, max_tokens: int) -> tuple[int, float]:
    """Stream one completion; return (completion tokens, seconds from first to last token)."""
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
            "temperature": 0, "seed": 1, "stream": True, "stream_options": {"include_usage": True}}
    first = last = None
    tokens = 0
    async with session.post(f"{base}/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.content:
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
            if any((c.get("delta") or {}).get("content") for c in event.get("choices", [])):
                now = time.perf_counter()
                first = first or now
                last = now
    assert first is not None and last is not None and tokens > 1
    return tokens, last - first


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()

    specs = [s for s in local_model_specs(embedded_default_config().models) if s.name == args.model]
    data_dir = Path(os.environ.get("SITS_DATA_DIR", Path.home() / ".local/share/sits"))
    async with LocalWorkerPool() as pool:
        urls = await pool.start(specs, data_dir)
        direct = urls[args.model]
        port = 18990
        gateway = subprocess.Popen([sys.executable, "-m", "sits", "serve", "--backend", f"{args.model}={direct}",
                                    "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            via_sits = f"http://127.0.0.1:{port}/v1"
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
                for _ in range(100):
                    try:
                        async with session.get(f"http://127.0.0.1:{port}/readyz") as r:
                            if r.status == 200:
                                break
                    except aiohttp.ClientConnectionError:
                        await asyncio.sleep(0.1)
                await generate(session, direct, args.model, 16)  # warm-up both paths
                await generate(session, via_sits, args.model, 16)
                rates: dict[str, list[float]] = {"direct": [], "sits": []}
                for i in range(args.rounds):
                    order = [("direct", direct), ("sits", via_sits)]
                    for name, base in order if i % 2 == 0 else order[::-1]:
                        tokens, seconds = await generate(session, base, args.model, args.max_tokens)
                        rates[name].append((tokens - 1) / seconds)  # tokens after the first, over their span
        finally:
            gateway.terminate()
            gateway.wait(30)

    direct_tps, sits_tps = statistics.median(rates["direct"]), statistics.median(rates["sits"])
    # Each round ran both back to back: the paired ratio cancels load that drifts between rounds.
    paired = [(d - g) / d * 100 for d, g in zip(rates["direct"], rates["sits"])]
    overhead = statistics.median(paired)
    result = {"model": args.model, "rounds": args.rounds, "max_tokens": args.max_tokens, "prompt": PROMPT,
              "direct_tokens_per_s": rates["direct"], "sits_tokens_per_s": rates["sits"],
              "direct_median": direct_tps, "sits_median": sits_tps, "paired_overhead_percent": paired,
              "overhead_percent": overhead, "load_average": os.getloadavg(),
              "python": platform.python_version(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "local-latest.json").write_text(json.dumps(result, indent=2))
    table = (f"| model | direct tok/s (median of {args.rounds}) | through SITS tok/s | overhead (median of paired rounds) |"
             f"\n|---|---:|---:|---:|\n| {args.model} | {direct_tps:.1f} | {sits_tps:.1f} | {overhead:+.2f}% |\n")
    (RESULTS / "local-latest.md").write_text(table)
    print(table)


if __name__ == "__main__":
    asyncio.run(main())
