"""The execute stage's one step: send a request to one endpoint and start the exchange.

The fallback chain calls this for every attempt; it records what the attempt tells the live stats and
the adaptive concurrency limits, and opens the attempt's span.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from sits.backends.openai_upstream import OpenAIUpstream
from sits.errors import UpstreamStatusError, UpstreamTimeout
from sits.pipeline.admission_step import Admission
from sits.pipeline.context import RoutingRequest
from sits.pipeline.exchange import Exchange
from sits.pipeline.scheduling_hints import SchedulingHints
from sits.state.endpoint_stats import StatsStore
from sits.state.routing_table import Endpoint
from sits.telemetry.tracing import end_span


class UpstreamSend:
    def __init__(self, backend: OpenAIUpstream, stats: StatsStore, admission: Admission | None,
                 clock: Callable[[], float]) -> None:
        self._backend = backend
        self._stats = stats
        self._admission = admission
        self._clock = clock
        self.hints: SchedulingHints | None = None  # token-level translation to another family (set at startup)

    async def send(self, endpoint: Endpoint, model: str, request: RoutingRequest, body: bytes) -> Exchange:
        if endpoint.upstream_model != request.model:
            body = _with_model(body, endpoint.upstream_model)
        if self.hints is not None and model != request.model:
            body = self.hints.translated(request.model, model, request.prompt_text, body)  # another family?
        stats = self._stats.get(endpoint.id)
        span, trace_headers = request.trace.attempt(request.api, endpoint.upstream_model, endpoint.host,
                                                     endpoint.port, endpoint.id, model)
        started = self._clock()
        stats.started()
        in_flight = stats.in_flight
        try:
            response = await self._backend.send(endpoint, request.api.encode(), body, request.request_id,
                                                 trace_headers)
        except BaseException as exc:
            now = self._clock()
            end_span(span, getattr(exc, "message", None) or type(exc).__name__)
            stats.finished(now - started, ok=False)
            if self._admission is not None and _is_load_signal(exc):
                self._admission.observe(endpoint.id, now - started, in_flight, True, now)
            raise
        now = self._clock()
        stats.first_token(now - started)  # time to response headers: the TTFT a gateway can see
        if self._admission is not None:
            self._admission.observe(endpoint.id, now - started, in_flight, False, now)
        exchange = Exchange(endpoint, model, "", response, stats, self._clock, started)
        exchange.span = span
        return exchange


def _with_model(body: bytes, model: str) -> bytes:
    """The client's body with only `model` replaced; every other field passes through as sent."""
    payload = orjson.loads(body)
    payload["model"] = model
    return orjson.dumps(payload)


def _is_load_signal(error: BaseException) -> bool:
    """Failures that say the endpoint is overloaded (what a concurrency limiter must back off from)."""
    return isinstance(error, UpstreamTimeout) or (
        isinstance(error, UpstreamStatusError) and error.upstream_status in (429, 503))
