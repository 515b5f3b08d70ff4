from __future__ import annotations

import random

import pytest

from sits.understanding.complexity import ComplexityWeights, estimate_complexity

SIMPLE = "What is the capital of France?"
HARD = """First, read the code below. Then explain why it fails, and if it is a race, propose a fix.
```python
def worker(q):
    while True:
        item = q.get()
        if item is None: return
        process(item)
```
1. What happens when two workers call process() on shared state?
2. How would you prove the fix is correct? Solve 3x + 7 = 22 as a warm-up.
3. Finally, estimate the throughput if each item takes 2 * 15 ms?"""


def test_simple_prompt_scores_low_and_hard_prompt_high():
    assert estimate_complexity(SIMPLE).score < 0.2
    assert estimate_complexity(HARD).score > 0.5


@pytest.mark.parametrize("text", ["", " ", "?", "x" * 100_000, "（（（（((([[[{{{", "日本語のテキスト" * 50, "\x00\ufffd"])
def test_score_always_in_unit_interval(text):
    c = estimate_complexity(text)
    for v in (c.score, c.entropy, c.nesting, c.length, c.code, c.math, c.questions):
        assert 0.0 <= v <= 1.0


def test_random_texts_stay_in_range():
    rng = random.Random(7)
    alphabet = "abc xyz 123 ?？()[]{}```def =+-*/\n数学题"
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 400)))
        assert 0.0 <= estimate_complexity(text).score <= 1.0


@pytest.mark.parametrize(("signal", "text"), [
    ("code", "```python\ndef f(x):\n    return x\n```"),
    ("math", "Solve 2x + 3 = 9 and 4 * 5 = ?"),
    ("questions", "Who? What? When? Why?"),
])
def test_each_signal_fires(signal, text):
    assert getattr(estimate_complexity(text), signal) > 0


def test_longer_prompt_is_not_simpler():
    short = estimate_complexity("Explain photosynthesis.").score
    long = estimate_complexity("Explain photosynthesis in detail, covering light reactions. " * 30).score
    assert long > short


def test_weights_select_signals():
    only_code = ComplexityWeights(entropy=0, nesting=0, length=0, code=1, math=0, questions=0)
    assert estimate_complexity("plain words only", only_code).score == 0.0
    assert estimate_complexity("```\ndef f(): return 1\n```", only_code).score > 0.3
