"""Trace sampling: parent-based trace-id ratio, set per environment, changeable at runtime.

`parentbased_traceidratio` as the OTel spec names it: a request that arrives with a sampled
`traceparent` is traced whatever the ratio, so a caller's trace is never cut in half. While the
export guard reports degraded, only key spans are sampled (see export_guard.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, Sampler, SamplingResult, TraceIdRatioBased
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

ENVIRONMENT_RATIOS = {"poc": 1.0, "canary": 0.1, "production": 0.01}
STAGE_SPAN_PREFIX = "sits."  # per-stage spans; everything else (server span, upstream attempts) is key

_DROP = SamplingResult(Decision.DROP)


class AdjustableSampler(Sampler):
    def __init__(self, ratio: float, degraded: Callable[[], bool]) -> None:
        self._degraded = degraded
        self.ratio = ratio

    @property
    def ratio(self) -> float:
        return self._ratio

    @ratio.setter
    def ratio(self, value: float) -> None:
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"sampling ratio must be in [0, 1], got {value}")
        self._ratio = value
        self._inner = ParentBased(TraceIdRatioBased(value))  # one swap: readers see old or new, never half

    def should_sample(self, parent_context: Context | None, trace_id: int, name: str,
                      kind: SpanKind | None = None, attributes: Attributes = None,
                      links: Sequence[Link] | None = None, trace_state: TraceState | None = None) -> SamplingResult:
        if name.startswith(STAGE_SPAN_PREFIX) and self._degraded():
            return _DROP
        return self._inner.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return f"AdjustableSampler(parentbased_traceidratio={self._ratio})"
