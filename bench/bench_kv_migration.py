"""Moving a conversation's KV cache between two llama.cpp instances of one model: does it pay?

    PYTHONPATH=src .venv/bin/python bench/bench_kv_migration.py [--facts 110] [--rounds 3] [--threads 1]
        [--json bench/results/kv-migration.json] [--md bench/results/kv-migration.md]

Two llama-server instances of the embedded SmolLM2-135M (one slot each, `--slot-save-path` on one temp
folder, `--cache-ram 0` so the servers' host-memory prompt cache cannot answer for the KV cache under
test). Each round is a fresh conversation (a nonce first, so no round shares a prefix with another):
its history (`--facts` lines, about 14 tokens each) is prefilled on instance A, then the next turn's time
to first token (streamed) is taken

  (b) migrated: A's slot saved to the shared folder, restored into B's slot, then the next turn on B;
      the save and the restore are timed apart (the servers' own times and the calls' wall time);
  (a) cold:     B's slot erased, the same next turn on B again (a full prefill);
  (c) affinity: the same next turn on A, which kept its own cache (what prefix affinity gives).

Medians over the rounds; the per-token prefill cost is taken from A's history prefill (server timings).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from sits.backends.http_client import ConnectionPool
from sits.backends.llama_cpp_slots import LlamaCppSlots
from sits.state.routing_table import Endpoint
from tests.llama_server import SMOLLM2, LlamaServer, gguf_of


def conversation(facts: int) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    nonce = secrets.token_hex(4)
    history = [{"role": "user", "content": f"Session {nonce}. " + " ".join(
                   f"Fact {i}: the number {i} is {'even' if i % 2 == 0 else 'odd'}." for i in range(facts))},
               {"role": "assistant", "content": "Noted."},
               {"role": "user", "content": "Which facts mention 7?"}]
    return history, [*history, {"role": "assistant", "content": "Fact 7 and fact 17."},
                     {"role": "user", "content": "And which mention 8?"}]


async def prefill(http: aiohttp.ClientSession, server: LlamaServer, messages: list[dict[str, str]]) -> dict[str, Any]:
    async with http.post(f"{server.url}/chat/completions",
                         json={"messages": messages, "max_tokens": 1, "temperature": 0}) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def ttft(http: aiohttp.ClientSession, server: LlamaServer, messages: list[dict[str, str]]) -> tuple[float, int]:
    """Seconds to the first streamed content, and the prompt tokens the server took from its cache."""
    started = time.perf_counter()
    first, cached = None, -1
    async with http.post(f"{server.url}/chat/completions",
                         json={"messages": messages, "max_tokens": 4, "temperature": 0, "stream": True,
                               "stream_options": {"include_usage": True}}) as response:
        assert response.status == 200, await response.text()
        async for line in response.content:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            event = json.loads(line[6:])
            if first is None and any(c.get("delta", {}).get("content") for c in event.get("choices", [])):
                first = time.perf_counter() - started
            if event.get("usage"):
                cached = event["usage"].get("prompt_tokens_details", {}).get("cached_tokens", -1)
    assert first is not None
    return first, cached


def endpoint(server: LlamaServer, name: str) -> Endpoint:
    return Endpoint(id=name, model="smollm2", upstream_model="smollm2", scheme="http", host="127.0.0.1",
                    port=server.port, base_path="/v1")


def median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    gguf = gguf_of(SMOLLM2, Path(tempfile.gettempdir()) / "sits-bench-data")
    folder = Path(tempfile.mkdtemp(prefix="sits-kv-bench-"))
    extra = ["--slot-save-path", str(folder), "--cache-ram", "0", "--threads", str(args.threads)]
    a = await LlamaServer(gguf, ctx_per_slot=args.ctx, extra=extra).start()
    b = await LlamaServer(gguf, ctx_per_slot=args.ctx, extra=extra).start()
    pool = ConnectionPool()
    slots = LlamaCppSlots(pool, pool, timeout_s=120)
    ea, eb = endpoint(a, "A"), endpoint(b, "B")
    rounds: list[dict[str, Any]] = []
    deadline = time.monotonic() + args.max_seconds
    try:
        # a fresh connection per call: llama-server closes keep-alive connections idle for seconds
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600),
                                         connector=aiohttp.TCPConnector(force_close=True)) as http:
            await prefill(http, a, [{"role": "user", "content": "Hi."}])  # warm-up (weights paged in)
            await prefill(http, b, [{"role": "user", "content": "Hi."}])
            for r in range(args.rounds):
                if time.monotonic() > deadline:
                    print(f"time limit reached after {r} rounds", flush=True)
                    break
                history, next_turn = conversation(args.facts)
                first = await prefill(http, a, history)
                t = first["timings"]
                row: dict[str, Any] = {"history_tokens": first["usage"]["prompt_tokens"],
                                       "history_prefill_ms": t["prompt_ms"],
                                       "prefill_ms_per_token": t["prompt_ms"] / max(1, t["prompt_n"])}
                filename = f"round-{r}.bin"
                began = time.perf_counter()
                saved = await slots.save(ea, 0, filename)
                row["save_wall_s"] = time.perf_counter() - began
                began = time.perf_counter()
                restored = await slots.restore(eb, 0, filename)
                row["restore_wall_s"] = time.perf_counter() - began
                row.update(save_server_ms=saved.ms, restore_server_ms=restored.ms, file_bytes=saved.bytes,
                           tokens_moved=restored.tokens)
                (folder / filename).unlink()
                row["migrated_ttft_s"], row["migrated_cached"] = await ttft(http, b, next_turn)
                await slots.erase(eb, 0)
                row["cold_ttft_s"], row["cold_cached"] = await ttft(http, b, next_turn)
                row["affinity_ttft_s"], row["affinity_cached"] = await ttft(http, a, next_turn)
                row["migrated_total_s"] = row["save_wall_s"] + row["restore_wall_s"] + row["migrated_ttft_s"]
                rounds.append(row)
                print(f"round {r + 1}/{args.rounds}: {row['history_tokens']} tokens of history; next-turn TTFT "
                      f"cold {row['cold_ttft_s']:.3f}s, migrated {row['migrated_ttft_s']:.3f}s (+ save "
                      f"{row['save_wall_s']:.3f}s + restore {row['restore_wall_s']:.3f}s), affinity "
                      f"{row['affinity_ttft_s']:.3f}s; cached {row['cold_cached']}/{row['migrated_cached']}/"
                      f"{row['affinity_cached']}", flush=True)
    finally:
        await pool.close()
        await a.stop()
        await b.stop()
        for leftover in folder.iterdir():
            leftover.unlink()
        folder.rmdir()
    keys = [k for k in rounds[0] if isinstance(rounds[0][k], (int, float))] if rounds else []
    med = {k: median([row[k] for row in rounds]) for k in keys}
    if rounds:
        move_s = med["save_wall_s"] + med["restore_wall_s"]
        med["migration_ms_per_token"] = round(1000 * move_s / med["tokens_moved"], 5)
        med["bytes_per_token"] = round(med["file_bytes"] / med["tokens_moved"])
        med["saved_s"] = round(med["cold_ttft_s"] - med["migrated_total_s"], 4)
    return {"bench": "kv-migration", "model": "SmolLM2-135M-Instruct Q4_1 (llama-server, CPU)",
            "threads": args.threads, "facts": args.facts, "rounds": len(rounds), "host": platform.node(),
            "cpu": platform.processor() or platform.machine(), "medians": med, "per_round": rounds}


def markdown(result: dict[str, Any]) -> str:
    m = result["medians"]
    return "\n".join([
        "# KV-cache migration between two llama-server instances (SmolLM2-135M, CPU)",
        "",
        (f"{result['rounds']} rounds, {m['history_tokens']:.0f} prompt tokens of history, "
         f"{result['threads']} thread(s) per server, medians."),
        "",
        "| next turn on | TTFT (s) | prompt tokens from cache |",
        "|---|---:|---:|",
        f"| B, cold (full prefill) | {m['cold_ttft_s']:.3f} | {m['cold_cached']:.0f} |",
        f"| B, after migration A -> B | {m['migrated_ttft_s']:.3f} | {m['migrated_cached']:.0f} |",
        f"| A, own cache (affinity) | {m['affinity_ttft_s']:.3f} | {m['affinity_cached']:.0f} |",
        "",
        (f"Migration: save {m['save_wall_s'] * 1000:.1f} ms (server {m['save_server_ms']:.1f} ms) + restore "
         f"{m['restore_wall_s'] * 1000:.1f} ms (server {m['restore_server_ms']:.1f} ms) for "
         f"{m['file_bytes'] / 1e6:.1f} MB ({m['bytes_per_token']:.0f} bytes/token); migrated total "
         f"{m['migrated_total_s']:.3f} s against {m['cold_ttft_s']:.3f} s cold."),
        "",
        (f"Prefill costs {m['prefill_ms_per_token']:.2f} ms/token here; moving the cache costs "
         f"{m['migration_ms_per_token']:.4f} ms/token (same host, the file in the page cache). Migration pays "
         "wherever prefill costs more per token than moving that token's KV bytes."),
        "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--facts", type=int, default=110, help="history lines (about 14 tokens each)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ctx", type=int, default=4096, help="context per slot")
    parser.add_argument("--max-seconds", type=float, default=600, help="no new round after this")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "kv-migration.json")
    parser.add_argument("--md", type=Path, default=ROOT / "bench" / "results" / "kv-migration.md")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    if not result["per_round"]:
        sys.exit("no round completed")
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    args.md.write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
