"""What a burst of client connections leaves behind in the gateway's memory, and whether a repeat adds more.

`sits serve` in front of `fast_upstream.py` endpoints of one model. Idle sample (every client connection closed, one heap
trim waited), then bursts: `--sizes` concurrent connections, each sending `--per-connection` requests (half
of them streamed) and closing, then an idle sample after each. A leak grows with every repeat of the same
burst; a high-water mark (the allocator keeping what the largest burst took) grows with the first burst of
a size and then stays. With `--restart`, a second endpoint serves beside the first, and the first is
stopped at the start of each burst and started again half way through it (an upstream restart under
load: connection errors, retries, breakers). With `--tracemalloc`, the gateway traces Python allocations and writes a snapshot at
each idle sample (SIGUSR1), and the top differences between the first and the last are printed: live
Python objects that outlived their connections show there, allocator pages that were freed do not.

    python bench/connection_bursts.py --sizes 64,256,512,512,512 [--restart] [--tracemalloc]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from processes import ProcessSet, free_port, wait_for_line, wait_http_ok  # noqa: E402

# Runs the gateway with tracemalloc on; SIGUSR1 writes a snapshot to $SITS_SNAPSHOT_DIR/<n>.snap.
_TRACED_GATEWAY = """
import os, signal, sys, tracemalloc
tracemalloc.start(8)
count = [0]
def dump(*_):
    count[0] += 1
    tracemalloc.take_snapshot().dump(os.path.join(os.environ["SITS_SNAPSHOT_DIR"], "%d.snap" % count[0]))
signal.signal(signal.SIGUSR1, dump)
from sits.cli import main
sys.argv[0] = "sits"
sys.exit(main())
"""


def _body(stream: bool) -> bytes:
    payload: dict[str, object] = {"model": "burst", "messages": [{"role": "user", "content": "How are you today?"}],
                                  "max_tokens": 16}
    if stream:
        payload["stream"] = True
    return json.dumps(payload).encode()


async def _burst(url: str, size: int, per_connection: int) -> int:
    """`size` connections at once, each its own session (its own connection), `per_connection` requests."""
    ok = 0

    async def one(n: int) -> None:
        nonlocal ok
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1),
                                         timeout=aiohttp.ClientTimeout(total=60)) as session:
            for i in range(per_connection):
                async with session.post(url, data=_body((n + i) % 2 == 0),
                                        headers={"content-type": "application/json"}) as response:
                    await response.read()
                    ok += response.status == 200

    await asyncio.gather(*(one(n) for n in range(size)))
    return ok


async def _rss(base: str) -> float:
    async with aiohttp.ClientSession() as session, session.get(base + "/metrics") as response:
        for line in (await response.text()).splitlines():
            if line.startswith("process_resident_memory_bytes "):
                return float(line.split()[1])
    return 0.0


def _diff(first: Path, last: Path, top: int) -> list[str]:
    import tracemalloc

    old, new = tracemalloc.Snapshot.load(str(first)), tracemalloc.Snapshot.load(str(last))
    stats = new.compare_to(old, "traceback")
    total = sum(s.size_diff for s in stats)
    lines = [f"traced Python memory, last idle minus first idle: {total / 2**20:+.2f} MiB"]
    for stat in stats[:top]:
        if stat.size_diff == 0:
            break
        lines.append(f"{stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks")
        lines += [f"      {frame}" for frame in stat.traceback.format()[-6:]]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="64,256,512,512,512", help="connections per burst, in order")
    ap.add_argument("--per-connection", type=int, default=4)
    ap.add_argument("--quiet-s", type=float, default=35.0, help="idle wait before each sample (one heap trim)")
    ap.add_argument("--tracemalloc", action="store_true")
    ap.add_argument("--restart", action="store_true", help="stop and restart one of two upstreams in each burst")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if not sizes or min(sizes) < 1 or max(sizes) > 2000 or not 1 <= args.per_connection <= 100:
        ap.error("--sizes in [1, 2000], --per-connection in [1, 100]")

    with tempfile.TemporaryDirectory(prefix="sits-bursts-") as tmp:
        procs = ProcessSet(Path(tmp) / "logs")
        try:
            upstream_cmd = [sys.executable, str(HERE / "fast_upstream.py")]
            ports = [free_port(), free_port()] if args.restart else [free_port()]
            upstreams = [procs.start(f"upstream-{i}", [*upstream_cmd, "--port", str(p)]) for i, p in enumerate(ports)]
            for upstream in upstreams:
                wait_for_line(upstream, "PORT", 15)
            config = Path(tmp) / "sits.yaml"
            config.write_text(json.dumps({"control": {"allow_loopback": True}, "models": [{"name": "burst", "endpoints": [
                {"url": f"http://127.0.0.1:{p}/v1", "upstream_model": "bench-model"} for p in ports]}]}))
            port = free_port()
            env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "SITS_DATA_DIR": str(Path(tmp) / "data"),
                   "SITS_SNAPSHOT_DIR": tmp}
            serve = ["serve", "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
            command = [sys.executable, "-c", _TRACED_GATEWAY, *serve] if args.tracemalloc else \
                [sys.executable, "-m", "sits", *serve]
            gateway = procs.start("sits", command, env=env)
            base = f"http://127.0.0.1:{port}"
            wait_http_ok(gateway, base + "/readyz", 240)
            url = base + "/v1/chat/completions"
            snapshots = 0

            async def idle(label: str) -> float:
                nonlocal snapshots
                await asyncio.sleep(args.quiet_s)
                rss = await _rss(base)
                if args.tracemalloc:
                    os.kill(gateway.pid, signal.SIGUSR1)
                    snapshots += 1
                    await asyncio.sleep(3)
                print(f"  idle after {label:>16}: rss {rss / 2**20:7.2f} MiB", flush=True)
                return rss

            async def run() -> list[dict[str, object]]:
                await _burst(url, 16, args.per_connection)  # imports and first-use caches out of the way
                rows: list[dict[str, object]] = [{"after": "warm-up", "rss": await idle("warm-up")}]
                for n, size in enumerate(sizes):
                    started = time.monotonic()
                    burst = asyncio.ensure_future(_burst(url, size, args.per_connection))
                    if args.restart:
                        await asyncio.to_thread(procs.stop, upstreams[0])
                        await asyncio.sleep(0.5)
                        upstreams[0] = procs.start(f"upstream-0-{n}", [*upstream_cmd, "--port", str(ports[0])])
                        await asyncio.to_thread(wait_for_line, upstreams[0], "PORT", 15)
                    ok = await burst
                    label = f"{size} connections"
                    print(f"  burst of {size} connections: {ok}/{size * args.per_connection} ok in "
                          f"{time.monotonic() - started:.1f} s", flush=True)
                    rows.append({"after": label, "ok": ok, "rss": await idle(label)})
                return rows

            rows = asyncio.run(run())
            if not gateway.alive():
                raise RuntimeError(f"the gateway died:\n{gateway.log_tail()}")
        finally:
            procs.stop_all()
        report = {"sizes": sizes, "per_connection": args.per_connection, "restart": args.restart, "rows": rows}
        if args.tracemalloc and snapshots > 1:
            report["tracemalloc"] = _diff(Path(tmp) / "1.snap", Path(tmp) / f"{snapshots}.snap", args.top)
            print("\n".join(report["tracemalloc"]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
