"""Latency of request understanding (step 1 of the director), per path and embedder.

    python bench/bench_understanding.py                 # writes bench/results/understanding-latest.{json,md}
    python bench/bench_understanding.py --embedders charngram --n 200

For each embedder: p50/p95 of `RequestUnderstander.understand()` for a short prompt that
no rule decides (the embedding path), for one that a rule decides, and the throughput of
64 concurrent requests (micro-batched). The timeout is off so the classifier's own
latency is measured, not the fallback's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from sits.understanding.factory import build_understander  # noqa: E402
from sits.understanding.settings import UnderstandingConfig  # noqa: E402

SHORT = "Can you recommend a good book for a long flight?"
SHORT_ZH = "周末去哪里玩比较好？"
RULE_HIT = "Translate this sentence into French: the meeting moved to Monday."
RESULTS = Path(__file__).resolve().parent / "results"


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def _measure(embedder: str, n: int) -> dict[str, object]:
    started = time.perf_counter()
    u = await asyncio.to_thread(build_understander, UnderstandingConfig(embedder=embedder), None, None, None)
    build_s = time.perf_counter() - started
    await u.start()
    out: dict[str, object] = {"embedder": embedder, "build_s": round(build_s, 2)}
    try:
        for name, prompt in (("short_en", SHORT), ("short_zh", SHORT_ZH), ("rule_hit", RULE_HIT)):
            await u.understand(prompt)  # warm-up
            times = []
            for _ in range(n):
                t = time.perf_counter()
                await u.understand(prompt)
                times.append((time.perf_counter() - t) * 1000)
            out[name] = {"p50_ms": round(statistics.median(times), 3), "p95_ms": round(_pct(times, 0.95), 3)}
        prompts = [f"{SHORT} ({i})" for i in range(64)]
        t = time.perf_counter()
        await asyncio.gather(*(u.understand(p) for p in prompts))
        elapsed = time.perf_counter() - t
        out["concurrent64"] = {"total_ms": round(elapsed * 1000, 1), "per_request_ms": round(elapsed * 1000 / 64, 2),
                               "requests_per_s": round(64 / elapsed, 1)}
    finally:
        await u.aclose()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--embedders", default="charngram,minilm,minilm+charngram,e5")
    ap.add_argument("--n", type=int, default=100)
    args = ap.parse_args()
    rows = [asyncio.run(_measure(e, args.n)) for e in args.embedders.split(",")]
    meta = {"python": platform.python_version(), "cpus": os.cpu_count(), "n": args.n,
            "note": "2 shared cores; torch threads = 1"}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "understanding-latest.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = ["| embedder | short en p50 / p95 ms | short zh p50 / p95 ms | rule hit p50 ms | 64 concurrent req/s |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['embedder']} | {r['short_en']['p50_ms']} / {r['short_en']['p95_ms']} | "
                     f"{r['short_zh']['p50_ms']} / {r['short_zh']['p95_ms']} | {r['rule_hit']['p50_ms']} | "
                     f"{r['concurrent64']['requests_per_s']} |")
    (RESULTS / "understanding-latest.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
