"""Does an embedded model's answer depend on what the engine computed before? Two checks, on both
embedded models (one thread):

1. Logits by batch cut: each prompt evaluated whole, then as a prefix plus its last k tokens
   (k = 1..8); how many cuts give bit-identical logits for the next token, and the top two tokens of
   the whole prompt against the last-token-alone cut. This is why llama-cpp-python's own prefix reuse
   (which can evaluate a cached prompt's last token alone) made repeated greedy requests differ.
2. The engine as shipped (`LlamaEngine`, aligned prompt chunks): greedy answers to single- and
   multi-turn requests in shuffled orders, against a fresh engine per request.

    python bench/check_local_determinism.py          # prints both; about a minute on 2 cores
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
from pathlib import Path

import numpy as np

from sits.backends.local.engine import LlamaEngine, TextDelta
from sits.backends.local.model_files import EMBEDDED_DEFAULT_MODELS, resolve_gguf
from sits.backends.local.protocol import ChatMessage, GenerationJob, SamplingParams

PROMPTS = ("Name a color.", "What is 17 times 23? Think step by step.", "Write a haiku about the sea.",
           "Translate 'good morning' into French, German and Spanish.", "def fib(n):\n    # complete this function")
FACTS = "Here is some background. " + " ".join(f"Fact {i}: the value of item {i} is {i * 7 % 13}." for i in range(30))
REQUESTS = (
    (("user", "Name a color."),),
    (("user", "Name a fruit."),),
    (("user", FACTS + " Which item has value 5?"),),
    (("user", FACTS + " Which item has value 3?"),),
    (("user", FACTS + " Which item has value 5?"), ("assistant", "Item 10 has value 5."), ("user", "And value 2?")),
    (("user", "Write a haiku about the sea."),),
)


def logits_by_cut(path: Path, chat: bool) -> None:
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), n_ctx=2048, n_threads=1, verbose=False)

    def evaluate(*parts: list[int]) -> np.ndarray:
        llm.reset()
        llm._ctx.kv_cache_clear()
        for part in parts:
            llm.eval(part)
        return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),)).copy()

    formatter = None
    if chat:  # the chat template as the engine applies it (system prompt included)
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        formatter = Jinja2ChatFormatter(template=llm.metadata["tokenizer.chat_template"],
                                        eos_token=llm.detokenize([llm.token_eos()], special=True).decode(),
                                        bos_token=llm.detokenize([llm.token_bos()], special=True).decode())
    same = cuts = 0
    for prompt in PROMPTS:
        if formatter is not None:
            formatted = formatter(messages=[{"role": "user", "content": prompt}])
            tokens = llm.tokenize(formatted.prompt.encode(), add_bos=not formatted.added_special, special=True)
        else:
            tokens = llm.tokenize(prompt.encode(), add_bos=True, special=True)
        whole = evaluate(tokens)
        for k in range(1, min(9, len(tokens))):
            cut = evaluate(tokens[:-k], tokens[-k:])
            cuts += 1
            same += bool(np.array_equal(cut, whole))
            if k == 1 and prompt == PROMPTS[0]:
                def top(logits: np.ndarray) -> str:
                    best = np.argsort(-logits)[:2]
                    return ", ".join(f"{llm.detokenize([int(t)]).decode()!r} {logits[t]:.2f}" for t in best)
                print(f"  {prompt!r}: whole prompt: {top(whole)}; last token alone: {top(cut)}")
    print(f"  bit-identical next-token logits: {same} of {cuts} cuts")


async def shuffled_histories(path: Path, prompt_format: str, rounds: int, seed: int) -> None:
    async def ask(engine: LlamaEngine, turns: tuple[tuple[str, str], ...]) -> str:
        job = GenerationJob(tuple(ChatMessage(r, c) for r, c in turns), None,
                            SamplingParams(10, 0.0, 1.0, 0.0, 0.0, (), None))
        return "".join([e.text async for e in engine.generate(job) if isinstance(e, TextDelta)])

    async def new_engine() -> LlamaEngine:
        engine = LlamaEngine(path, prompt_format=prompt_format, n_ctx=2048, n_threads=1)  # type: ignore[arg-type]
        await engine.load()
        return engine

    fresh = {}
    for i, turns in enumerate(REQUESTS):
        engine = await new_engine()
        fresh[i] = await ask(engine, turns)
        await engine.close()
    engine, rng, mismatches, asked = await new_engine(), random.Random(seed), 0, 0
    for _ in range(rounds):
        for i in [rng.randrange(len(REQUESTS)) for _ in range(12)]:
            answer = await ask(engine, REQUESTS[i])
            asked += 1
            mismatches += answer != fresh[i]
    await engine.close()
    print(f"  answers differing from a fresh engine's: {mismatches} of {asked}")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="sits-bench-"))
    for spec in EMBEDDED_DEFAULT_MODELS:
        path = resolve_gguf(spec, data)
        print(f"{spec.name}: logits by batch cut", flush=True)
        logits_by_cut(path, chat=spec.prompt_format == "chat-template")
        print(f"{spec.name}: the engine, {args.rounds} x 12 requests in shuffled orders", flush=True)
        await shuffled_histories(path, spec.prompt_format, args.rounds, args.seed)


if __name__ == "__main__":
    asyncio.run(main())
