"""The values scheduling works on: a request's needs and per-request endpoint views."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SchedulingRequest:
    model: str
    api: str
    stream: bool
    prompt_tokens_estimate: int = 0


@dataclass(frozen=True, slots=True)
class EndpointView:
    """A frozen per-request view of one endpoint: identity plus the live signals that matter."""

    id: str
    model: str
    weight: float
    healthy: bool
    in_flight: int
    latency_ewma_s: float
