"""P2 flood against a simulated engine, in process: does P0 latency hold?

The engine runs `batch` requests at once, each for about `service_ms`; the rest wait inside it,
as vLLM's waiting queue does. P0 clients send at a steady rate; a flood of closed-loop P2 clients
(retrying at once when refused, ignoring Retry-After: the adversarial case) runs alongside.

Scenarios: P0 alone; P0 + flood straight to the engine (no gate); P0 + flood through a
PriorityGate driven by a gradient (or AIMD) limiter fed with each request's latency.
Target (issue 7): under the flood, P0 p99 within 2x of its unloaded value.

    python bench/bench_admission.py [--p0 300] [--flood 400] [--limiter gradient|aimd|fixed]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from sits.errors import Overloaded
from sits.pipeline.admission import GatePolicy, PriorityGate
from sits.pipeline.priority import Priority
from sits.state.concurrency_limit import (
    AimdLimiter,
    AimdSettings,
    ConcurrencyLimiter,
    FixedLimiter,
    GradientLimiter,
    GradientSettings,
    LatencySample,
    LimitBounds,
)


class SimulatedEngine:
    def __init__(self, batch: int, service_ms: float, rng: random.Random) -> None:
        self._slots = asyncio.Semaphore(batch)
        self._service_s = service_ms / 1000.0
        self._rng = rng
        self.in_flight = 0

    async def generate(self) -> None:
        self.in_flight += 1
        try:
            async with self._slots:
                await asyncio.sleep(self._service_s * self._rng.uniform(0.8, 1.2))
        finally:
            self.in_flight -= 1


class Gateway:
    """The director's admission + observe steps, as they would wrap one backend call."""

    def __init__(self, engine: SimulatedEngine, limiter: ConcurrencyLimiter | None, p2_share: float) -> None:
        self.engine = engine
        self.limiter = limiter
        policy = GatePolicy(slot_share=(1.0, 1.0, p2_share))
        self.gate = PriorityGate(lambda: limiter.limit, policy) if limiter else None
        self.in_flight = 0

    async def request(self, priority: Priority) -> None:
        if self.gate is None:
            await self.engine.generate()
            return
        now = time.monotonic()
        async with self.gate.admit(priority, self.gate_policy_deadline(priority, now)):
            self.in_flight += 1
            sent, in_flight = time.monotonic(), self.in_flight
            try:
                await self.engine.generate()
            finally:
                self.in_flight -= 1
                done = time.monotonic()
                self.limiter.update(LatencySample(done - sent, in_flight, False, done))

    @staticmethod
    def gate_policy_deadline(priority: Priority, now: float) -> float:
        return GatePolicy().deadline(priority, now)


async def p0_stream(gw: Gateway, count: int, interval_s: float) -> list[float]:
    latencies: list[float] = []

    async def one() -> None:
        start = time.monotonic()
        await gw.request(Priority.P0)
        latencies.append(time.monotonic() - start)

    tasks = []
    for _ in range(count):
        tasks.append(asyncio.create_task(one()))
        await asyncio.sleep(interval_s)
    await asyncio.gather(*tasks)
    return latencies


async def p2_client(gw: Gateway, stop: asyncio.Event, counts: dict[str, int]) -> None:
    while not stop.is_set():
        try:
            await gw.request(Priority.P2)
            counts["ok"] += 1
        except Overloaded:
            counts["refused"] += 1
            await asyncio.sleep(0.005)


async def scenario(args: argparse.Namespace, flood: bool, gated: bool) -> tuple[list[float], dict[str, int], int]:
    rng = random.Random(7)
    engine = SimulatedEngine(args.batch, args.service_ms, rng)
    gw = Gateway(engine, make_limiter(args.limiter, args.tolerance, args.queue_allowance) if gated else None, args.p2_share)
    stop, counts = asyncio.Event(), {"ok": 0, "refused": 0}
    flooders = [asyncio.create_task(p2_client(gw, stop, counts)) for _ in range(args.flood if flood else 0)]
    await asyncio.sleep(args.warmup_s if flood else 0)
    latencies = await p0_stream(gw, args.p0, args.interval_ms / 1000.0)
    stop.set()
    await asyncio.gather(*flooders)
    return latencies, counts, (gw.limiter.limit if gw.limiter else 0)


def make_limiter(kind: str, tolerance: float = 1.2, queue_allowance: int = 2) -> ConcurrencyLimiter:
    bounds = LimitBounds(initial=16, min=4, max=256)
    if kind == "aimd":
        return AimdLimiter(AimdSettings(bounds=bounds, latency_target_s=0.05, decrease_cooldown_s=0.05))
    if kind == "fixed":
        return FixedLimiter(16)
    return GradientLimiter(GradientSettings(bounds=bounds, tolerance=tolerance, queue_allowance=queue_allowance))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000.0


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--p0", type=int, default=300, help="P0 requests")
    parser.add_argument("--interval-ms", type=float, default=20.0, help="between P0 requests")
    parser.add_argument("--flood", type=int, default=400, help="closed-loop P2 clients")
    parser.add_argument("--batch", type=int, default=8, help="engine concurrency")
    parser.add_argument("--service-ms", type=float, default=20.0)
    parser.add_argument("--warmup-s", type=float, default=2.0, help="flood before P0 starts (limiter settles)")
    parser.add_argument("--p2-share", type=float, default=0.8, help="of the limit P2 may fill")
    parser.add_argument("--limiter", choices=["gradient", "aimd", "fixed"], default="gradient")
    parser.add_argument("--tolerance", type=float, default=1.2, help="gradient: short RTT allowed over the baseline")
    parser.add_argument("--queue-allowance", type=int, default=2, help="gradient: headroom added per update")
    args = parser.parse_args()

    rows = []
    for name, flood, gated in [("P0 alone, gated", False, True), ("P2 flood, no gate", True, False),
                               (f"P2 flood, gate+{args.limiter}", True, True)]:
        latencies, counts, limit = await scenario(args, flood, gated)
        rows.append((name, statistics.median(latencies) * 1000, pct(latencies, 0.99), counts, limit))
    base_p99 = rows[0][2]
    print(f"engine batch={args.batch} service={args.service_ms}ms; {args.p0} P0 every {args.interval_ms}ms; "
          f"{args.flood} P2 clients; P2 share {args.p2_share}")
    print(f"{'scenario':28} {'P0 p50 ms':>10} {'P0 p99 ms':>10} {'p99/base':>9} {'P2 ok':>7} {'P2 429/503':>10} "
          f"{'limit':>6}")
    for name, p50, p99, counts, limit in rows:
        print(f"{name:28} {p50:10.1f} {p99:10.1f} {p99 / base_p99:9.2f} {counts['ok']:7d} {counts['refused']:10d} "
              f"{limit:6d}")


if __name__ == "__main__":
    asyncio.run(main())
