"""gRPC vs HTTP/JSON through SITS, against the same fast upstream.

    python bench/bench_grpc.py              # 5 s per cell, about 90 s; writes bench/results/grpc.json
    python bench/bench_grpc.py --duration 2 # quicker, noisier

Targets, one upstream (bench/fast_upstream.py):
  direct      HTTP/1.1 straight to the upstream (the floor)
  sits-http   POST /v1/chat/completions through `sits serve`
  sits-grpc   sits.v1.ChatCompletions/Create and /CreateStream through the same `sits serve` process
  grpc-floor  the same RPCs answered from memory by a bare grpc.aio server (bench/grpc_floor_server.py):
              what grpc-python itself costs per call, with no SITS and no upstream behind it
Cells: unary and streaming, concurrency 1 and 64, closed loop (bench/grpc_load.py). The gateway (and
the floor server) run on CPU 0 (taskset), the upstream and this load generator on CPU 1. Per cell: requests/s, latency
percentiles (full answer; time to the first event for streams), the latency SITS adds over direct at
the same concurrency, the gateway's CPU time per request (independent of how fast the client is) and
its threads' context switches per request.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_PYTHON = BENCH_DIR.parent / ".venv" / "bin" / "python"

try:
    import grpc  # noqa: F401
    import uvloop
except ImportError:  # re-run under the project venv, which has them
    if PROJECT_PYTHON.exists() and Path(sys.executable) != PROJECT_PYTHON and not os.environ.get("SITS_BENCH_REEXEC"):
        os.environ["SITS_BENCH_REEXEC"] = "1"
        os.execv(str(PROJECT_PYTHON), [str(PROJECT_PYTHON), *sys.argv])
    raise

sys.path.insert(0, str(BENCH_DIR))

from grpc_load import LoadResult, grpc_request, run_grpc, run_http  # noqa: E402
from measure import body_bytes, group_cpu_seconds, percentile  # noqa: E402
from processes import ProcessSet, free_port, wait_for_line, wait_http_ok  # noqa: E402
from targets import MODEL, start_upstream, sits_command  # noqa: E402

RESULTS = BENCH_DIR / "results" / "grpc.json"
DOCS = BENCH_DIR.parent / "docs" / "grpc.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
LOG_DIR = BENCH_DIR / "results" / "tmp" / "logs-grpc"
GATEWAY_CPU, LOAD_CPU = "0", "1"
MAX_REQUESTS = 1_000_000


def start_sits_with_grpc(procs: ProcessSet, upstream_port: int, cpus: str | None) -> tuple[int, int, object]:
    cmd = sits_command()
    if cmd is None:
        raise RuntimeError("sits is not runnable (.venv/bin/sits --version failed)")
    http_port, grpc_port = free_port(), free_port()
    child = procs.start("sits", cmd + ["serve", "--backend", f"{MODEL}=http://127.0.0.1:{upstream_port}/v1",
                                       "--host", "127.0.0.1", "--port", str(http_port), "--grpc-port", str(grpc_port),
                                       "--log-level", "warning"], cpus=cpus)
    wait_http_ok(child, f"http://127.0.0.1:{http_port}/readyz", timeout_s=60)
    wait_for_line(child, "sits gRPC ready", timeout_s=10)
    return http_port, grpc_port, child


def context_switches(pid: int | None) -> int | None:
    """Voluntary + involuntary context switches of every thread of `pid` so far."""
    if pid is None:
        return None
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                total += sum(int(line.split(":")[1]) for line in f if "ctxt_switches" in line)
        except OSError:
            continue  # a thread that ended meanwhile
    return total


def start_grpc_floor(procs: ProcessSet, cpus: str | None) -> tuple[int, object]:
    child = procs.start("grpc-floor", [str(PROJECT_PYTHON), str(BENCH_DIR / "grpc_floor_server.py")], cpus=cpus)
    return int(wait_for_line(child, "PORT ", timeout_s=30).split()[1]), child


async def run_cell(target: str, stream: bool, concurrency: int, duration_s: float, ports: dict[str, int]) -> LoadResult:
    if target in ("sits-grpc", "grpc-floor"):
        port = ports["grpc" if target == "sits-grpc" else "grpc-floor"]
        return await run_grpc(port, grpc_request(stream), stream, concurrency, duration_s, MAX_REQUESTS)
    port = ports["upstream"] if target == "direct" else ports["http"]
    return await run_http(port, body_bytes(stream), stream, concurrency, duration_s, MAX_REQUESTS)


def summarize(result: LoadResult, stream: bool, gateway_cpu_s: float | None, switches: int | None) -> dict:
    def ms(values: list[float], q: float) -> float | None:
        v = percentile(values, q)
        return None if v is None else round(v / 1000, 3)

    cell = {
        "ok": result.ok, "errors": result.errors, "error_samples": result.error_samples,
        "rps": round(result.ok / result.duration_s, 1) if result.duration_s else 0.0,
        "p50_ms": ms(result.total_us, 50), "p99_ms": ms(result.total_us, 99),
    }
    if stream:
        cell["ttft_p50_ms"], cell["ttft_p99_ms"] = ms(result.first_us, 50), ms(result.first_us, 99)
    if gateway_cpu_s is not None and result.ok:
        cell["gateway_cpu_us_per_req"] = round(gateway_cpu_s / result.ok * 1e6, 1)
        cell["gateway_cpu_pct"] = round(gateway_cpu_s / result.duration_s * 100, 1)
    if switches is not None and result.ok:
        cell["context_switches_per_req"] = round(switches / result.ok, 2)
    return cell


async def bench(args: argparse.Namespace, ports: dict[str, int], pgids: dict[str, int]) -> list[dict]:
    cells = []
    targets = ["direct", "sits-http", "sits-grpc", "grpc-floor"]
    for stream in (False, True):
        for target in targets:  # warm-up: connections, JIT-free but caches and the allocator settle
            await run_cell(target, stream, 8, args.warmup, ports)
        for concurrency in args.concurrency:
            for target in targets:
                pgid = pgids.get(target)
                cpu0, switches0 = group_cpu_seconds(pgid), context_switches(pgid)
                result = await run_cell(target, stream, concurrency, args.duration, ports)
                cpu1, switches1 = group_cpu_seconds(pgid), context_switches(pgid)
                gateway_cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
                switches = None if switches0 is None or switches1 is None else switches1 - switches0
                cell = {"target": target, "mode": "stream" if stream else "unary", "concurrency": concurrency,
                        **summarize(result, stream, gateway_cpu, switches)}
                cells.append(cell)
                print(f"  {cell['mode']:6} c={concurrency:<3} {target:9} {cell['rps']:>8} req/s  p50 {cell['p50_ms']} ms"
                      f"  errors {cell['errors']}", flush=True)
    add_overhead(cells)
    return cells


def add_overhead(cells: list[dict]) -> None:
    """Latency SITS adds: target percentile minus direct's, same mode and concurrency."""
    direct = {(c["mode"], c["concurrency"]): c for c in cells if c["target"] == "direct"}
    for cell in cells:
        floor = direct.get((cell["mode"], cell["concurrency"]))
        if cell["target"] in ("direct", "grpc-floor") or floor is None:
            continue
        for key in ("p50_ms", "p99_ms", "ttft_p50_ms"):
            if cell.get(key) is not None and floor.get(key) is not None:
                cell[f"added_{key}"] = round(cell[key] - floor[key], 3)


