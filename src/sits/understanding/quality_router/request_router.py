"""A trained router at request time: per-model utilities for a prompt's embedding.

utility(m) = predicted quality(m) - cost_weight * mean cost(m), or, with a quality
target, the cheapest model predicted to reach it. `scores` gives every candidate a
[0, 1] score (min-max of utilities) so the scheduler can use it as a scorer; `choose`
is the profile-handler form: one model and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sits.understanding.quality_router.artifact import TrainedRouter


@dataclass(frozen=True, slots=True)
class RouterChoice:
    model: str
    predicted_quality: float
    reason: str
    scores: tuple[tuple[str, float], ...]  # candidate -> [0, 1], best first


@dataclass(frozen=True)
class QualityRouting:
    router: TrainedRouter
    cost_weight: float = 0.0
    quality_target: float | None = None

    @property
    def embedder(self) -> str:
        return self.router.embedder

    def choose(self, vector: np.ndarray, candidates: Sequence[str] = ()) -> RouterChoice | None:
        """None when no candidate is a model the router knows."""
        known = [m for m in (candidates or self.router.models) if m in self.router.models]
        if not known:
            return None
        cols = [self.router.models.index(m) for m in known]
        quality = self.router.predict(vector)[0, cols]
        costs = np.array([self.router.mean_costs[c] for c in cols]) if self.router.mean_costs else np.zeros(len(cols))
        if self.quality_target is not None:
            reaching = [i for i in range(len(cols)) if quality[i] >= self.quality_target]
            pick = min(reaching, key=lambda i: costs[i]) if reaching else int(quality.argmax())
            utility = np.where(quality >= self.quality_target, 1.0 - costs / max(costs.max(), 1e-12), quality - 1.0)
            why = (f"cheapest predicted to reach {self.quality_target:.2f}" if reaching
                   else f"none predicted to reach {self.quality_target:.2f}: best predicted")
        else:
            utility = quality - self.cost_weight * costs
            pick = int(utility.argmax())
            why = f"max quality - {self.cost_weight:g} * cost"
        span = float(utility.max() - utility.min())
        norm = (utility - utility.min()) / span if span > 0 else np.ones_like(utility)
        ranked = sorted(zip(known, (float(x) for x in norm)), key=lambda kv: -kv[1])
        return RouterChoice(known[pick], float(quality[pick]),
                            f"router: {why}; {known[pick]} predicted {quality[pick]:.2f}", tuple(ranked))
