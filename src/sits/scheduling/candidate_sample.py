"""A bounded candidate set for very large pools: power of d choices before the full pipeline.

Scoring every endpoint of a pool of thousands costs milliseconds in Python and sends every
request of one snapshot to the same "best" endpoint. Sampling `size` endpoints at random (the
seeded RNG) and running filters, scorers and picker over the sample keeps a decision O(d) and
spreads load (Mitzenmacher's power of d choices; llm-d and Envoy sample the same way).

A scorer may name endpoints it must see (`pinned(request, endpoints) -> indices`): the
prefix-affinity scorer pins the prefix's ring owner so affine requests still reach it. If the
sample passes no filter strictly, the profile runs again over the whole pool (the fallback).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from sits.scheduling.types import EndpointView, SchedulingRequest


@dataclass(frozen=True, slots=True)
class CandidateSample:
    above: int  # pools with more endpoints than this are sampled
    size: int  # d: endpoints drawn at random (plus any a scorer pins)

    def draw(self, request: SchedulingRequest, endpoints: Sequence[EndpointView], rng: random.Random,
             scorers: Sequence) -> list[EndpointView]:
        """`size` endpoints drawn without replacement plus the pinned ones, in pool order."""
        chosen = set(rng.sample(range(len(endpoints)), min(self.size, len(endpoints))))
        for ws in scorers:
            pinned = getattr(ws.scorer, "pinned", None)
            if pinned is not None:
                chosen.update(pinned(request, endpoints))
        return [endpoints[i] for i in sorted(chosen)]