def table(cells: list[dict]) -> str:
    head = ("| mode | conc | target | req/s | p50 ms | p99 ms | added p50 ms | TTFT p50 ms | gateway CPU µs/req "
            "| gateway CPU % | ctx switches/req | errors |")
    rows = [head, "|" + "---|" * 12]
    for c in cells:
        rows.append(f"| {c['mode']} | {c['concurrency']} | {c['target']} | {c['rps']:,.0f} | {c['p50_ms']} | "
                    f"{c['p99_ms']} | {c.get('added_p50_ms', '')} | {c.get('ttft_p50_ms', '')} | "
                    f"{c.get('gateway_cpu_us_per_req', '')} | {c.get('gateway_cpu_pct', '')} | "
                    f"{c.get('context_switches_per_req', '')} | {c['errors']} |")
    return "\n".join(rows)


def replace_between(path: Path, begin: str, end: str, text: str) -> None:
    doc = path.read_text()
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{text}\n{end}{tail}")
    print(f"updated {path.relative_to(BENCH_DIR.parent)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per cell")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up per target and mode")
    ap.add_argument("--concurrency", default="1,64")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the gateway and the load to separate CPUs")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--update-docs", action="store_true", help=f"replace the table in {DOCS.name}")
    args = ap.parse_args(argv)
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    pin = not args.no_pin and (os.cpu_count() or 1) >= 2
    if pin:
        os.sched_setaffinity(0, {int(LOAD_CPU)})
    procs = ProcessSet(LOG_DIR)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.time()
    try:
        upstream = start_upstream(procs, LOAD_CPU if pin else None)
        http_port, grpc_port, gateway = start_sits_with_grpc(procs, upstream.port, GATEWAY_CPU if pin else None)
        floor_port, floor = start_grpc_floor(procs, GATEWAY_CPU if pin else None)
        ports = {"upstream": upstream.port, "http": http_port, "grpc": grpc_port, "grpc-floor": floor_port}
        pgids = {"sits-http": gateway.pid, "sits-grpc": gateway.pid, "grpc-floor": floor.pid}  # type: ignore[attr-defined]
        print(f"upstream :{upstream.port}  sits http :{http_port} grpc :{grpc_port}  floor :{floor_port}  "
              f"({args.duration:g} s per cell)", flush=True)
        cells = uvloop.run(bench(args, ports, pgids))
    finally:
        procs.stop_all()
    return write_report("bench_grpc.py", argv, started, {"grpcio": grpc.__version__, "pinned": pin}, cells,
                        args.out, (DOCS, BEGIN, END) if args.update_docs else None)


def write_report(script: str, argv: list[str] | None, started: float, versions: dict, cells: list[dict],
                 out: Path, docs: tuple[Path, str, str] | None) -> int:
    """The JSON report, the table on stdout and (given `docs`: file, begin and end markers) in the doc;
    the exit status."""
    report = {
        "command": f"python bench/{script} " + " ".join(argv if argv is not None else sys.argv[1:]),
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(time.time() - started, 1),
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(), **versions,
                    "loadavg_end": " ".join(f"{x:.2f}" for x in os.getloadavg())},
        "cells": cells,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print()
    print(table(cells))
    print(f"\nwrote {out.relative_to(BENCH_DIR.parent) if out.is_relative_to(BENCH_DIR.parent) else out}")
    if docs is not None:
        replace_between(*docs, table(cells))
    return 0 if all(c["errors"] == 0 for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main())
