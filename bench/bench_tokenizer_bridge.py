"""Tokenizer bridge: coverage between real vocabularies, and how long the maps take to build.

    .venv/bin/python bench/bench_tokenizer_bridge.py [--gguf] [--rounds 3] [--json results/tokenizer-bridge.json]

Families: Llama-3, Qwen3 and DeepSeek-V3 from ../shared/data/tokenizers (tokenizer.json); with
`--gguf`, also the GGUF vocabularies of the embedded SmolLM2-135M and Gemma-3-270m.

- coverage(A -> B): the share of A's tokens that have an exact counterpart in B (the same
  normalised surface form: decoded bytes as NFC text, or the identical special token).
- build time per family, cold (parse the source, decode and hash every token, write the cache)
  and warm (read the map back from the disk cache), best of `--rounds`; the counter (the
  family's own tokenizer, loaded either way) is timed apart, and so is one exact count of a
  mixed-language sample (best of 5).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from sits.understanding.tokenizers.bridge import TokenBridge  # noqa: E402
from sits.understanding.tokenizers.catalog import TokenizerSource  # noqa: E402
from sits.understanding.tokenizers.counter import GgufTokenCounter, HfTokenCounter  # noqa: E402
from sits.understanding.tokenizers.family_map import FamilyMapCache  # noqa: E402
from sits.understanding.tokenizers.vocabulary import source_digest  # noqa: E402

TOKENIZERS = ROOT.parent / "shared" / "data" / "tokenizers"
SAMPLE = ("The quick brown fox jumps over the lazy dog. Der schnelle braune Fuchs. 敏捷的棕色狐狸跳过了懒狗。"
          "def f(x):\n    return x ** 2  # 1234567\n") * 50


def sources(with_gguf: bool) -> list[TokenizerSource]:
    found = [TokenizerSource(f, TOKENIZERS / f) for f in ("llama3", "qwen3", "deepseek_v3")]
    if with_gguf:
        from sits.backends.local.model_files import EMBEDDED_DEFAULT_MODELS, resolve_gguf

        data_dir = Path(tempfile.gettempdir()) / "sits-bench-models"
        found += [TokenizerSource(s.name, resolve_gguf(s, data_dir)) for s in EMBEDDED_DEFAULT_MODELS]
    return found


def timed(fn):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", action="store_true", help="add the embedded models' GGUF vocabularies")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    bridge = TokenBridge()
    timings = []
    for source in sources(args.gguf):
        digest = source_digest(source.path)
        cold, warm = [], []
        for _ in range(max(1, args.rounds)):
            with tempfile.TemporaryDirectory() as tmp:
                cache = FamilyMapCache(Path(tmp))
                (family_map, hit), seconds = timed(lambda: cache.load_or_build(source.family, digest,
                                                                               source.load_vocabulary))
                assert not hit
                cold.append(seconds)
                (again, hit), seconds = timed(lambda: cache.load_or_build(source.family, digest,
                                                                          source.load_vocabulary))
                assert hit and len(again) == len(family_map)
                warm.append(seconds)
        counter_cls = GgufTokenCounter if source.is_gguf else HfTokenCounter
        counter, counter_s = timed(lambda: counter_cls(source.family, source.path))
        runs = [timed(lambda: counter.count(SAMPLE)) for _ in range(5)]
        count, count_s = runs[0][0], min(seconds for _, seconds in runs)
        bridge.add(family_map)
        timings.append({"family": source.family, "tokens": len(family_map), "cold_s": min(cold),
                        "cached_s": min(warm), "counter_load_s": counter_s,
                        "count_us_per_kchar": count_s * 1e6 / (len(SAMPLE) / 1000), "sample_tokens": count})
    coverage = [{"source": c.source, "target": c.target, "tokens": c.tokens, "exact": c.exact,
                 "share": round(c.share, 4)} for c in bridge.coverage_table()]
    families = bridge.families()
    print("coverage: share of the row family's tokens with an exact counterpart in the column family\n")
    print("| from \\ to | " + " | ".join(families) + " |")
    print("|---" * (len(families) + 1) + "|")
    shares = {(c["source"], c["target"]): c["share"] for c in coverage}
    for a in families:
        print(f"| {a} | " + " | ".join("—" if a == b else f"{shares[a, b]:.1%}" for b in families) + " |")
    print("\n| family | tokens | map cold (s) | map from cache (s) | tokenizer load (s) | count (us / 1k chars) |")
    print("|---|---:|---:|---:|---:|---:|")
    for t in timings:
        print(f"| {t['family']} | {t['tokens']:,} | {t['cold_s']:.3f} | {t['cached_s']:.3f} | "
              f"{t['counter_load_s']:.3f} | {t['count_us_per_kchar']:.0f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"coverage": coverage, "timings": timings}, indent=2))


if __name__ == "__main__":
    main()
