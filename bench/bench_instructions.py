"""CPU instructions SITS executes per request, counted by valgrind (callgrind), not timed.

Wall-clock and CPU-time figures move by 2-3x on a shared 2-core machine (other processes, a
neighbour on the same physical core); the number of instructions one request costs does not (runs
repeat within about 1%). This is the figure to compare two commits' hot paths with; the
side-by-side run (`run_gateway_bench.py`) stays the one that measures req/s and latency.

How: `fast_upstream.py` on CPU 1; `sits serve` (what `--backend bench-model=...` serves, admission's limit
pinned above the clients: see PINNED_CONFIG) under
`valgrind --tool=callgrind --instr-atstart=no` on CPU 0; a warm-up of `--warmup` requests
uninstrumented; then `callgrind_control -i on`, `--requests` requests from a closed-loop aiohttp
client at `--concurrency`, `-i off`, dump, and the total instruction count divided by the requests.
Valgrind runs the gateway about 50x slower, so the counts include no waiting: only work.

    python bench/bench_instructions.py                       # both modes, this checkout
    python bench/bench_instructions.py --src ../old/src      # another commit's source (A/B)
    python bench/bench_instructions.py --json results/instructions.json
    python bench/bench_instructions.py --tenants             # keys, a Redis rpm/tpm/concurrency limit, budgets on
    python bench/bench_instructions.py --surface responses-passthrough   # a Responses-API upstream, relayed
    python bench/bench_instructions.py --modes stream --stream-tokens 6,134   # and the cost of each added event

Needs `valgrind` (Debian package) and `taskset`. Results: a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from processes import ProcessSet, free_port, wait_for_line, wait_http_ok  # noqa: E402
from targets import PINNED_ADMISSION, TENANTS_SECRET, tenants_config  # noqa: E402

_TOTALS = re.compile(rb"^totals:\s+(\d+)", re.MULTILINE)


# --tenants: the key gate on (targets.tenants_config), with admission's limit pinned above the bench's
# concurrency: under valgrind the gateway runs ~50x slower, its requests' round trips pass the adaptive
# limiter's 20 ms floor, and the slower tenants-on path would be queued in admission (about 15k a request that
# tenants off never pays). Pinned, neither run queues.
TENANTS_KEY = "sk-bench-tenant-key"

# The same question on each API surface: (path, body, extra headers, what a complete stream ends with).
# Responses runs with store: false, so the figure is the translation's cost, not the response store's.
SURFACES = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello there"}]}, {}, b"[DONE]"),
    "responses": ("/v1/responses", {"input": "hello there", "store": False}, {}, b"response.completed"),
    "messages": ("/v1/messages", {"max_tokens": 64, "messages": [{"role": "user", "content": "hello there"}]},
                 {"anthropic-version": "2023-06-01"}, b"message_stop"),
    # passed through to an endpoint that speaks the Responses API (PASSTHROUGH_CONFIG), not translated
    "responses-passthrough": ("/v1/responses", {"input": "hello there", "store": False}, {}, b"response.completed"),
}
PASSTHROUGH_CONFIG = """
models:
  - name: bench-model
    endpoints: [{url: "UPSTREAM_URL", api: responses}]
"""
# What `--backend bench-model=URL` serves, with admission's limit pinned above the bench's concurrency (as for
# --tenants, and for the same reason): under valgrind a surface whose request costs more than another's can
# pass the adaptive limiter's 20 ms floor and be queued in admission, a cost it never pays at full speed.
# `--adaptive-admission` serves with `--backend` itself, admission adaptive.
PINNED_CONFIG = PINNED_ADMISSION + """control: {allow_loopback: true}
models:
  - name: bench-model
    endpoints: [{url: "UPSTREAM_URL", upstream_model: bench-model API}]
