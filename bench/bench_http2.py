"""HTTP/2 (h2c) vs HTTP/1.1 vs gRPC through one `sits serve` process, against the same fast upstream.

    python bench/bench_http2.py                 # 3 s per cell, about 60 s; writes bench/results/http2.json
    python bench/bench_http2.py --duration 1    # quicker, noisier

Targets (bench/bench_grpc.py's setup and columns, plus the HTTP/2 door):
  direct      HTTP/1.1 straight to the upstream (the floor)
  sits-http   POST /v1/chat/completions over HTTP/1.1, one keep-alive connection per worker
  sits-h2c    the same POST over HTTP/2 with prior knowledge, ONE connection multiplexing every worker
              (bench/h2_load.py, a bare h2 client)
  sits-grpc   sits.v1.ChatCompletions over one grpcio channel (one HTTP/2 connection, C core)
Cells: unary and streaming, concurrency 1 and 64, closed loop. The gateway runs on CPU 0, the upstream
and the load on CPU 1. "gateway CPU µs/req" is the column to compare: it does not depend on how fast
the Python client is.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_PYTHON = BENCH_DIR.parent / ".venv" / "bin" / "python"

try:
    import h2  # noqa: F401
    import uvloop
except ImportError:  # re-run under the project venv, which has them
    if PROJECT_PYTHON.exists() and Path(sys.executable) != PROJECT_PYTHON and not os.environ.get("SITS_BENCH_REEXEC"):
        os.environ["SITS_BENCH_REEXEC"] = "1"
        os.execv(str(PROJECT_PYTHON), [str(PROJECT_PYTHON), *sys.argv])
    raise

sys.path.insert(0, str(BENCH_DIR))

from bench_grpc import (  # noqa: E402
    GATEWAY_CPU, LOAD_CPU, MAX_REQUESTS, add_overhead, context_switches, summarize, write_report,
)
from grpc_load import LoadResult, grpc_request, run_grpc, run_http  # noqa: E402
from h2_load import run_h2  # noqa: E402
from measure import body_bytes, group_cpu_seconds  # noqa: E402
from processes import ProcessSet, free_port, wait_for_line, wait_http_ok  # noqa: E402
from targets import MODEL, sits_command, start_upstream  # noqa: E402

RESULTS = BENCH_DIR / "results" / "http2.json"
DOCS = BENCH_DIR.parent / "docs" / "grpc.md"
BEGIN, END = "<!-- bench-http2:begin -->", "<!-- bench-http2:end -->"
LOG_DIR = BENCH_DIR / "results" / "tmp" / "logs-http2"
TARGETS = ["direct", "sits-http", "sits-h2c", "sits-grpc"]


def start_sits(procs: ProcessSet, upstream_port: int, cpus: str | None) -> tuple[dict[str, int], object]:
    cmd = sits_command()
    if cmd is None:
        raise RuntimeError("sits is not runnable (.venv/bin/sits --version failed)")
    ports = {"http": free_port(), "h2c": free_port(), "grpc": free_port()}
    child = procs.start("sits", cmd + ["serve", "--backend", f"{MODEL}=http://127.0.0.1:{upstream_port}/v1",
                                       "--host", "127.0.0.1", "--port", str(ports["http"]),
                                       "--http2-port", str(ports["h2c"]), "--grpc-port", str(ports["grpc"]),
                                       "--log-level", "warning"], cpus=cpus)
    wait_http_ok(child, f"http://127.0.0.1:{ports['http']}/readyz", timeout_s=60)
    wait_for_line(child, "sits HTTP/2 (h2c) ready", timeout_s=10)
    return ports, child


async def run_cell(target: str, stream: bool, concurrency: int, duration_s: float, ports: dict[str, int]) -> LoadResult:
    if target == "sits-grpc":
        return await run_grpc(ports["grpc"], grpc_request(stream), stream, concurrency, duration_s, MAX_REQUESTS)
    if target == "sits-h2c":
        return await run_h2(ports["h2c"], body_bytes(stream), stream, concurrency, duration_s, MAX_REQUESTS)
    port = ports["upstream"] if target == "direct" else ports["http"]
    return await run_http(port, body_bytes(stream), stream, concurrency, duration_s, MAX_REQUESTS)


async def bench(args: argparse.Namespace, ports: dict[str, int], gateway_pid: int) -> list[dict]:
    cells = []
    for stream in args.modes:
        for target in args.targets:  # warm-up
            await run_cell(target, stream, 8, args.warmup, ports)
        for concurrency in args.concurrency:
            for target in args.targets:
                pgid = None if target == "direct" else gateway_pid
                cpu0, switches0 = group_cpu_seconds(pgid), context_switches(pgid)
                result = await run_cell(target, stream, concurrency, args.duration, ports)
                cpu1, switches1 = group_cpu_seconds(pgid), context_switches(pgid)
                gateway_cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
                switches = None if switches0 is None or switches1 is None else switches1 - switches0
                cell = {"target": target, "mode": "stream" if stream else "unary", "concurrency": concurrency,
                        **summarize(result, stream, gateway_cpu, switches)}
                cells.append(cell)
                print(f"  {cell['mode']:6} c={concurrency:<3} {target:9} {cell['rps']:>8} req/s  p50 {cell['p50_ms']} ms"
                      f"  CPU {cell.get('gateway_cpu_us_per_req', '-')} µs/req  errors {cell['errors']}", flush=True)
    add_overhead(cells)
    return cells


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per cell")
    ap.add_argument("--warmup", type=float, default=0.5, help="seconds of warm-up per target and mode")
    ap.add_argument("--concurrency", default="1,64")
    ap.add_argument("--targets", default=",".join(TARGETS), help="a subset of " + ",".join(TARGETS))
    ap.add_argument("--modes", default="unary,stream")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the gateway and the load to separate CPUs")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--update-docs", action="store_true", help=f"replace the HTTP/2 table in {DOCS.name}")
    args = ap.parse_args(argv)
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.targets = [t for t in args.targets.split(",") if t]
    if unknown := set(args.targets) - set(TARGETS):
        ap.error(f"unknown targets {sorted(unknown)}; choose from {TARGETS}")
    args.modes = [m == "stream" for m in args.modes.split(",") if m in ("unary", "stream")]
    pin = not args.no_pin and (os.cpu_count() or 1) >= 2
    if pin:
        os.sched_setaffinity(0, {int(LOAD_CPU)})
    procs = ProcessSet(LOG_DIR)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.time()
    try:
        upstream = start_upstream(procs, LOAD_CPU if pin else None)
        ports, gateway = start_sits(procs, upstream.port, GATEWAY_CPU if pin else None)
        ports["upstream"] = upstream.port
        print(f"upstream :{upstream.port}  sits http :{ports['http']} h2c :{ports['h2c']} grpc :{ports['grpc']}  "
              f"({args.duration:g} s per cell)", flush=True)
        cells = uvloop.run(bench(args, ports, gateway.pid))  # type: ignore[attr-defined]
    finally:
        procs.stop_all()
    return write_report("bench_http2.py", argv, started, {"h2": h2.__version__, "pinned": pin}, cells,
                        args.out, (DOCS, BEGIN, END) if args.update_docs else None)


if __name__ == "__main__":
    sys.exit(main())
