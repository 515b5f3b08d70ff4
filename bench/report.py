"""Derived numbers (added latency, throughput ratios, target checks) and the Markdown report."""

from __future__ import annotations

from typing import Any

MODES = ("nonstream", "stream")
TARGET_ORDER = ("direct", "python-floor", "sits", "sits-tenants", "sits-2w", "sits-gc", "litellm")
# The key gate's budget (#tenants): at most +15% cost, so at least 1/1.15 of SITS's peak req/s without it
TENANTS_SHARE_PCT = round(100 / 1.15, 1)


def _cell(results: dict, target: str, mode: str, conc: int) -> dict | None:
    t = results["targets"].get(target) or {}
    for cell in t.get("cells", []):
        if cell["mode"] == mode and cell["concurrency"] == conc:
            return cell
    return None


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 4)


CONTENDED_PCT = 10.0  # other processes' share of the gateway core above which a cell is flagged


def _foreign_load(results: dict, cell: dict, target: str) -> float | None:
    """Busy % of the gateway's core(s) not explained by the gateway itself."""
    busy = cell.get("cpu_busy_pct") or {}
    cpus = results["config"].get("gateway_cpus")
    if target == "direct" or not busy or not cpus or cell.get("gateway_cpu_pct") is None:
        return None
    names = [f"cpu{c}" for c in str(cpus).split(",")]
    used = sum(busy.get(n, 0.0) for n in names)
    return round(max(0.0, used - cell["gateway_cpu_pct"]), 1)


def add_derived(results: dict) -> None:
    """Adds per-cell added latency vs direct, ratios and target checks, in place."""
    concs = results["config"]["concurrency"]
    contended = []
    for target, t in results["targets"].items():
        for cell in t.get("cells", []):
            cell["foreign_load_on_gateway_cpu_pct"] = foreign = _foreign_load(results, cell, target)
            if foreign is not None and foreign > CONTENDED_PCT:
                contended.append(f"{target} {cell['mode']} c={cell['concurrency']}: {foreign:.0f}%")
    results["contended_cells"] = contended
    for target, t in results["targets"].items():
        for cell in t.get("cells", []):
            base = _cell(results, "direct", cell["mode"], cell["concurrency"])
            if target == "direct" or base is None:
                continue
            cell["added_p50_ms"] = _sub(cell["p50_ms"], base["p50_ms"])
            cell["added_p99_ms"] = _sub(cell["p99_ms"], base["p99_ms"])
            if "probe" in cell and "probe" in base:
                cell["added_ttft_p50_ms"] = _sub(cell["probe"]["ttft_p50_ms"], base["probe"]["ttft_p50_ms"])
                cell["added_ttft_p99_ms"] = _sub(cell["probe"]["ttft_p99_ms"], base["probe"]["ttft_p99_ms"])

    ratios: dict[str, Any] = {}
    for mode in MODES:
        per_conc = {}
        for c in concs:
            s, lite = _cell(results, "sits", mode, c), _cell(results, "litellm", mode, c)
            per_conc[str(c)] = round(s["rps"] / lite["rps"], 2) if s and lite and lite["rps"] else None
        peaks = {}
        for target in ("sits", "litellm"):
            vals = [x["rps"] for c in concs if (x := _cell(results, target, mode, c))]
            peaks[target] = max(vals) if vals else None
        peak_ratio = round(peaks["sits"] / peaks["litellm"], 2) if peaks["sits"] and peaks["litellm"] else None
        ratios[mode] = {"per_concurrency": per_conc, "peak_rps": peaks, "peak_ratio": peak_ratio}
    results["sits_vs_litellm_throughput"] = ratios

    checks = []
    for mode in MODES:
        checks.append(_check(f"SITS peak req/s >= 100x LiteLLM peak ({mode})", ratios[mode]["peak_ratio"], 100, ">=", "x"))
    for mode in MODES:  # the hot path's own target: half the bare Python relay's peak on the same core
        sits_peak = ratios[mode]["peak_rps"]["sits"]
        floor = [x["rps"] for c in concs if (x := _cell(results, "python-floor", mode, c))]
        share = round(100 * sits_peak / max(floor), 1) if sits_peak and floor else None
        checks.append(_check(f"SITS peak req/s >= 50% of the bare relay's peak ({mode})", share, 50, ">=", "%"))
    if "sits-tenants" in results["targets"]:
        for mode in MODES:  # the key gate on, against the same gateway without it, same run
            keyed = [x["rps"] for c in concs if (x := _cell(results, "sits-tenants", mode, c))]
            sits_peak = ratios[mode]["peak_rps"]["sits"]
            share = round(100 * max(keyed) / sits_peak, 1) if keyed and sits_peak else None
            checks.append(_check(f"SITS with keys, limits and budgets: peak req/s >= {TENANTS_SHARE_PCT}% of SITS "
                                 f"without (at most +15% cost) ({mode})", share, TENANTS_SHARE_PCT, ">=", "%"))
    lo, hi = min(concs), max(concs)
    for mode in MODES:
        cell = _cell(results, "sits", mode, lo) or {}
        checks.append(_check(f"SITS added p50 <= 0.2 ms at c={lo} ({mode})", cell.get("added_p50_ms"), 0.2, "<=", " ms"))
        checks.append(_check(f"SITS added p50 <= 0.3 ms at c={lo} ({mode})", cell.get("added_p50_ms"), 0.3, "<=", " ms"))
        checks.append(_check(f"SITS added p99 <= 2 ms at c={lo} ({mode})", cell.get("added_p99_ms"), 2.0, "<=", " ms"))
    for mode in MODES:
        cell = _cell(results, "sits", mode, hi) or {}
        checks.append(_check(f"SITS added p99 <= 5 ms at c={hi} ({mode})", cell.get("added_p99_ms"), 5.0, "<=", " ms"))
    if results.get("contended_cells"):
        for chk in checks:
            if chk["verdict"] in ("PASS", "FAIL"):
                chk["verdict"] += " (contended machine: not conclusive)"
    for chk in checks:
        if chk["op"] == "<=" and chk["value"] is not None and chk["value"] < 0:
            chk["verdict"] += "; negative: the direct floor was noisier than the target"
    results["checks"] = checks


