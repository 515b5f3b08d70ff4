"""Syscalls per request of `sits serve` under load (strace -c), non-streaming and streaming.

    python bench/sits_syscalls.py                   # needs strace; ~20 s
    python bench/sits_syscalls.py --connections 1   # one client at a time (the added-p50 cell)

Starts the bench upstream and SITS (pinned like run_gateway_bench.py), drives each mode with wrk (16
connections, or `--connections`), attaches `strace -c -f` to SITS for 3 s and divides the counts by the
completions the upstream answered meanwhile. Throughput under strace means nothing; the counts per request
do: a proxy needs 2 reads + 2 writes per non-streaming request at least.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from measure import WRK_LUA, body_bytes, upstream_stats  # noqa: E402
from processes import ProcessSet  # noqa: E402
from targets import start_sits, start_upstream  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--connections", type=int, default=16, help="wrk's concurrent connections")
    args = ap.parse_args(argv)
    procs = ProcessSet(BENCH_DIR / "results" / "tmp" / "logs")
    try:
        up = start_upstream(procs, "1")
        sits = start_sits(procs, up.port, "0", BENCH_DIR / "results" / "tmp" / "sits")
        with tempfile.TemporaryDirectory() as td:
            for stream in (False, True):
                body = Path(td) / f"body-{stream}.json"
                body.write_bytes(body_bytes(stream))
                env = dict(os.environ, BENCH_BODY_FILE=str(body))
                url = f"http://127.0.0.1:{sits.port}/v1/chat/completions"
                wrk = subprocess.Popen(["taskset", "-c", "1", "wrk", "-t1", f"-c{args.connections}", "-d6s", "-s", str(WRK_LUA), url],
                                       env=env, stdout=subprocess.DEVNULL)
                try:
                    time.sleep(1.5)
                    before = upstream_stats(up.port)["completions"]
                    out = subprocess.run(["timeout", "-s", "INT", "3", "strace", "-c", "-f", "-p", str(sits.process.pid)],
                                         capture_output=True, text=True, timeout=30)
                    n = max(1, upstream_stats(up.port)["completions"] - before)
                finally:
                    wrk.wait(timeout=30)
                print(f"{'stream' if stream else 'nonstream'}: {n} requests while traced")
                for line in out.stderr.splitlines():
                    parts = line.split()
                    if len(parts) >= 5 and parts[3].isdigit() and int(parts[3]) >= n / 20:
                        print(f"  {parts[-1]:16s} {int(parts[3]):8d} calls  {int(parts[3]) / n:5.2f} per request")
    finally:
        procs.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
