from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import Field

from sits.scheduling.params import PluginParams
from sits.scheduling.types import EndpointView, SchedulingRequest


class ContextWindowFilterParams(PluginParams):
    # completion tokens to reserve when the request gives no max_tokens
    default_completion_tokens: int = Field(default=0, ge=0)


class ContextWindowFilter:
    """Keeps endpoints whose context window holds the prompt plus the completion asked for."""

    name = "context-window-filter"
    Params = ContextWindowFilterParams

    def __init__(self, params: ContextWindowFilterParams | None = None) -> None:
        self._default_completion = (params or ContextWindowFilterParams()).default_completion_tokens

    def filter(
        self, request: SchedulingRequest, endpoints: Sequence[EndpointView], rng: random.Random
    ) -> Sequence[EndpointView]:
        need = request.prompt_tokens_estimate + (request.max_tokens or self._default_completion)
        return [e for e in endpoints if e.context_window is None or e.context_window >= need]
