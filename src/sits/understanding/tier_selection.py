"""Dual-factor tier selection for `model: "auto"`: complexity says which tier a request needs; load may
only move it to a lighter tier, and only when the needed tier is saturated.

    score = a * (1 - excess) + b * complexity        a = load_weight, b = complexity_weight, a + b = 1
    tier  = tiny if score < tiny_below, base if score < heavy_from, else heavy

`excess` in [0, 1] is how far the needed tier's own in-flight fraction is past `saturated_at`
(0 below it, 1 when the tier is full). An idle gateway scores a + b * complexity, so the needed tier
is the complexity's alone; a saturated needed tier lowers the score by up to `a`, which can only move
the request down, by one tier at most, and never onto a tier that is saturated itself. Domains marked quality-critical are
never demoted. The default cut-offs are calibrated on labelled prompts (docs/understanding.md).
Pure and synchronous: the tiers' loads come in as a function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sits.understanding.tier_rule import TIERS, TierChoice

# bench/calibrate_tiers.py on the shared labelled prompts (bench/results/auto-tier-calibration.md)
DEFAULT_TINY_BELOW = 0.48
DEFAULT_HEAVY_FROM = 0.495


@dataclass(frozen=True, slots=True)
class TierParams:
    """a + b must be 1 so the score stays in [0, 1]; tiny_below <= heavy_from."""

    load_weight: float = 0.4
    complexity_weight: float = 0.6
    tiny_below: float = DEFAULT_TINY_BELOW
    heavy_from: float = DEFAULT_HEAVY_FROM
    saturated_at: float = 0.8  # in-flight fraction of a tier's capacity from which it counts as saturated

    def __post_init__(self) -> None:
        if abs(self.load_weight + self.complexity_weight - 1.0) > 1e-9:
            raise ValueError(f"load_weight + complexity_weight must be 1, got "
                             f"{self.load_weight} + {self.complexity_weight}")
        if min(self.load_weight, self.complexity_weight) < 0:
            raise ValueError("tier weights must not be negative")
        if not 0.0 <= self.tiny_below <= self.heavy_from <= 1.0:
            raise ValueError(f"need 0 <= tiny_below <= heavy_from <= 1, got {self.tiny_below}, {self.heavy_from}")
        if not 0.0 <= self.saturated_at < 1.0:
            raise ValueError(f"need 0 <= saturated_at < 1, got {self.saturated_at}")


def _idle(tier: str) -> float:
    return 0.0


@dataclass(frozen=True, slots=True)
class DualFactorTierHandler:
    params: TierParams = TierParams()

    def score(self, complexity: float, excess: float = 0.0) -> float:
        p = self.params
        return p.load_weight * (1.0 - _unit(excess)) + p.complexity_weight * _unit(complexity)

    def excess(self, load: float) -> float:
        """How far an in-flight fraction is past saturation, in [0, 1]."""
        at = self.params.saturated_at
        return max(0.0, _unit(load) - at) / (1.0 - at)

    def tier_of(self, score: float) -> str:
        p = self.params
        return TIERS[0] if score < p.tiny_below else TIERS[1] if score < p.heavy_from else TIERS[2]

    def choose(self, complexity: float, load_of: Callable[[str], float] = _idle,
               quality_critical: bool = False) -> TierChoice:
        """The tier for a request of this complexity, given each tier's in-flight fraction."""
        p = self.params
        idle_score = self.score(complexity)
        needed = self.tier_of(idle_score)
        why = (f"needs {needed}: score {idle_score:.2f} = {p.load_weight:g}*headroom + "
               f"{p.complexity_weight:g}*complexity {_unit(complexity):.2f}")
        if quality_critical:
            return TierChoice(needed, f"{why}; quality-critical, never demoted")
        load = load_of(needed)
        excess = self.excess(load)
        if excess == 0.0 or needed == TIERS[0]:
            return TierChoice(needed, why)
        score = self.score(complexity, excess)
        # one tier down at most, and never onto a tier that is saturated itself
        lower = TIERS[max(TIERS.index(self.tier_of(score)), TIERS.index(needed) - 1)]
        if lower != needed and self.excess(load_of(lower)) > 0.0:
            return TierChoice(needed, f"{why}; {needed} in-flight {_unit(load):.2f} saturated, no lighter tier free")
        if lower == needed:
            return TierChoice(needed, f"{why}; {needed} in-flight {_unit(load):.2f} saturated: score {score:.2f}, "
                                      f"stays")
        return TierChoice(lower, f"{why}; {needed} in-flight {_unit(load):.2f} saturated: score {score:.2f}, "
                                 f"demoted to {lower}")


def _unit(x: float) -> float:
    return 0.0 if x != x else min(1.0, max(0.0, x))
