"""The execute stage's one step: send a request to one endpoint and start the exchange.

The fallback chain calls this for every attempt; it records what the attempt tells the live stats and
the adaptive concurrency limits, and opens the attempt's span. A `/v1/responses` request goes to an
endpoint that declares `api: responses` as the client's Responses body (`RoutingRequest.passthrough`),
to any other endpoint as its chat translation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import orjson

from sits.backends.upstream_response import UpstreamBody
from sits.errors import NotFound, UpstreamStatusError, UpstreamTimeout
from sits.pipeline.admission_step import Admission
from sits.pipeline.context import Passthrough, RoutingRequest
from sits.pipeline.exchange import Exchange
from sits.pipeline.scheduling_hints import SchedulingHints
from sits.state.endpoint_stats import StatsStore
from sits.state.routing_table import Endpoint
from sits.telemetry.tracing import end_span

RESPONSES_API = "/responses"


class Upstream(Protocol):
    """What sends one request to one endpoint (backends/openai_upstream.py: `OpenAIUpstream`)."""

    async def send(self, endpoint: Endpoint, api_path: bytes, body: bytes, request_id: str,
                   trace_headers: bytes = b"") -> UpstreamBody: ...


class UpstreamSend:
    def __init__(self, backend: Upstream, stats: StatsStore, admission: Admission | None,
                 clock: Callable[[], float]) -> None:
        self._backend = backend
        self._stats = stats
        self._admission = admission
        self._clock = clock
        self.hints: SchedulingHints | None = None  # token-level translation to another family (set at startup)

    async def send(self, endpoint: Endpoint, model: str, request: RoutingRequest, body: bytes) -> Exchange:
        api = request.api
        passed = request.passthrough is not None and _passes_through(endpoint, request.passthrough)
        if passed:
            api, body = RESPONSES_API, request.passthrough.body  # type: ignore[union-attr]
        if endpoint.upstream_model != request.model:
            body = _with_model(body, endpoint.upstream_model)
        if self.hints is not None and model != request.model and not passed:
            body = self.hints.translated(request.model, model, request.prompt_text, body)  # another family?
        stats = self._stats.get(endpoint.id)
        span, trace_headers = request.trace.attempt(api, endpoint.upstream_model, endpoint.host,
                                                     endpoint.port, endpoint.id, model)
        started = self._clock()
        stats.started()
        in_flight = stats.in_flight
        try:
            response = await self._backend.send(endpoint, api.encode(), body, request.request_id,
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
        exchange.reader_checks = request.translated  # its stream's reader checks it (a translator, or the tap)
        return exchange


def _passes_through(endpoint: Endpoint, passthrough: Passthrough) -> bool:
    """Whether the Responses body goes to `endpoint`; 404 naming `previous_response_id` when only such an
    endpoint could continue the conversation (SITS does not know that response) and this one cannot."""
    if endpoint.api == "responses":
        return True
    if passthrough.unknown_previous is not None:
        raise NotFound(f"Response with id '{passthrough.unknown_previous}' not found (it was not stored, was "
                       f"deleted, or expired), and endpoint {endpoint.id} does not speak the Responses API to "
                       f"continue it itself", param="previous_response_id")
    return False


def _with_model(body: bytes, model: str) -> bytes:
    """The client's body with only `model` replaced; every other field passes through as sent."""
    payload = orjson.loads(body)
    payload["model"] = model
    return orjson.dumps(payload)


def _is_load_signal(error: BaseException) -> bool:
    """Failures that say the endpoint is overloaded (what a concurrency limiter must back off from)."""
    return isinstance(error, UpstreamTimeout) or (
        isinstance(error, UpstreamStatusError) and error.upstream_status in (429, 503))
