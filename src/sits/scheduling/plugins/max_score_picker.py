from __future__ import annotations

import random
from collections.abc import Sequence

from sits.scheduling.types import EndpointView


class MaxScorePicker:
    """Best score first; ties broken by the seeded RNG so equal endpoints share load."""

    name = "max-score-picker"

    def pick(self, scores: Sequence[float], endpoints: Sequence[EndpointView], rng: random.Random) -> list[EndpointView]:
        keyed = sorted(zip(scores, [rng.random() for _ in endpoints], range(len(endpoints))), reverse=True)
        return [endpoints[i] for _, _, i in keyed]
