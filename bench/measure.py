"""One benchmark cell: wrk for throughput and latency, the stream probe for TTFT.

Also samples the CPU time of the gateway's and the upstream's process groups over
the cell, so a reader can tell which side was saturated.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import uvloop

from stream_probe import ProbeResult, run_probe

BENCH_DIR = Path(__file__).resolve().parent
WRK_LUA = BENCH_DIR / "wrk_post.lua"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def body_bytes(stream: bool) -> bytes:
    req = {
        "model": "bench-model",
        "messages": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "Say hello to the benchmark."},
        ],
        "max_tokens": 16,
        "temperature": 0,
    }
    if stream:
        req["stream"] = True
    return json.dumps(req, separators=(",", ":")).encode()


def group_cpu_seconds(pgid: int | None) -> float | None:
    """utime+stime of every live process in the group (all threads included)."""
    if pgid is None:
        return None
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        # fields[0] is state (field 3); pgrp is field 5, utime 14, stime 15
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def cpu_busy_jiffies() -> dict[str, tuple[int, int]]:
    """Per-CPU (busy, total) jiffies from /proc/stat."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                name, *vals = line.split()
                nums = [int(v) for v in vals[:8]]
                idle = nums[3] + nums[4]  # idle + iowait
                out[name] = (sum(nums) - idle, sum(nums))
    return out


def cpu_busy_pct(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict[str, float]:
    pct = {}
    for name, (busy1, total1) in after.items():
        busy0, total0 = before.get(name, (0, 0))
        pct[name] = round(100 * (busy1 - busy0) / (total1 - total0), 1) if total1 > total0 else 0.0
    return pct


def wait_until_quiet(max_wait_s: float, busy_limit_pct: float = 10.0, sample_s: float = 0.5) -> tuple[float, dict[str, float]]:
    """Wait (bounded) until every CPU is under busy_limit_pct over one sample; returns (waited s, last sample)."""
    start = time.monotonic()
    while True:
        before = cpu_busy_jiffies()
        time.sleep(sample_s)
        sample = cpu_busy_pct(before, cpu_busy_jiffies())
        waited = time.monotonic() - start
        if max(sample.values(), default=0.0) <= busy_limit_pct or waited >= max_wait_s:
            return round(waited, 1), sample


@dataclass
class WrkResult:
    requests: int
    duration_s: float
    rps: float
    errors: int
    error_detail: dict
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    mean_ms: float
    max_ms: float


def run_wrk(url: str, body_file: Path, concurrency: int, duration_s: int, cpus: str | None) -> WrkResult:
    cmd = ["wrk", "-t1", f"-c{concurrency}", f"-d{duration_s}s", "--timeout", "10s", "-s", str(WRK_LUA), url]
    if cpus:
        cmd = ["taskset", "-c", cpus] + cmd
    env = dict(os.environ, BENCH_BODY_FILE=str(body_file))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=duration_s + 60)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("WRKJSON ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed (rc={out.returncode}): {out.stdout[-2000:]} {out.stderr[-2000:]}")
    raw = json.loads(line[len("WRKJSON "):])
    detail = {k[4:]: raw[k] for k in raw if k.startswith("err_")}
    duration = raw["duration_us"] / 1e6
    ok = raw["requests"] - raw["err_status"]
    return WrkResult(
        requests=raw["requests"],
        duration_s=round(duration, 3),
        rps=round(ok / duration, 1) if duration else 0.0,
        errors=sum(detail.values()),
        error_detail=detail,
        p50_ms=raw["p50_us"] / 1000,
        p90_ms=raw["p90_us"] / 1000,
        p99_ms=raw["p99_us"] / 1000,
        p999_ms=raw["p999_us"] / 1000,
        mean_ms=round(raw["lat_mean_us"] / 1000, 4),
        max_ms=raw["lat_max_us"] / 1000,
    )


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile, q in 0..100."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def summarize_probe(result: ProbeResult) -> dict:
    def ms(v: float | None) -> float | None:
        return None if v is None else round(v / 1000, 4)

    return {
        "concurrency": result.concurrency,
        "duration_s": round(result.duration_s, 3),
        "ok": result.ok,
        "errors": result.errors,
        "error_samples": result.error_samples,
        "rps": round(result.ok / result.duration_s, 1) if result.duration_s else 0.0,
        "ttft_p50_ms": ms(percentile(result.ttft_us, 50)),
        "ttft_p99_ms": ms(percentile(result.ttft_us, 99)),
        "total_p50_ms": ms(percentile(result.total_us, 50)),
        "total_p99_ms": ms(percentile(result.total_us, 99)),
    }


@dataclass
class CellSpec:
    stream: bool
    concurrency: int
    duration_s: int
    probe_duration_s: float
    probe_max_requests: int
    quiet_wait_s: float = 0.0


def upstream_stats(upstream_port: int) -> dict:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{upstream_port}/stats", timeout=5) as resp:
        return json.loads(resp.read())


def run_cell(
    spec: CellSpec,
    upstream_port: int,
    port: int,
    path: str,
    body_file: Path,
    load_cpus: str | None,
    gateway_pgid: int | None,
    upstream_pgid: int | None,
    expected_events: int,
) -> dict:
    url = f"http://127.0.0.1:{port}{path}"
    waited, idle_sample = wait_until_quiet(spec.quiet_wait_s) if spec.quiet_wait_s else (0.0, {})
    s0 = upstream_stats(upstream_port)
    gw0, up0 = group_cpu_seconds(gateway_pgid), group_cpu_seconds(upstream_pgid)
    busy0 = cpu_busy_jiffies()
    wrk = run_wrk(url, body_file, spec.concurrency, spec.duration_s, load_cpus)
    busy1 = cpu_busy_jiffies()
    gw1, up1 = group_cpu_seconds(gateway_pgid), group_cpu_seconds(upstream_pgid)
    s1 = upstream_stats(upstream_port)
    cell: dict = {
        "mode": "stream" if spec.stream else "nonstream",
        "concurrency": spec.concurrency,
        "wrk": asdict(wrk),
        "rps": wrk.rps,
        "p50_ms": wrk.p50_ms,
        "p99_ms": wrk.p99_ms,
        "errors": wrk.errors,
        "gateway_cpu_pct": None if gw0 is None else round(100 * (gw1 - gw0) / wrk.duration_s, 1),
        "upstream_cpu_pct": None if up0 is None else round(100 * (up1 - up0) / wrk.duration_s, 1),
        # whole-machine view: per-CPU busy % over the wrk run, to spot other load on the gateway's core
        "cpu_busy_pct": cpu_busy_pct(busy0, busy1),
        "quiet_wait_s": waited,
        "cpu_busy_pct_before": idle_sample,
        # every request wrk counted must have reached the upstream (no caching, no short-cuts);
        # wrk stops mid-flight, so up to `concurrency` more may have been forwarded
        "upstream_completions": s1["completions"] - s0["completions"],
        "upstream_connections_opened": s1["connections"] - s0["connections"] - 1,  # minus the /stats call
    }
    if spec.stream:
        probe = uvloop.run(
            run_probe("127.0.0.1", port, path, body_file.read_bytes(), spec.concurrency,
                      spec.probe_duration_s, spec.probe_max_requests, expected_events)
        )
        cell["probe"] = summarize_probe(probe)
    return cell