"""


async def _load(port: int, stream: bool, requests: int, concurrency: int, surface: str = "chat",
                api_key: str | None = None) -> float:
    """Closed loop: `requests` requests of `surface` over `concurrency` keep-alive connections; seconds taken."""
    import aiohttp

    path, fields, headers, end = SURFACES[surface]
    body = {"model": "bench-model", **fields, "stream": stream}
    url = f"http://127.0.0.1:{port}{path}"
    left = requests
    if api_key:
        headers = {**headers, "Authorization": f"Bearer {api_key}"}

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                async with session.post(url, json=body, headers=headers) as response:
                    payload = await response.read()
                    if response.status != 200 or (stream and payload.rfind(end) < 0):
                        raise RuntimeError(f"bad answer: HTTP {response.status} {payload[:200]!r}")

        started = time.monotonic()
        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))), timeout=600)
        return time.monotonic() - started


def measure(python: str, src: Path, server: str, stream: bool, requests: int, warmup: int, concurrency: int,
            procs: ProcessSet, out_dir: Path, config: Path | None = None, event_gap_ms: float = 0.0,
            surface: str = "chat", tenants_redis: str | None = None, idle_s: float = 0.0,
            source_hot_path: bool = False, stream_tokens: int = 6, pinned: bool = True,
            credits: bool = True) -> dict:
    upstream = procs.start("upstream", [python, str(HERE / "fast_upstream.py"), "--port", "0",
                                        "--event-gap-ms", str(event_gap_ms), "--stream-tokens", str(stream_tokens)],
                           cpus="1")
    upstream_port = int(wait_for_line(upstream, "PORT", 30).split()[1])
    port = free_port()
    # one file name per run: the total below sums every dump of this name
    out = out_dir / (f"callgrind-{surface}-{'stream' if stream else 'nonstream'}"
                     f"{f'-{stream_tokens}tokens' if stream else ''}{'-source' if source_hot_path else ''}.out")
    env = {**os.environ, "PYTHONPATH": str(src), "SITS_LOG_LEVEL": "warning"}
    env.pop("SITS_PURE_PYTHON", None)
    if source_hot_path:  # the compiled modules' source (sits/hot_path.py)
        env["SITS_PURE_PYTHON"] = "1"
    upstream_url = f"http://127.0.0.1:{upstream_port}/v1"
    if server == "sits":
        command = ["-m", "sits", "serve", "--backend", f"bench-model={upstream_url}"]
        if config is not None or surface == "responses-passthrough" or pinned:  # UPSTREAM_URL: the model's URL
            config_file = out_dir / "config.yaml"
            passthrough = surface == "responses-passthrough"
            if config is not None:
                text = config.read_text()
            elif pinned:
                text = PINNED_CONFIG.replace(" API", ", api: responses" if passthrough else "")
            else:
                text = PASSTHROUGH_CONFIG
            config_file.write_text(text.replace("UPSTREAM_URL", upstream_url))
            command[3:] = ["--config", str(config_file)]
        if tenants_redis is not None:  # the key gate on: the bench key's runner, its config, its key
            config_file = out_dir / "tenants.yaml"
            config_file.write_text(tenants_config(upstream_url, tenants_redis, pinned_admission=True, credits=credits))
            command = [str(HERE / "sits_bench_keys.py"), "serve", "--config", str(config_file)]
            env["SITS_KEY_SECRET"], env["SITS_BENCH_KEY"] = TENANTS_SECRET, TENANTS_KEY
    else:  # the bare Python proxy: what any gateway on this stack costs at the least
        command = [str(HERE / "python_proxy_floor.py"), "--upstream", upstream_url, "--shape", server.split("-")[1]]
    gateway = procs.start(f"{server}-callgrind", [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
        python, *command, "--host", "127.0.0.1", "--port", str(port)], cpus="0", env=env)
    try:
        if server == "sits":
            wait_http_ok(gateway, f"http://127.0.0.1:{port}/readyz", timeout_s=600, interval_s=0.5)
        else:
            wait_for_line(gateway, "PORT", 600)
        api_key = TENANTS_KEY if tenants_redis is not None else None
        asyncio.run(_load(port, stream, warmup, concurrency, surface, api_key))
        hot_path = _hot_path(port) if server == "sits" else None
        idle_rate = _idle_rate(gateway.pid, out, idle_s) if idle_s else None
        subprocess.run(["callgrind_control", "-i", "on", str(gateway.pid)], check=True, capture_output=True)
        seconds = asyncio.run(_load(port, stream, requests, concurrency, surface, api_key))
        subprocess.run(["callgrind_control", "-i", "off", str(gateway.pid)], check=True, capture_output=True)
        subprocess.run(["callgrind_control", "-d", str(gateway.pid)], check=True, capture_output=True)
        time.sleep(1.0)
        total = sum(int(m.group(1)) for f in out_dir.glob(out.name + "*") for m in _TOTALS.finditer(f.read_bytes()))
    finally:
        procs.stop(gateway)
        procs.stop(upstream)
    if total <= 0:
        raise RuntimeError("callgrind recorded no instructions (did the dump happen?)")
    return {"server": server, "surface": surface, "mode": "stream" if stream else "nonstream", "requests": requests,
            "concurrency": concurrency, "hot_path": hot_path,
            "event_gap_ms": event_gap_ms, "tenants": tenants_redis is not None, "credits": credits and tenants_redis is not None,
            "stream_tokens": stream_tokens if stream else None,
            "admission": "as configured" if config is not None else "pinned at 64" if pinned else "adaptive",
            "instructions": total, "instructions_per_request": round(total / requests),
            "seconds_under_valgrind": round(seconds, 1),
            # timers (health probes, stats refresh, sweeps) tick per wall-clock second, and valgrind stretches a
            # run's wall time: what of each request's count that background work is, at the idle rate
            "idle_instructions_per_second": idle_rate,
            "background_per_request": round(idle_rate * seconds / requests) if idle_rate is not None else None}


def per_added_event(rows: list[dict]) -> list[dict]:
    """For each surface and build streamed at two or more lengths: what one more content event costs, the
    difference between the longest and the shortest stream per token (the per-stream part cancels out)."""
    runs: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["mode"] == "stream":
            runs.setdefault((r["surface"], r["hot_path"], r["event_gap_ms"]), []).append(r)
    out = []
    for (surface, hot_path, gap), streams in runs.items():
        if len(streams) < 2:
            continue
        short = min(streams, key=lambda r: r["stream_tokens"])
        long = max(streams, key=lambda r: r["stream_tokens"])
        added = long["stream_tokens"] - short["stream_tokens"]
        row = {"surface": surface, "hot_path": hot_path, "event_gap_ms": gap,
               "tokens": [short["stream_tokens"], long["stream_tokens"]],
               "per_added_event": round((long["instructions_per_request"] - short["instructions_per_request"]) / added)}
        if long["background_per_request"] is not None and short["background_per_request"] is not None:
            # spaced events make a stream last longer, and the process's timers tick meanwhile: their share of
            # the count (at the idle rate, split among the concurrent streams) is not the events' work
            row["background_per_added_event"] = round(
                (long["background_per_request"] - short["background_per_request"]) / added)
            row["per_added_event_net"] = row["per_added_event"] - row["background_per_added_event"]
        out.append(row)
    return out


def _hot_path(port: int) -> str:
    """Which build of the request path the gateway runs (`/healthz`): compiled, or pure Python and why."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as response:
        return str(json.loads(response.read())["hot_path"])


