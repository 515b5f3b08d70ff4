"""What the embedded worker's deterministic prefix reuse costs and saves.

llama-cpp-python reuses the previous generation's cached prefix and evaluates the rest of the prompt
in whatever batch that leaves; on the CPU backend a token's logits depend on how its batch was cut, so
a repeated greedy request answered differently. The engine (src/sits/backends/local/engine.py,
`LlamaEngine._prefill`) cuts every prompt at the same positions and reuses only whole chunks of an
earlier prompt. This measures time to the first token of the next turn of a growing conversation three
ways: SITS's aligned chunks, an empty cache each time (the simple fix it was chosen over), and
llama-cpp-python's unbounded reuse (the old behaviour, not deterministic); embedded SmolLM2, one thread.

    python bench/bench_local_prefix_reuse.py --turns 6 --rounds 3
    # writes bench/results/local-prefix-reuse.{json,md}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from contextlib import aclosing
from pathlib import Path
from unittest import mock

from sits.backends.local.engine import LlamaEngine, TextDelta
from sits.backends.local.model_files import EMBEDDED_DEFAULT_MODELS, resolve_gguf
from sits.backends.local.protocol import ChatMessage, GenerationJob, SamplingParams

HERE = Path(__file__).resolve().parent
TOPICS = ("the history of the printing press", "how tides work", "why the sky is blue", "how vaccines train the "
          "immune system", "the rules of chess", "how a bicycle stays upright", "what a compiler does")


async def first_token_s(engine: LlamaEngine, messages: list[ChatMessage], max_tokens: int) -> tuple[float, str]:
    job = GenerationJob(tuple(messages), None, SamplingParams(max_tokens, 0.0, 1.0, 0.0, 0.0, (), None))
    started, first, text = time.perf_counter(), None, []
    async with aclosing(engine.generate(job)) as events:
        async for event in events:
            if isinstance(event, TextDelta):
                first = first if first is not None else time.perf_counter() - started
                text.append(event.text)
    return (first if first is not None else time.perf_counter() - started), "".join(text)


async def conversation(engine: LlamaEngine, turns: int, max_tokens: int) -> list[tuple[int, float]]:
    """(approximate prompt characters, time to first token) for each turn of one conversation."""
    messages: list[ChatMessage] = []
    out = []
    for turn in range(turns):
        messages.append(ChatMessage("user", f"Explain {TOPICS[turn % len(TOPICS)]} in detail."))
        ttft, answer = await first_token_s(engine, messages, max_tokens)
        out.append((sum(len(m.content) for m in messages), ttft))
        messages.append(ChatMessage("assistant", answer))
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "local-prefix-reuse")
    args = ap.parse_args()
    spec = EMBEDDED_DEFAULT_MODELS[0]
    path = resolve_gguf(spec, Path(tempfile.mkdtemp(prefix="sits-bench-")))
    engine = LlamaEngine(path, prompt_format=spec.prompt_format, n_ctx=4096, n_threads=1)
    await engine.load()
    aligned = LlamaEngine._prefill

    def empty_cache(self: LlamaEngine, llama: object, tokens: list[int]) -> None:
        self._reusable = 0  # nothing counts as cached: the whole prompt, chunk by chunk
        aligned(self, llama, tokens)  # type: ignore[arg-type]

    modes = {"aligned chunks (SITS)": aligned, "empty cache": empty_cache,
             "unbounded reuse": lambda self, llama, tokens: None}
    results: dict[str, list[list[tuple[int, float]]]] = {mode: [] for mode in modes}
    for r in range(args.rounds):
        for mode, before_each in modes.items():
            print(f"round {r + 1}/{args.rounds}: {mode}", file=sys.stderr, flush=True)
            with mock.patch.object(LlamaEngine, "_prefill", before_each):
                results[mode].append(await conversation(engine, args.turns, args.max_tokens))
    await engine.close()
    rows = []
    for turn in range(args.turns):
        chars = statistics.median(run[turn][0] for run in results["empty cache"])
        med = {mode: statistics.median(run[turn][1] for run in runs) * 1000 for mode, runs in results.items()}
        rows.append({"turn": turn + 1, "prompt_chars": chars, **{f"{m} ttft_ms": round(v, 1) for m, v in med.items()}})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"args": vars(args) | {"out": str(args.out)},
                                                         "rows": rows}, indent=2))
    lines = ["| turn | conversation chars | " + " | ".join(f"TTFT, {m} (ms)" for m in modes) + " |",
             "|---:|---:|" + "---:|" * len(modes)]
    lines += [f"| {r['turn']} | {r['prompt_chars']:.0f} | " + " | ".join(str(r[f"{m} ttft_ms"]) for m in modes) + " |"
              for r in rows]
    args.out.with_suffix(".md").write_text(
        f"SmolLM2-135M (embedded worker engine), 1 thread, greedy, {args.max_tokens} tokens a turn, "
        f"median of {args.rounds} conversations.\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    asyncio.run(main())
