"""Redis's CPU time per request for the limiter's batch script: what one Redis core can admit and settle
across all replicas, and what a replica waits for on each admission.

Runs the limiter (`sits.tenants.limiter`) against a real Redis with the plan `bench_instructions.py
--tenants` prices (a key's rpm, tpm and concurrency limits, a key's daily and a team's monthly budget):
`--requests` admissions in batches of `--batch` (the requests of one event-loop turn), each settled
in the next batch's call, as the gateway does. Redis's own account of its time (`INFO commandstats`,
`evalsha` and `eval`) over the run, divided by the requests, is the figure; wall time is printed
too. Redis must be otherwise idle for the figure to be this script's alone.

    python bench/bench_limit_script.py                        # this checkout's script
    python bench/bench_limit_script.py --src ../old/src       # another commit's (A/B)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _commandstats(info: dict) -> tuple[int, int]:
    calls = usec = 0
    for name in ("cmdstat_evalsha", "cmdstat_eval"):
        stat = info.get(name) or {}
        calls += int(stat.get("calls", 0))
        usec += int(stat.get("usec", 0))
    return calls, usec


async def run(redis_url: str, requests: int, batch: int) -> dict:
    import redis.asyncio as aioredis

    from sits.tenants.limit_plan import BUDGET, CONCURRENCY, RATE, TOKENS, Check, Reservation
    from sits.tenants.limiter import Limiter
    from sits.tenants.redis_wire import RedisWire

    prefix = f"sits:bench:{uuid.uuid4().hex}:"
    end_ms = int(time.time() * 1000) + 86_400_000
    checks = [Check(RATE, "key", prefix + "r", 10_000_000), Check(TOKENS, "key", prefix + "t", 10_000_000_000),
              Check(CONCURRENCY, "key", prefix + "c", 10_000),
              Check(BUDGET, "key", prefix + "bk", 1e15, period_end_ms=end_ms),
              Check(BUDGET, "team", prefix + "bt", 1e16, period_end_ms=end_ms)]
    limiter = Limiter(RedisWire(redis_url), lambda: ["bench"])
    plan = limiter.plan(checks)
    plain = aioredis.from_url(redis_url)
    try:
        await limiter.admit(plan, 100, 1_000)  # the script loaded, the counters made
        before = _commandstats(await plain.info("commandstats"))
        started = time.perf_counter()
        done = 0
        while done < requests:
            size = min(batch, requests - done)
            outcomes = await asyncio.gather(*(limiter.admit(plan, 100, 1_000) for _ in range(size)))
            for outcome in outcomes:
                if not isinstance(outcome, Reservation):
                    raise RuntimeError(f"refused: {outcome}")
                limiter.settle(outcome, -20, -200)  # rides with the next batch's call
            done += size
            if done % max(1, requests // 10) < size:
                print(f"  {done:,} / {requests:,} requests", file=sys.stderr, flush=True)
        await limiter.close()
        seconds = time.perf_counter() - started
        after = _commandstats(await plain.info("commandstats"))
    finally:
        await plain.delete(*(c.key for c in checks))
        await plain.aclose()
    calls, usec = after[0] - before[0], after[1] - before[1]
    return {"requests": requests, "batch": batch, "script_calls": calls, "redis_usec": usec,
            "redis_us_per_request": round(usec / requests, 2), "redis_us_per_call": round(usec / max(1, calls), 1),
            "wall_s": round(seconds, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, default=HERE.parent / "src", help="the SITS source tree whose script runs")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=8, help="admissions per script call")
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args(argv)
    if not 1 <= args.requests <= 1_000_000 or not 1 <= args.batch <= 1_000:
        ap.error("--requests in 1..1000000, --batch in 1..1000")
    sys.path.insert(0, str(args.src.resolve()))
    result = asyncio.run(run(args.redis_url, args.requests, args.batch))
    result["source"] = str(args.src.resolve())
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
