"""How fast an alias switch reaches every replica: three real `sits serve` processes, over Redis
and over HTTP peers.

For each switch (alternating targets) it measures, from the moment the switch is sent to one
replica (round robin):
  - ack: the 202 answer (the switch is durable on that replica)
  - all routed: every replica reports the new target (GET /v1/aliases polled every 5 ms)
  - retired: every replica reports phase `retired` (bounded by the heartbeat period)

    .venv/bin/python bench/bench_cluster_switch.py [--switches 30] [--transports redis,http]

Prints p50 / p95 / max per transport. Loopback only; numbers depend on the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.api.cluster_harness import AdminClient, RedisServer, ReplicaProcess, free_port  # noqa: E402
from tests.upstream_server import FakeUpstream  # noqa: E402

ALIAS = "chat-default"


async def run(transport: str, switches: int, heartbeat_s: float) -> dict[str, list[float]]:
    upstreams = {v: FakeUpstream(v) for v in ("chat@v1", "chat@v2")}
    for u in upstreams.values():
        await u.start()
    redis = RedisServer() if transport == "redis" else None
    if redis is not None:
        redis.start()
    ports = [free_port() for _ in range(3)]
    replicas = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, port in enumerate(ports):
            link = {"redis_url": redis.url} if redis is not None else {
                "peers": [f"http://127.0.0.1:{p}" for p in ports if p != port]}
            config = {"models": [{"name": v, "endpoints": [{"url": u.url}]} for v, u in upstreams.items()],
                      "aliases": {ALIAS: "chat@v1"},
                      "cluster": {"replica_id": f"r{i}", "heartbeat_s": heartbeat_s, "anti_entropy_s": 2.0, **link}}
            replicas.append(ReplicaProcess(f"r{i}", port, Path(tmp), config))
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        admin = AdminClient(session)
        timings: dict[str, list[float]] = {"ack": [], "all routed": [], "retired": []}
        try:
            for r in replicas:
                r.start()
            for r in replicas:
                await r.wait_ready(session)
            await asyncio.sleep(2 * heartbeat_s + 0.5)  # everyone has heard from everyone
            for n in range(switches):
                target = ("chat@v2", "chat@v1")[n % 2]
                started = time.perf_counter()
                status, answer = await admin.switch(replicas[n % 3], ALIAS, target)
                assert status == 202, answer
                timings["ack"].append(time.perf_counter() - started)
                routed = retired = None
                deadline = started + 10
                while retired is None and time.perf_counter() < deadline:
                    views = await asyncio.gather(*(admin.alias(r, ALIAS) for r in replicas))
                    now = time.perf_counter()
                    if routed is None and all(v["target"] == target for v in views):
                        routed = now - started
                    if routed is not None and all(v["phase"] == "retired" for v in views):
                        retired = now - started
                    await asyncio.sleep(0.005)
                assert routed is not None and retired is not None, f"switch {n} did not complete"
                timings["all routed"].append(routed)
                timings["retired"].append(retired)
        except BaseException:
            for r in replicas:
                print(f"--- {r.name} log ---\n{r.log_tail()}", file=sys.stderr)
            raise
        finally:
            for r in replicas:
                r.stop()
            await session.close()
            if redis is not None:
                redis.stop()
            for u in upstreams.values():
                await u.stop()
    return timings


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"p50 {statistics.median(ordered) * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms  max {ordered[-1] * 1000:7.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--switches", type=int, default=30)
    parser.add_argument("--transports", default="redis,http")
    parser.add_argument("--heartbeat-s", type=float, default=0.2)
    args = parser.parse_args()
    for transport in args.transports.split(","):
        timings = asyncio.run(run(transport, args.switches, args.heartbeat_s))
        print(f"{transport} ({args.switches} switches, 3 replicas, heartbeat {args.heartbeat_s}s)")
        for what, values in timings.items():
            print(f"  {what:<11} {summary(values)}")


if __name__ == "__main__":
    main()