def _check(name: str, value: float | None, limit: float, op: str, unit: str) -> dict:
    if value is None:
        verdict = "NOT MEASURED"
    elif op == ">=":
        verdict = "PASS" if value >= limit else "FAIL"
    else:
        verdict = "PASS" if value <= limit else "FAIL"
    return {"check": name, "value": value, "limit": limit, "op": op, "unit": unit, "verdict": verdict}


def _f(v: float | None, digits: int = 3) -> str:
    if v is None:
        return "–"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def render_markdown(results: dict) -> str:
    cfg, m, v = results["config"], results["machine"], results["versions"]
    out = [
        f"### Gateway benchmark, {results['finished_utc']} ({'quick' if cfg['quick'] else 'full'} run)",
        "",
        f"Command: `{results['command']}`",
        "",
        f"- Machine: {m['nproc']} cores, {m['cpu_model']}, {m['mem_gib']} GiB; load average at start {m['loadavg_start']}, at end {m.get('loadavg_end', '?')}",
        f"- Versions: Python {v['python']}, SITS {v.get('sits') or 'n/a'}, LiteLLM {v.get('litellm') or 'n/a'}, {v['wrk']}, uvloop {v['uvloop']}, httptools {v['httptools']}",
        f"- Pinning: gateway under test on CPU {cfg['gateway_cpus']}; upstream, wrk and the TTFT probe on CPU {cfg['load_cpus']}"
        + (f"; the sits-tenants target's Redis: {results['targets']['sits-tenants']['redis']}"
           if results["targets"].get("sits-tenants", {}).get("redis") else "")
        + (f"; every benchmark process at nice {cfg['nice']}" if cfg.get("nice") else ""),
        f"- Each cell: wrk -t1 -c<conc> for {cfg['duration_s']} s (after a warm-up); streaming TTFT from a separate closed-loop probe at the same concurrency for {cfg['probe_duration_s']} s (max {cfg['probe_max_requests']} requests)",
        "- Latency in ms; added = target minus direct at the same concurrency; CPU % = process-group CPU time over the wrk run (100 = one core); upstream conns opened = new TCP connections the upstream accepted during the wrk run (for direct: wrk's own); CPU busy % per core = whole machine, from /proc/stat (cpu0 / cpu1 ...): gateway-core busy well above the gateway's own CPU % means something else ran there",
        "",
    ]
    cells = [c for t in results["targets"].values() for c in t.get("cells", [])]
    gave_up = [c for c in cells if c.get("cpu_busy_pct_before") and max(c["cpu_busy_pct_before"].values()) > 10.0]
    if cfg.get("wait_quiet_s"):
        out += [f"- Quiet wait: before each cell up to {cfg['wait_quiet_s']:g} s for all CPUs under 10% busy; "
                f"waited {sum(c.get('quiet_wait_s', 0) for c in cells):.0f} s in all; {len(gave_up)} of {len(cells)} cells started on a busy machine", ""]
    if results.get("contended_cells"):
        out += [f"**Warning: other processes used more than {CONTENDED_PCT:.0f}% of the gateway's core during "
                f"{len(results['contended_cells'])} cells** (machine shared with other work; those numbers are worse than the "
                "gateway alone would do): " + "; ".join(results["contended_cells"]), ""]
    for mode in MODES:
        title = "Non-streaming" if mode == "nonstream" else "Streaming (8 chunks + [DONE]; p50/p99 = full response)"
        out += [f"#### {title}", ""]
        head = "| conc | target | req/s | p50 | p99 | added p50 | added p99 |"
        sep = "|---:|---|---:|---:|---:|---:|---:|"
        if mode == "stream":
            head += " TTFT p50 | TTFT p99 | added TTFT p50 | added TTFT p99 |"
            sep += "---:|---:|---:|---:|"
        head += " errors | gateway CPU % | other load on gateway core % | upstream CPU % | upstream conns opened | CPU busy % (per core) |"
        sep += "---:|---:|---:|---:|---:|---|"
        out += [head, sep]
        for c in cfg["concurrency"]:
            for target in TARGET_ORDER:
                t = results["targets"].get(target)
                if not t:
                    continue
                cell = _cell(results, target, mode, c)
                if cell is None:
                    continue
                row = (f"| {c} | {target} | {_f(cell['rps'], 0)} | {_f(cell['p50_ms'])} | {_f(cell['p99_ms'])} | "
                       f"{_f(cell.get('added_p50_ms'))} | {_f(cell.get('added_p99_ms'))} |")
                if mode == "stream":
                    p = cell.get("probe") or {}
                    row += (f" {_f(p.get('ttft_p50_ms'))} | {_f(p.get('ttft_p99_ms'))} | "
                            f"{_f(cell.get('added_ttft_p50_ms'))} | {_f(cell.get('added_ttft_p99_ms'))} |")
                errors = cell["errors"] + ((cell.get("probe") or {}).get("errors") or 0)
                row += (f" {errors} | {_f(cell['gateway_cpu_pct'], 0)} | {_f(cell.get('foreign_load_on_gateway_cpu_pct'), 0)} | {_f(cell['upstream_cpu_pct'], 0)} |"
                        f" {cell.get('upstream_connections_opened', '–')} |"
                        f" {' / '.join(f'{v:.0f}' for v in (cell.get('cpu_busy_pct') or {}).values())} |")
                out.append(row)
        out.append("")

    r = results.get("sits_vs_litellm_throughput") or {}
    out += ["#### SITS / LiteLLM throughput", "", "| mode | " + " | ".join(f"c={c}" for c in cfg["concurrency"]) + " | peak SITS req/s | peak LiteLLM req/s | peak ratio |",
            "|---|" + "---:|" * (len(cfg["concurrency"]) + 3)]
    for mode in MODES:
        x = r.get(mode) or {}
        pc = x.get("per_concurrency") or {}
        peaks = x.get("peak_rps") or {}
        out.append(f"| {mode} | " + " | ".join(_f(pc.get(str(c)), 2) for c in cfg["concurrency"])
                   + f" | {_f(peaks.get('sits'), 0)} | {_f(peaks.get('litellm'), 0)} | {_f(x.get('peak_ratio'), 2)} |")
    out += ["", "#### Targets", "", "| target | measured | verdict |", "|---|---:|---|"]
    for chk in results.get("checks", []):
        digits = 1 if chk["unit"] == "%" else 3
        val = "–" if chk["value"] is None else f"{_f(chk['value'], digits)}{chk['unit']}"
        out.append(f"| {chk['check']} | {val} | {chk['verdict']} |")
    notes = []
    for target in TARGET_ORDER:
        t = results["targets"].get(target)
        if t and t.get("status") != "ok":
            notes.append(f"- {target}: {t.get('status')}: {t.get('error', '')[:400]}")
        if t:
            for cell in t.get("cells", []):
                p = cell.get("probe") or {}
                if p.get("error_samples"):
                    notes.append(f"- {target} {cell['mode']} c={cell['concurrency']} probe errors: {p['error_samples'][:2]}")
                if cell["errors"]:
                    notes.append(f"- {target} {cell['mode']} c={cell['concurrency']} wrk errors: {cell['wrk']['error_detail']}")
            for n in t.get("notes", []):
                notes.append(f"- {target}: {n}")
    if notes:
        out += ["", "#### Notes", ""] + notes
    return "\n".join(out) + "\n"
