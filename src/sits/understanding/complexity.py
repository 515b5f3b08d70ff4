"""Complexity estimator: how hard a prompt looks, as one score in [0, 1].

Combines token entropy, instruction nesting depth, length, and the presence of code,
math or several questions. Each signal is squashed to [0, 1] and the weighted mean is
the score, so the score is monotone in every signal and never leaves [0, 1].
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from sits.understanding import text_signals as sig


@dataclass(frozen=True, slots=True)
class ComplexityWeights:
    """Relative weights of the signals; they need not sum to 1 (the score divides by their sum)."""

    entropy: float = 0.15
    nesting: float = 0.15
    length: float = 0.25
    code: float = 0.15
    math: float = 0.15
    questions: float = 0.15


@dataclass(frozen=True, slots=True)
class Complexity:
    score: float
    entropy: float
    nesting: float
    length: float
    code: float
    math: float
    questions: float

    def describe(self) -> str:
        parts = [f"{n}={getattr(self, n):.2f}" for n in ("length", "entropy", "nesting", "code", "math", "questions")]
        return f"complexity {self.score:.2f} ({', '.join(parts)})"


# Squashing scales, chosen so a one-line chat question scores near 0 and a
# multi-page, multi-part technical request near 1.
_LENGTH_TOKENS_HALF = 250  # tokens at which the length signal reaches 0.5
_ENTROPY_LOW, _ENTROPY_HIGH = 2.5, 8.0  # bits per token: repetitive text .. rich vocabulary


def estimate_complexity(text: str, weights: ComplexityWeights = ComplexityWeights()) -> Complexity:
    toks = sig.tokens(text)
    n = len(toks)
    length = n / (n + _LENGTH_TOKENS_HALF)
    entropy = _clamp((_entropy_bits(toks) - _ENTROPY_LOW) / (_ENTROPY_HIGH - _ENTROPY_LOW)) if n else 0.0
    # Short texts have low entropy by construction; do not let that signal dominate them.
    entropy *= min(1.0, n / 40)
    steps = len(sig.LIST_ITEM.findall(text)) + len(sig.CONNECTIVE.findall(text))
    nesting = _clamp((sig.bracket_depth(text) + steps) / 8)
    code_hits = len(sig.CODE.findall(text))
    code = _clamp(code_hits / 3)
    math_hits = len(sig.MATH.findall(text))
    math_ = _clamp(math_hits / 3)
    questions = _clamp((len(sig.QUESTION.findall(text)) - 1) / 3)
    w = weights
    total = w.entropy + w.nesting + w.length + w.code + w.math + w.questions
    score = (w.entropy * entropy + w.nesting * nesting + w.length * length + w.code * code
             + w.math * math_ + w.questions * questions) / total if total > 0 else 0.0
    return Complexity(_clamp(score), entropy, nesting, length, code, math_, questions)


def _entropy_bits(toks: list[str]) -> float:
    counts = Counter(toks)
    n = len(toks)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _clamp(x: float) -> float:
    return 0.0 if x != x else min(1.0, max(0.0, x))
