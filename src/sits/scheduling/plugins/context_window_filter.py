from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar

from sits.scheduling.plugins.filter_params import ContextWindowFilterParams
from sits.scheduling.types import EndpointView, SchedulingRequest


# The len/4 estimate decides alone where it is clearly over a window (by more than this share) or
# where even one token per character would fit; in between, if the model's tokenizer is known, the
# prompt is counted exactly (far dearer per KB than the estimate). len/4 is right for English prose but
# digits, code and CJK text take 2-4x the tokens, which the estimate alone would let through.
EXACT_COUNT_BAND = 0.2


class ContextWindowFilter:
    """Keeps endpoints whose context window holds the prompt plus the completion asked for."""

    name: ClassVar[str] = "context-window-filter"  # a class attribute in the compiled class too (docs/hot-path.md)
    Params: ClassVar[type[ContextWindowFilterParams]] = ContextWindowFilterParams

    def __init__(self, params: ContextWindowFilterParams | None = None) -> None:
        self._default_completion = (params or ContextWindowFilterParams()).default_completion_tokens

    def always_keeps_one(self, endpoint: EndpointView) -> bool:
        return endpoint.context_window is None  # no window declared: every request fits

    def filter(
        self, request: SchedulingRequest, endpoints: Sequence[EndpointView], rng: random.Random
    ) -> Sequence[EndpointView]:
        completion = request.max_tokens or self._default_completion
        need = request.prompt_tokens_estimate + completion
        most = 4 * request.prompt_tokens_estimate + 3 + completion  # about one token per character
        if request.count_prompt_tokens is not None and any(
            e.context_window is not None and need - EXACT_COUNT_BAND * e.context_window <= e.context_window < most
            for e in endpoints
        ):
            need = request.count_prompt_tokens() + completion  # the estimate is too close to call: count
        return [e for e in endpoints if e.context_window is None or e.context_window >= need]
