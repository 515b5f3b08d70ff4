"""Dual-factor tier selection: score = a * load + b * complexity, cut into tiny / base / heavy.

`load` is in [0, 1]: how busy the smaller tiers are (e.g. the in-flight fraction of
the tiny tier's capacity), so a saturated small tier pushes work up a tier, and
`complexity` is the estimator's score. Pure and synchronous: the director calls it
as its profile handler, choosing the tier whose profile then schedules the request.
"""

from __future__ import annotations

from dataclasses import dataclass

from sits.understanding.tier_rule import TIERS, TierChoice


@dataclass(frozen=True, slots=True)
class TierParams:
    """a + b must be 1 so the score stays in [0, 1]; tiny_below < heavy_from."""

    load_weight: float = 0.4
    complexity_weight: float = 0.6
    tiny_below: float = 0.3
    heavy_from: float = 0.7

    def __post_init__(self) -> None:
        if abs(self.load_weight + self.complexity_weight - 1.0) > 1e-9:
            raise ValueError(f"load_weight + complexity_weight must be 1, got "
                             f"{self.load_weight} + {self.complexity_weight}")
        if min(self.load_weight, self.complexity_weight) < 0:
            raise ValueError("tier weights must not be negative")
        if not 0.0 <= self.tiny_below <= self.heavy_from <= 1.0:
            raise ValueError(f"need 0 <= tiny_below <= heavy_from <= 1, got {self.tiny_below}, {self.heavy_from}")


@dataclass(frozen=True, slots=True)
class DualFactorTierHandler:
    params: TierParams = TierParams()

    def score(self, load: float, complexity: float) -> float:
        p = self.params
        return p.load_weight * _unit(load) + p.complexity_weight * _unit(complexity)

    def choose(self, load: float, complexity: float) -> TierChoice:
        s = self.score(load, complexity)
        p = self.params
        tier = TIERS[0] if s < p.tiny_below else TIERS[1] if s < p.heavy_from else TIERS[2]
        return TierChoice(tier, f"tier score {s:.2f} = {p.load_weight:g}*load {_unit(load):.2f} + "
                                f"{p.complexity_weight:g}*complexity {_unit(complexity):.2f}")


def _unit(x: float) -> float:
    return 0.0 if x != x else min(1.0, max(0.0, x))
