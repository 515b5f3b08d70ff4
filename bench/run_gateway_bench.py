"""Side-by-side gateway benchmark: direct upstream vs SITS vs LiteLLM's proxy.

    python bench/run_gateway_bench.py            # full run, 10 s per cell, updates bench/README.md
    python bench/run_gateway_bench.py --quick    # 3 s per cell, results/gateway-quick.*

One fast upstream (bench/fast_upstream.py) on the load CPU; each gateway in turn on
the gateway CPU (taskset); wrk and the TTFT probe on the load CPU. Every child is
stopped (process group, SIGTERM then SIGKILL) on exit, error or signal.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_PYTHON = BENCH_DIR.parent / ".venv" / "bin" / "python"

try:
    import httptools  # noqa: F401
    import orjson  # noqa: F401
    import uvloop
except ImportError:  # re-run under the project venv, which has them
    if PROJECT_PYTHON.exists() and Path(sys.executable) != PROJECT_PYTHON and not os.environ.get("SITS_BENCH_REEXEC"):
        os.environ["SITS_BENCH_REEXEC"] = "1"
        os.execv(str(PROJECT_PYTHON), [str(PROJECT_PYTHON), *sys.argv])
    raise

import argparse
import json
import platform
import shlex
import signal
import subprocess
import tempfile
import time
import traceback
from collections import Counter
from datetime import datetime, timezone

sys.path.insert(0, str(BENCH_DIR))

from measure import CellSpec, body_bytes, run_cell, run_wrk  # noqa: E402
from processes import ProcessSet  # noqa: E402
from report import add_derived, render_markdown  # noqa: E402
from stream_probe import check_completion_body, check_stream_body, fetch_once  # noqa: E402
from targets import (  # noqa: E402
    LITELLM_VENV, TENANTS_REDIS, RunningTarget, start_litellm, start_python_floor, start_redis, start_sits, start_upstream,
)

RESULTS_DIR = BENCH_DIR / "results"
TMP_DIR = RESULTS_DIR / "tmp"
README = BENCH_DIR / "README.md"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
STREAM_CHUNKS = 8


def machine_info() -> dict:
    model = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "mem_gib": round(mem_kb / 2**20, 1),
        "kernel": platform.release(),
        "loadavg_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def versions() -> dict:
    wrk = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.splitlines() or ["wrk ?"]
    return {
        "python": platform.python_version(),
        "uvloop": uvloop.__version__,
        "httptools": httptools.__version__,
        "wrk": wrk[0].split(" Copyright")[0].strip(),
    }


def validate(target: RunningTarget) -> None:
    """One non-streaming and one streaming request must come back right before timing anything."""
    for stream in (False, True):
        status, body = uvloop.run(fetch_once("127.0.0.1", target.port, "POST", target.chat_path, body_bytes(stream), timeout=60))
        if status != 200:
            raise RuntimeError(f"{target.name}: stream={stream} answered HTTP {status}: {body[:500]!r}")
        problem = check_stream_body(body, STREAM_CHUNKS) if stream else check_completion_body(body)
        if problem:
            raise RuntimeError(f"{target.name}: stream={stream} response not as expected: {problem}: {body[:500]!r}")


def bench_target(target: RunningTarget, upstream_port: int, upstream_pgid: int, args: argparse.Namespace, bodies: dict[bool, Path]) -> list[dict]:
    validate(target)
    url = f"http://127.0.0.1:{target.port}{target.chat_path}"
    for stream in (False, True):  # warm-up, not recorded
        run_wrk(url, bodies[stream], max(args.concurrency), args.warmup_s, args.load_cpus)
    pgid = target.process.pid if target.name != "direct" and target.process else None
    cells = []
    for stream in (False, True):
        for conc in args.concurrency:
            wait = max(0.0, min(args.wait_quiet, args.wait_quiet_total - args.waited_total))
            spec = CellSpec(stream, conc, args.duration_s, args.probe_duration_s, args.probe_max_requests, wait)
            cell = run_cell(spec, upstream_port, target.port, target.chat_path, bodies[stream], args.load_cpus, pgid, upstream_pgid, STREAM_CHUNKS)
            args.waited_total += cell["quiet_wait_s"]
            probe = cell.get("probe") or {}
            print(f"  {target.name:8s} {cell['mode']:9s} c={conc:<3d} {cell['rps']:>10,.0f} req/s  p50 {cell['p50_ms']:.3f} ms"
                  f"  p99 {cell['p99_ms']:.3f} ms  errors {cell['errors']}"
                  + (f"  TTFT p50 {probe.get('ttft_p50_ms')} ms p99 {probe.get('ttft_p99_ms')} ms (probe {probe.get('rps')} req/s, errors {probe.get('errors')})" if probe else "")
                  + f"  gw CPU {cell['gateway_cpu_pct']}%  up CPU {cell['upstream_cpu_pct']}%"
                  f"  up conns +{cell['upstream_connections_opened']}", flush=True)
            forwarded = cell["upstream_completions"]
            if forwarded < cell["wrk"]["requests"] - cell["wrk"]["error_detail"]["status"]:
                target.notes.append(f"{cell['mode']} c={conc}: upstream answered {forwarded} completions, "
                                    f"fewer than the {cell['wrk']['requests']} responses wrk counted")
            cells.append(cell)
    return cells


def profile_sits(target: RunningTarget, args: argparse.Namespace, bodies: dict[bool, Path]) -> dict:
    """py-spy the SITS process under c=max load, one run per mode; collapsed stacks + a summary."""
    py_spy = LITELLM_VENV / "bin" / "py-spy"
    if not py_spy.exists():
        return {"error": f"{py_spy} missing"}
    out: dict = {}
    conc = max(args.concurrency)
    for stream in (False, True):
        mode = "stream" if stream else "nonstream"
        prefix = "" if args.results_name in ("gateway-latest", "gateway-quick") else f"{args.results_name}-"
        raw = RESULTS_DIR / f"{prefix}sits-profile-{mode}.txt"
        cmd = ["taskset", "-c", args.load_cpus, str(py_spy), "record", "--pid", str(target.process.pid), "--rate", "100" if args.profile_native else "500",
               "--duration", str(args.profile_s), "--format", "raw", "--nolineno", "--output", str(raw)]
        # --native needs to pause the process for unwinding; otherwise sample without stopping it
        cmd.append("--native" if args.profile_native else "--nonblocking")
        spy = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(0.5)
        wrk = run_wrk(f"http://127.0.0.1:{target.port}{target.chat_path}", bodies[stream], conc, args.profile_s, args.load_cpus)
        try:
            log, _ = spy.communicate(timeout=args.profile_s + 30)
        except subprocess.TimeoutExpired:
            spy.kill()
            log, _ = spy.communicate()
        if not raw.exists():
            out[mode] = {"error": log[-1000:]}
            continue
        out[mode] = {"file": str(raw.relative_to(BENCH_DIR)), "rps_while_profiled": wrk.rps,
                     "native": args.profile_native, "concurrency": conc, **summarize_collapsed(raw)}
    return out


def summarize_collapsed(path: Path, top: int = 25) -> dict:
    self_t: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        count = int(n)
        frames = stack.split(";")
        total += count
        self_t[frames[-1]] += count
        for frame in set(frames[1:]):
            incl[frame] += count
    pct = lambda c: round(100 * c / total, 1) if total else 0.0  # noqa: E731
    return {
        "samples": total,
        "self_top": [(f, pct(c)) for f, c in self_t.most_common(top)],
        "inclusive_top": [(f, pct(c)) for f, c in incl.most_common(top)],
    }


def profile_markdown(prof: dict) -> str:
    out = ["### SITS profile (py-spy; separate runs, not part of the tables above)", ""]
    for mode, p in prof.items():
        if "error" in p:
            out += [f"{mode}: {p['error']}", ""]
            continue
        kind = "native + Python frames, process paused per sample" if p.get("native") else "Python frames, non-blocking"
        out += [f"#### {mode}, c={p.get('concurrency')}: {p['samples']} samples ({kind}), {p['rps_while_profiled']:,.0f} req/s while profiled; raw stacks in `{p['file']}`", "",
                "| self % | function |", "|---:|---|"]
        out += [f"| {pc} | `{f}` |" for f, pc in p["self_top"]]
        out += ["", "| inclusive % | function |", "|---:|---|"]
        out += [f"| {pc} | `{f}` |" for f, pc in p["inclusive_top"]]
        out.append("")
    return "\n".join(out) + "\n"


def update_readme(markdown: str) -> None:
    text = README.read_text() if README.exists() else f"# bench\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text += f"\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{BEGIN}\n{markdown}{END}{tail}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 s per cell; writes results/gateway-quick.*, leaves README alone")
    ap.add_argument("--duration", type=int, dest="duration_s", help="seconds per cell (default 10, quick 3)")
    ap.add_argument("--concurrency", default="1,16,64", help="comma-separated connection counts")
    ap.add_argument("--targets", default="direct,python-floor,sits,litellm",
                    help="comma-separated subset of direct,python-floor,sits,sits-tenants,sits-2w,litellm,sits-gc "
                         "(python-floor: the bare Python proxy, bench/python_proxy_floor.py; sits-tenants: the key gate on, "
                         "limits counted in the Redis on 127.0.0.1:6379; sits-2w: sits serve --workers 2, for scaling "
                         "(give it --gateway-cpus 0,1); sits-gc: diagnostic, SITS with gc.freeze + higher GC thresholds)")
    ap.add_argument("--tenants-redis",
                    help="the Redis the sits-tenants target counts limits in (default: a redis-server of the "
                         "bench's own, pinned to the load CPUs like the upstream)")
    ap.add_argument("--tenants-max-batch", type=int,
                    help="the sits-tenants target's limits.max_batch (default: the gateway's own default)")
    ap.add_argument("--gateway-cpus", default="0", help="taskset CPU list for the gateway under test")
    ap.add_argument("--load-cpus", default="1", help="taskset CPU list for upstream, wrk, probe and this harness")
    ap.add_argument("--probe-max-requests", type=int, default=1_000_000)
    ap.add_argument("--profile-sits", action="store_true", help="also py-spy the sits target under c=max load (separate runs, not in the table)")
    ap.add_argument("--profile-native", action="store_true", help="py-spy --native: include C frames (uvloop, CPython)")
    ap.add_argument("--profile-seconds", type=int, dest="profile_s", default=0)
    ap.add_argument("--wait-quiet", type=float,
                    help="before each cell wait up to this many seconds for every CPU to be under 10%% busy "
                         "(default 60, quick 5; 0: don't wait; at most 600 s, quick 60 s, in all)")
    ap.add_argument("--nice", type=int, default=0,
                    help="scheduling niceness for the harness and all it starts (e.g. -10 on a shared machine; needs root)")
    ap.add_argument("--no-readme", action="store_true", help="do not update bench/README.md")
    ap.add_argument("--render", metavar="JSON", help="only re-render a saved results JSON (and README for a full run)")
    ap.add_argument("--results-name", help="results/<name>.{json,md} (default gateway-latest, or gateway-quick with --quick)")
    args = ap.parse_args(argv)
    args.duration_s = args.duration_s or (3 if args.quick else 10)
    args.probe_duration_s = args.duration_s
    args.results_name = args.results_name or ("gateway-quick" if args.quick else "gateway-latest")
    args.warmup_s = 2 if args.quick else 3
    if args.wait_quiet is None:
        args.wait_quiet = 5.0 if args.quick else 60.0
    args.wait_quiet_total = 60.0 if args.quick else 600.0  # bound on all quiet waits of one run
    args.waited_total = 0.0
    args.profile_s = args.profile_s or (5 if args.quick else 10)
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = set(args.targets) - {"direct", "python-floor", "sits", "litellm", "sits-gc", "sits-2w", "sits-tenants"}
    if unknown:
        ap.error(f"unknown targets: {sorted(unknown)}")
    if args.tenants_max_batch is not None and not 0 <= args.tenants_max_batch <= 10_000:
        ap.error("--tenants-max-batch must be in 0..10000")
    if "direct" not in args.targets:
        args.targets.insert(0, "direct")  # added latency needs the floor
    return args


def render_saved(path: Path, readme: bool) -> int:
    """Re-derive and re-render a saved results JSON (no measuring); the command shown stays the one that measured."""
    results = json.loads(path.read_text())
    add_derived(results)
    markdown = render_markdown(results)
    if "sits_profile" in results:
        markdown += "\n" + profile_markdown(results["sits_profile"])
    path.write_text(json.dumps(results, indent=2) + "\n")
    path.with_suffix(".md").write_text(markdown)
    if readme and not results["config"]["quick"]:
        update_readme(markdown)
    print(markdown)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        return render_saved(Path(args.render), readme=not args.no_readme)
    command = "python bench/run_gateway_bench.py" + "".join(" " + shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    if (os.cpu_count() or 1) < 2:
        print("warning: fewer than 2 CPUs; pinning disabled", file=sys.stderr)
        args.gateway_cpus = args.load_cpus = None
    else:
        os.sched_setaffinity(0, {int(c) for c in args.load_cpus.split(",")})
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.nice:
        # every child (upstream, gateways, wrk, py-spy) inherits this: on a machine shared with
        # other work, the benchmark's processes then win their cores most of the time
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)

    RESULTS_DIR.mkdir(exist_ok=True)
    TMP_DIR.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "command": command,
        "started_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "config": {
            "quick": args.quick, "duration_s": args.duration_s, "probe_duration_s": args.probe_duration_s,
            "probe_max_requests": args.probe_max_requests, "warmup_s": args.warmup_s, "wait_quiet_s": args.wait_quiet,
            "nice": args.nice,
            "concurrency": args.concurrency, "gateway_cpus": args.gateway_cpus, "load_cpus": args.load_cpus,
            "wrk": "wrk -t1 -c<conc> --timeout 10s -s bench/wrk_post.lua",
            "request_body_nonstream": body_bytes(False).decode(), "request_body_stream": body_bytes(True).decode(),
        },
        "machine": machine_info(),
        "versions": versions(),
        "targets": {},
    }
    procs = ProcessSet(TMP_DIR / "logs")
    bodies: dict[bool, Path] = {}
    with tempfile.TemporaryDirectory(dir=TMP_DIR) as td:
        for stream in (False, True):
            bodies[stream] = Path(td) / f"body-{stream}.json"
            bodies[stream].write_bytes(body_bytes(stream))
        try:
            upstream = start_upstream(procs, args.load_cpus)
            print(f"upstream on 127.0.0.1:{upstream.port} (pid {upstream.process.pid})", flush=True)
            for name in args.targets:
                entry: dict = {"status": "ok"}
                results["targets"][name] = entry
                target: RunningTarget | None = None
                try:
                    if name == "direct":
                        target = RunningTarget("direct", upstream.port, upstream.process)
                    elif name == "python-floor":
                        target = start_python_floor(procs, upstream.port, args.gateway_cpus)
                    elif name in ("sits", "sits-gc", "sits-2w", "sits-tenants"):
                        redis_url = TENANTS_REDIS
                        if name == "sits-tenants":
                            redis_url = args.tenants_redis or start_redis(procs, args.load_cpus)
                            entry["redis"] = redis_url if args.tenants_redis else f"own, on CPUs {args.load_cpus}"
                        target = start_sits(procs, upstream.port, args.gateway_cpus, TMP_DIR / name,
                                            gc_variant=name == "sits-gc", workers=2 if name == "sits-2w" else 1,
                                            tenants=name == "sits-tenants", tenants_max_batch=args.tenants_max_batch,
                                            tenants_redis=redis_url)
                        results["versions"]["sits"] = target.version
                    else:
                        target = start_litellm(procs, upstream.port, args.gateway_cpus, TMP_DIR / "litellm")
                        results["versions"]["litellm"] = target.version
                    entry.update({"port": target.port, "startup_s": round(target.startup_s, 2)})
                    print(f"{name}: ready on 127.0.0.1:{target.port} after {target.startup_s:.1f} s {target.version}", flush=True)
                    entry["notes"] = target.notes
                    entry["cells"] = bench_target(target, upstream.port, upstream.process.pid, args, bodies)
                    if name == "sits" and args.profile_sits:
                        results["sits_profile"] = profile_sits(target, args, bodies)
                except Exception as exc:  # one target failing must not stop the others
                    entry["status"] = "failed"
                    entry["error"] = f"{type(exc).__name__}: {exc}"
                    print(f"{name}: FAILED: {entry['error']}", file=sys.stderr, flush=True)
                    traceback.print_exc()
                finally:
                    if target is not None and target.name != "direct" and target.process is not None:
                        entry["log_tail"] = target.process.log_tail(15)
                        procs.stop(target.process)
            if not upstream.process.alive():
                results["upstream_note"] = "upstream exited during the run"
        finally:
            procs.stop_all()

    results["machine"]["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results["finished_utc"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    add_derived(results)
    markdown = render_markdown(results)
    if "sits_profile" in results:
        markdown += "\n" + profile_markdown(results["sits_profile"])
    stem = args.results_name
    (RESULTS_DIR / f"{stem}.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS_DIR / f"{stem}.md").write_text(markdown)
    if not args.quick and not args.no_readme:
        update_readme(markdown)
    print()
    print(markdown)
    print(f"wrote {RESULTS_DIR / (stem + '.json')} and .md", flush=True)
    return 0 if all(t.get("status") == "ok" for t in results["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
