from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import ClassVar

from sits.scheduling.params import NoParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class ModelMatchFilter:
    """Keeps endpoints that serve the requested model (the director resolves aliases first); a request
    for no model (`auto` scheduling a tier's models together) keeps every endpoint."""

    name: ClassVar[str] = "model-match-filter"  # a class attribute in the compiled class too (docs/hot-path.md)
    Params: ClassVar[type[NoParams]] = NoParams

    def __init__(self, params: NoParams | None = None) -> None:
        pass

    def keeps(self, request: SchedulingRequest) -> Callable[[EndpointView], bool] | None:
        model = request.model
        if not model:
            return None
        return lambda e: e.model == model

    def always_keeps_one(self, endpoint: EndpointView) -> bool:
        return True  # a model's own endpoint serves every request for that model

    def filter(
        self, request: SchedulingRequest, endpoints: Sequence[EndpointView], rng: random.Random
    ) -> Sequence[EndpointView]:
        model = request.model
        if not model:
            return endpoints
        return [e for e in endpoints if e.model == model]
