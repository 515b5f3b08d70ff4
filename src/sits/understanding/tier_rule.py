"""A first, simple rule for `model: "auto"`: short plain prompts go to the tiny tier.

The request-understanding issue replaces this with the intent classifier and the
dual-factor (load x complexity) tier selection; the contract stays: prompt in,
(tier, reason) out, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TIERS = ("tiny", "base", "heavy")

_CODE = re.compile(r"```|\bdef |\bclass |\bfunction\b|#include|\bSELECT\b|=>|;\s*$", re.MULTILINE)
_MATH = re.compile(r"\d+\s*[-+*/^=]\s*\d+|\\frac|\bintegral\b|\bderivative\b|\bprove\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class TierChoice:
    tier: str
    reason: str


def choose_tier(prompt: str, short_chars: int = 280, long_chars: int = 4000) -> TierChoice:
    if len(prompt) > long_chars:
        return TierChoice("heavy", f"long prompt ({len(prompt)} chars)")
    if _CODE.search(prompt):
        return TierChoice("base", "prompt contains code")
    if _MATH.search(prompt):
        return TierChoice("base", "prompt contains math")
    if prompt.count("?") > 1:
        return TierChoice("base", "several questions")
    if len(prompt) <= short_chars:
        return TierChoice("tiny", f"short simple prompt ({len(prompt)} chars)")
    return TierChoice("base", f"medium prompt ({len(prompt)} chars)")


def nearest_tiers(tier: str) -> list[str]:
    """`tier` first, then the others by distance, the larger one first on ties."""
    i = TIERS.index(tier)
    return sorted(TIERS, key=lambda t: (abs(TIERS.index(t) - i), -TIERS.index(t)))
