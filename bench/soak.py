"""A bounded soak: does the gateway's memory, descriptor and task count stay flat under hours-like load?

`sits serve` (one process) in front of two `fast_upstream.py` endpoints of one model: the second one
answers every `--error-every`th completion with a 500 (injected upstream errors, which the gateway retries
on the first), and the first is killed and restarted once, half way through (an upstream restart). An
open-loop client sends `--rate` requests a second for `--minutes`: a mix of plain and streamed chat
completions, and a share of streams the client drops after the first bytes (disconnecting clients).
Every `--sample-s` seconds it reads the gateway's /metrics: resident memory, open descriptors (and how many
of them are idle upstream connections kept in the pool), event-loop tasks.

The gateway is sampled idle (every client connection closed) twice: after a `--warmup-min` warm-up at the
same load, and after the soak. Pass criteria (`--check`, exit 1 when one fails):
- resident memory idle after the soak at most 5% above idle after the warm-up;
- open descriptors other than pooled upstream connections, and event-loop tasks, idle after the soak back
  to (at most a few above) their values idle after the warm-up;
- no client error outside the restart window (the injected 500s are retried, so clients see none).

    python bench/soak.py --minutes 20 --rate 300 --json bench/results/soak.json --plot bench/results/soak.png

With `--rate 0`, the rate is half of the peak measured first (a 10 s closed loop at concurrency 32).
Progress: one line per sample. matplotlib draws the plot when installed (the `research` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from processes import ProcessSet, free_port, wait_for_line, wait_http_ok  # noqa: E402

MAX_IN_FLIGHT = 512  # the open loop never holds more requests than this (a stalled gateway cannot run it away)
RESTART_GRACE_S = 5.0  # client errors this close to the upstream restart are the restart's, not a defect
# Idle time before an idle sample: closed client connections are gone from the gateway, and the gateway's
# heap trim (every `server.heap_trim_s`, 30 s by default) has given back what they freed.
QUIET_S = 35.0
FD_SLACK = 16  # descriptors above the first idle sample still counted as flat, beyond the pooled upstream ones
TASK_SLACK = 4


@dataclass
class Sample:
    at_s: float
    rss_bytes: float
    open_fds: float
    tasks: float
    pooled: float  # idle upstream connections in the gateway's pool: open descriptors that are not a leak
    sent: int
    ok: int
    errors: int
    dropped_by_client: int


@dataclass
class Tally:
    sent: int = 0
    ok: int = 0
    dropped_by_client: int = 0
    errors: int = 0
    errors_in_restart_window: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)


def _body(stream: bool) -> bytes:
    payload = {"model": "soak", "messages": [{"role": "user", "content": "How are you today?"}], "max_tokens": 16}
    if stream:
        payload["stream"] = True
    return json.dumps(payload).encode()


async def _one(session: aiohttp.ClientSession, url: str, stream: bool, drop: bool, tally: Tally,
               restart_at: list[float]) -> None:
    tally.sent += 1
    try:
        async with session.post(url, data=_body(stream), headers={"content-type": "application/json"}) as response:
            if response.status != 200:
                code = (await response.read())[:4096]
                start = code.find(b'"code":')
                detail = code[start + 7:].split(b",")[0].split(b"}")[0].strip().strip(b'"').decode() if start >= 0 else ""
                raise RuntimeError(f"status {response.status} {detail}".rstrip())
            if drop:
                await response.content.readany()  # the first bytes, then the client goes away
                response.close()
                tally.dropped_by_client += 1
                return
            body = await response.read()
            if stream and b"[DONE]" not in body:
                raise RuntimeError("stream ended without [DONE]")
            tally.ok += 1
    except (aiohttp.ClientError, RuntimeError, asyncio.TimeoutError) as exc:
        tally.errors += 1
        kind = type(exc).__name__ if not isinstance(exc, RuntimeError) else str(exc)
        tally.error_kinds[kind] = tally.error_kinds.get(kind, 0) + 1
        if any(abs(time.monotonic() - t) < RESTART_GRACE_S for t in restart_at):
            tally.errors_in_restart_window += 1


async def _scrape(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url) as response:
        text = await response.text()
    wanted = ("process_resident_memory_bytes", "process_open_fds", "sits_event_loop_tasks",
              "sits_upstream_idle_connections")
    values: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in wanted:
            values[name] = float(value)
    return values


async def _peak(url: str, seconds: float = 10.0, concurrency: int = 32) -> float:
    done = 0
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def worker() -> None:
            nonlocal done
            while time.monotonic() < deadline:
                async with session.post(url, data=_body(False), headers={"content-type": "application/json"}) as r:
                    await r.read()
                done += 1
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done / seconds


async def _phase(args: argparse.Namespace, gateway_url: str, started: float, until_s: float,
                 restart: asyncio.Event | None, restart_at: list[float], samples: list[Sample], tally: Tally,
                 rng: random.Random) -> None:
    """Open-loop load from `started` until `until_s` seconds after it, on one client session of its own;
    `restart` is set half way through this phase when given."""
    url = gateway_url + "/v1/chat/completions"
    in_flight: set[asyncio.Task[None]] = set()
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)
    phase_start = time.monotonic()
    half = phase_start + (started + until_s - phase_start) / 2
    next_sample = phase_start
    launched = 0  # counted here, not in tally.sent (a task counts itself only once it runs)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=MAX_IN_FLIGHT),
                                     timeout=aiohttp.ClientTimeout(total=30)) as session:
        while (now := time.monotonic()) - started < until_s:
            if now >= next_sample:
                samples.append(await _sample(session, gateway_url, started, tally, len(in_flight)))
                next_sample += args.sample_s
            if restart is not None and not restart.is_set() and now >= half:
                restart.set()
            due = int((now - phase_start) * args.rate)
            while launched < due:
                launched += 1
                stream = rng.random() < args.stream_share
                drop = stream and rng.random() < args.drop_share
                await gate.acquire()
                task = asyncio.create_task(_one(session, url, stream, drop, tally, restart_at))
                in_flight.add(task)
                task.add_done_callback(lambda t: (in_flight.discard(t), gate.release()))
            await asyncio.sleep(0.005)
        if in_flight:
            await asyncio.wait(in_flight, timeout=30)


async def _quiet_sample(gateway_url: str, started: float, tally: Tally, quiet_s: float) -> Sample:
    """With every client connection closed and `quiet_s` waited: what the gateway holds when idle."""
    await asyncio.sleep(quiet_s)
    async with aiohttp.ClientSession() as session:
        sample = await _sample(session, gateway_url, started, tally, 0)
    print("  (idle)", flush=True)
    return sample


async def _sample(session: aiohttp.ClientSession, gateway_url: str, started: float, tally: Tally,
                  in_flight: int) -> Sample:
    metrics = await _scrape(session, gateway_url + "/metrics")
    sample = Sample(round(time.monotonic() - started, 1), metrics.get("process_resident_memory_bytes", 0.0),
                    metrics.get("process_open_fds", 0.0), metrics.get("sits_event_loop_tasks", 0.0),
                    metrics.get("sits_upstream_idle_connections", 0.0), tally.sent, tally.ok, tally.errors, tally.dropped_by_client)
    print(f"  {sample.at_s:7.1f}s  rss {sample.rss_bytes / 2**20:7.1f} MiB  fds {sample.open_fds:4.0f}"
          f" (pooled {sample.pooled:3.0f})  tasks {sample.tasks:4.0f}  sent {sample.sent}  ok {sample.ok}  errors {sample.errors}"
          f"  dropped {sample.dropped_by_client}  in flight {in_flight}", flush=True)
    return sample


async def _load(args: argparse.Namespace, gateway_url: str, restart: asyncio.Event, restart_at: list[float],
                samples: list[Sample], tally: Tally) -> tuple[Sample, Sample]:
    """Warm-up, an idle sample, the soak proper (with the restart), an idle sample: the two idle samples
    are the gateway in the same state before and after the soak."""
    rng = random.Random(args.seed)
    started = time.monotonic()
    warmup_s = args.warmup_min * 60
    await _phase(args, gateway_url, started, warmup_s, None, restart_at, samples, tally, rng)
    before = await _quiet_sample(gateway_url, started, tally, QUIET_S)
    samples.append(before)
    await _phase(args, gateway_url, started, warmup_s + QUIET_S + args.minutes * 60, restart, restart_at, samples,
                 tally, rng)
    after = await _quiet_sample(gateway_url, started, tally, QUIET_S)
    samples.append(after)
    return before, after


def _verdict(before: Sample, after: Sample, tally: Tally) -> dict[str, object]:
    growth = (after.rss_bytes - before.rss_bytes) / before.rss_bytes if before.rss_bytes else 0.0
    checks: dict[str, object] = {
        "rss_growth_idle_to_idle": round(growth, 4),
        "rss_within_5_percent": growth <= 0.05,
        "idle_fds": [before.open_fds, after.open_fds],
        "idle_pooled_upstream_connections": [before.pooled, after.pooled],
        # pooled keep-alive connections are kept on purpose (up to the pool's bound): a leak is what is left
        "fds_flat": after.open_fds - after.pooled <= before.open_fds - before.pooled + FD_SLACK,
        "idle_tasks": [before.tasks, after.tasks],
        "tasks_flat": after.tasks <= before.tasks + TASK_SLACK,
        "client_errors_outside_restart_window": tally.errors - tally.errors_in_restart_window,
        "no_errors_beyond_injected": tally.errors == tally.errors_in_restart_window,
    }
    checks["passed"] = all(checks[k] for k in ("rss_within_5_percent", "fds_flat", "tasks_flat",
                                                 "no_errors_beyond_injected"))
    return checks


def _plot(samples: list[Sample], path: Path, warmup_min: float) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (the `research` extra): no plot", file=sys.stderr)
        return False
    minutes = [s.at_s / 60 for s in samples]
    fig, (mem, fds) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    mem.plot(minutes, [s.rss_bytes / 2**20 for s in samples], label="resident memory (MiB)")
    mem.axvline(warmup_min, color="grey", linestyle=":", label="end of warm-up (idle sample)")
    mem.set_ylabel("MiB")
    mem.legend(loc="lower right")
    fds.plot(minutes, [s.open_fds for s in samples], label="open descriptors")
    fds.plot(minutes, [s.pooled for s in samples], label="of which pooled upstream connections")
    fds.plot(minutes, [s.tasks for s in samples], label="event-loop tasks")
    fds.set_xlabel("minutes")
    fds.legend(loc="upper right")
    fig.suptitle("SITS soak: memory, descriptors and tasks under load")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=0.0, help="requests per second (0: half of the measured peak)")
    ap.add_argument("--stream-share", type=float, default=0.5)
    ap.add_argument("--drop-share", type=float, default=0.1, help="share of streams the client drops early")
    ap.add_argument("--error-every", type=int, default=10, help="the second upstream fails every Nth completion")
    ap.add_argument("--warmup-min", type=float, default=2.0)
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--check", action="store_true", help="exit 1 when a pass criterion fails")
    args = ap.parse_args(argv)
    if not 0 < args.minutes <= 240 or args.rate < 0 or not 0 < args.sample_s <= 600:
        ap.error("--minutes in (0, 240], --rate >= 0, --sample-s in (0, 600]")

    with tempfile.TemporaryDirectory(prefix="sits-soak-") as tmp:
        procs = ProcessSet(Path(tmp) / "logs")
        try:
            up_a_port = free_port()
            upstream_cmd = [sys.executable, str(HERE / "fast_upstream.py")]
            up_a = procs.start("upstream-a", [*upstream_cmd, "--port", str(up_a_port)])
            up_b = procs.start("upstream-b", [*upstream_cmd, "--port", "0", "--error-every", str(args.error_every)])
            wait_for_line(up_a, "PORT", 15)
            up_b_port = int(wait_for_line(up_b, "PORT", 15).split()[1])
            config = Path(tmp) / "sits.yaml"
            config.write_text(json.dumps({
                "control": {"allow_loopback": True},
                # The open loop never holds more than MAX_IN_FLIGHT requests: a queue that size never sheds
                # them with 429 `queue_full` during a stall. Shedding is admission's job, tested on its own
                # (bench_priority_flood.py); here it would count as client errors that are not leaks.
                "admission": {"queue_size": {"P1": MAX_IN_FLIGHT}},
                "models": [{"name": "soak", "endpoints": [
                    {"url": f"http://127.0.0.1:{up_a_port}/v1", "upstream_model": "bench-model"},
                    {"url": f"http://127.0.0.1:{up_b_port}/v1", "upstream_model": "bench-model"}]}]}))
            port = free_port()
            env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "SITS_DATA_DIR": str(Path(tmp) / "data")}
            gateway = procs.start("sits", [sys.executable, "-m", "sits", "serve", "--config", str(config),
                                           "--host", "127.0.0.1", "--port", str(port)], env=env)
            gateway_url = f"http://127.0.0.1:{port}"
            wait_http_ok(gateway, gateway_url + "/readyz", 60)
            if args.rate == 0:
                peak = asyncio.run(_peak(gateway_url + "/v1/chat/completions"))
                args.rate = round(peak / 2, 1)
                print(f"peak {peak:.0f} req/s (closed loop, c=32): soaking at {args.rate} req/s", flush=True)

            samples: list[Sample] = []
            tally = Tally()
            restart_at: list[float] = []
            idle: list[Sample] = []

            async def run() -> None:
                restart = asyncio.Event()

                async def restarter() -> None:
                    nonlocal up_a
                    await restart.wait()
                    restart_at.append(time.monotonic())
                    print("  restarting upstream A", flush=True)
                    await asyncio.to_thread(procs.stop, up_a)
                    up_a = procs.start("upstream-a2", [*upstream_cmd, "--port", str(up_a_port)])
                    await asyncio.to_thread(wait_for_line, up_a, "PORT", 15)
                    restart_at.append(time.monotonic())

                watcher = asyncio.create_task(restarter())
                idle.extend(await _load(args, gateway_url, restart, restart_at, samples, tally))
                watcher.cancel()

            print(f"soak: {args.minutes} min at {args.rate} req/s, {args.stream_share:.0%} streamed, "
                  f"{args.drop_share:.0%} of streams dropped, every {args.error_every}th upstream-B answer a 500",
                  flush=True)
            asyncio.run(run())
            if not gateway.alive():
                raise RuntimeError(f"the gateway died:\n{gateway.log_tail()}")
        finally:
            procs.stop_all()
    verdict = _verdict(idle[0], idle[1], tally)
    report = {"minutes": args.minutes, "rate": args.rate, "stream_share": args.stream_share,
              "drop_share": args.drop_share, "error_every": args.error_every, "warmup_min": args.warmup_min,
              "tally": asdict(tally), "verdict": verdict, "samples": [asdict(s) for s in samples]}
    print(json.dumps({"tally": report["tally"], "verdict": verdict}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.plot:
        _plot(samples, args.plot, args.warmup_min)
    return 1 if args.check and not verdict["passed"] else 0


if __name__ == "__main__":
    sys.exit(main())
