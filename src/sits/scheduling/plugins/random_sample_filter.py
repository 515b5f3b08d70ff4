from __future__ import annotations

import random
from collections.abc import Sequence

from typing import Annotated, ClassVar

from pydantic import Field

from sits.scheduling.params import PluginParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class RandomSampleFilterParams(PluginParams):
    size: Annotated[int, Field(ge=1)] = 2


class RandomSampleFilter:
    """Keeps `size` endpoints drawn at random: power of d choices (d = 2 is P2C).

    Scoring d random endpoints instead of all keeps the decision O(d) and avoids the herd
    effect of everyone picking the one global best on a stale snapshot.
    """

    name: ClassVar[str] = "random-sample-filter"  # a class attribute in the compiled class too (docs/hot-path.md)
    Params: ClassVar[type[RandomSampleFilterParams]] = RandomSampleFilterParams

    def __init__(self, params: RandomSampleFilterParams | None = None) -> None:
        self._size = (params or RandomSampleFilterParams()).size

    def filter(
        self, request: SchedulingRequest, endpoints: Sequence[EndpointView], rng: random.Random
    ) -> Sequence[EndpointView]:
        n = len(endpoints)
        if n <= self._size:
            return endpoints
        return [endpoints[i] for i in sorted(rng.sample(range(n), self._size))]