def _idle_rate(pid: int, out: Path, seconds: float) -> int:
    """Instructions per second the gateway runs with no request in flight (dumped, then set aside)."""
    subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True, capture_output=True)
    time.sleep(seconds)
    subprocess.run(["callgrind_control", "-i", "off", str(pid)], check=True, capture_output=True)
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    time.sleep(1.0)
    total = 0
    for dump in out.parent.glob(out.name + ".*"):
        total += sum(int(m.group(1)) for m in _TOTALS.finditer(dump.read_bytes()))
        dump.rename(dump.with_name("idle-" + dump.name))
    return round(total / seconds)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="the SITS source tree to run (PYTHONPATH)")
    ap.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--modes", default="nonstream,stream")
    ap.add_argument("--patch", type=Path, help="apply this patch (-p1, paths below src/) to a copy of --src first: "
                    "prices a part by taking it out, e.g. bench/ablations/scheduling.patch")
    ap.add_argument("--server", default="sits", choices=("sits", "floor-callbacks", "floor-tasks"),
                    help="SITS, or the bare Python proxy (python_proxy_floor.py) in one of its two shapes")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--hot-path", default="installed", choices=("installed", "source", "both"),
                    help="SITS's compiled modules as installed (compiled where the install compiled them), their "
                    "source (SITS_PURE_PYTHON=1), or each in turn (docs/hot-path.md)")
    ap.add_argument("--idle-seconds", type=float, default=0.0,
                    help="also count the gateway idle for this long after the warm-up: the rate of its background "
                         "work, and how much of each request's count that is (a gapped run is mostly waiting)")
    ap.add_argument("--keep-callgrind", type=Path, help="copy the callgrind outputs into this folder (for "
                    "callgrind_annotate: where the instructions go by C function)")
    ap.add_argument("--config", type=Path, help="serve SITS with this config file instead of --backend (e.g. a "
                    "feature switched off, to price it); the text UPSTREAM_URL in it becomes the upstream's URL")
    ap.add_argument("--event-gap-ms", type=float, default=0.0,
                    help="the upstream writes each streamed event on its own, this many ms apart, as a model server "
                    "does (default 0: all events in one write); prices relaying one event, e.g. 5 with --concurrency 2")
    ap.add_argument("--stream-tokens", default="6",
                    help="content tokens (one event each) of a streamed answer, comma-separated: with two or more, "
                    "each stream is measured at each length and the cost of one added event is the difference "
                    "per token between the longest and the shortest")
    ap.add_argument("--surface", default="chat", help="the API surface(s) the load speaks, comma-separated: "
                    "chat (/v1/chat/completions), responses (/v1/responses), messages (/v1/messages), "
                    "responses-passthrough (/v1/responses to an endpoint that speaks the Responses API)")
    ap.add_argument("--adaptive-admission", action="store_true",
                    help="serve with `--backend` as it is, admission adaptive (default: its limit pinned at 64, above "
                    "the bench's concurrency, so that valgrind's slowness cannot queue the dearer surfaces in admission)")
    ap.add_argument("--tenants", action="store_true",
                    help="turn the key gate on: a tenant key with rpm, tpm and concurrency limits counted in Redis "
                    "(--redis-url) and daily and monthly budgets, a priced model (bench/sits_bench_keys.py)")
    ap.add_argument("--no-credits", action="store_true",
                    help="with --tenants: every keyed request admitted on Redis (limits.credit_s: null), not on "
                    "per-replica credits")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0", help="the Redis --tenants counts limits in")
    args = ap.parse_args(argv)
    surfaces = args.surface.split(",")
    if not set(surfaces) <= set(SURFACES):
        ap.error(f"--surface: each of {sorted(SURFACES)}")
    if args.server != "sits" and surfaces != ["chat"]:
        ap.error("--surface other than chat needs --server sits (the floors speak chat completions only)")
    if args.requests < 1 or args.requests > 100_000:
        ap.error("--requests must be in 1..100000")
    try:
        lengths = sorted({int(n) for n in args.stream_tokens.split(",")})
    except ValueError:
        ap.error("--stream-tokens: whole numbers, comma-separated")
    if not all(1 <= n <= 10_000 for n in lengths):
        ap.error("--stream-tokens: each in 1..10000")
    rows = []
    with tempfile.TemporaryDirectory(prefix="sits-callgrind-") as tmp:
        if args.patch is not None:  # a patched copy of the source, never the checkout itself
            patched = Path(tmp) / "src"
            shutil.copytree(args.src, patched)
            subprocess.run(["patch", "-s", "-p1", "-d", str(patched), "-i", str(args.patch.resolve())], check=True)
            args.src = patched
        procs = ProcessSet(Path(tmp) / "logs")
        try:
            builds = {"installed": (False,), "source": (True,), "both": (False, True)}[args.hot_path]
            for surface in surfaces:
                for mode in args.modes.split(","):
                    for source_hot_path in builds:
                        for tokens in lengths if mode == "stream" else lengths[:1]:
                            rows.append(measure(args.python, args.src.resolve(), args.server, mode == "stream",
                                                args.requests, args.warmup, args.concurrency, procs, Path(tmp),
                                                args.config, args.event_gap_ms, surface,
                                                args.redis_url if args.tenants else None, args.idle_seconds,
                                                source_hot_path, tokens, not args.adaptive_admission,
                                                not args.no_credits))
        finally:
            procs.stop_all()
            if args.keep_callgrind is not None:
                args.keep_callgrind.mkdir(parents=True, exist_ok=True)
                for out in Path(tmp).glob("callgrind-*"):
                    shutil.copy(out, args.keep_callgrind / out.name)
    print(f"server: {args.server}; source: {args.src.resolve()}; patch: {args.patch}; "
          f"tenants: {'on (limits in ' + args.redis_url + ')' if args.tenants else 'off'}\n")
    idle = args.idle_seconds > 0
    print("| surface | mode | hot path | requests | concurrency | upstream event gap (ms) | streamed tokens "
          "| instructions per request |" + (" of which background |" if idle else ""))
    print("|---|---|---|---:|---:|---:|---:|---:|" + ("---:|" if idle else ""))
    for r in rows:
        print(f"| {r['surface']} | {r['mode']} | {r['hot_path'] or '-'} | {r['requests']:,} | {r['concurrency']} "
              f"| {r['event_gap_ms']:g} | {r['stream_tokens'] or '-'} "
              f"| {r['instructions_per_request']:,} |" + (f" {r['background_per_request']:,} |" if idle else ""))
    per_event = per_added_event(rows)
    if per_event:
        net = all("per_added_event_net" in r for r in per_event)
        print("\n| surface | hot path | upstream event gap (ms) | instructions per added streamed event |"
              + (" of which background | net of background |" if net else ""))
        print("|---|---|---:|---:|" + ("---:|---:|" if net else ""))
        for r in per_event:
            print(f"| {r['surface']} | {r['hot_path'] or '-'} | {r['event_gap_ms']:g} | {r['per_added_event']:,} |"
                  + (f" {r['background_per_added_event']:,} | {r['per_added_event_net']:,} |" if net else ""))
    if args.json:
        args.json.write_text(json.dumps({"server": args.server, "source": str(args.src.resolve()),
                                        "patch": str(args.patch) if args.patch else None, "results": rows,
                                        "per_added_event": per_event}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
