"""OpenTelemetry tracing for one gateway: its own TracerProvider (never the global one), W3C
trace context and baggage in from clients and out to upstreams, and spans named by stage.

Off unless an OTLP endpoint is configured; then requests that are not sampled still carry the
caller's trace id to the upstream, and cost one sampler call. Every request has a trace object: with
tracing off it is `NO_TRACE`, whose operations do nothing, so no stage asks whether tracing is on; a
stage that would build span attributes first looks at `trace.recording`. Span shapes:

    POST /v1/chat/completions   (SERVER, key)      the whole request at the gateway
    ├── sits.classify / sits.admit / sits.schedule  stages (dropped first when export degrades)
    ├── chat <upstream model>   (CLIENT, key)      one per upstream attempt, GenAI attributes
    └── sits.fallback           last-resort answers (semantic cache, static template)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sits.telemetry.export_guard import BoundedSpanProcessor, ExportGuard, GuardPolicy
from sits.telemetry.sampling import ENVIRONMENT_RATIOS, STAGE_SPAN_PREFIX, AdjustableSampler

_PROPAGATOR = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
_OPERATIONS = {"/chat/completions": "chat", "/completions": "text_completion", "/embeddings": "embeddings"}


@dataclass(frozen=True, slots=True)
class TracingSettings:
    endpoint: str | None = None  # OTLP/HTTP base URL (".../v1/traces" is added) or None: tracing off
    environment: str = "poc"
    ratio: float | None = None  # None: the environment's ratio
    service_name: str = "sits"
    export_timeout_s: float = 2.0
    schedule_delay_s: float = 1.0

    @property
    def effective_ratio(self) -> float:
        return self.ratio if self.ratio is not None else ENVIRONMENT_RATIOS[self.environment]


def operation_of(api: str) -> str:
    return _OPERATIONS.get(api, api.strip("/"))


class RequestTrace:
    """One request's spans. `context` carries the server span plus the caller's baggage."""

    __slots__ = ("_tracer", "root", "context", "recording", "_baggage")

    def __init__(self, tracer: trace.Tracer, root: Span, context: Context, baggage: str | None = None) -> None:
        self._tracer = tracer
        self.root = root
        self.context = context
        self.recording = root.is_recording()
        self._baggage = f"baggage: {baggage}\r\n".encode("latin-1", "replace") if baggage else b""

    def stage(self, name: str, attributes: Mapping[str, Any] | None = None) -> Span | None:
        """A per-stage span (`sits.<name>`), or None when this request is not being recorded."""
        if not self.recording:
            return None
        return self._tracer.start_span(STAGE_SPAN_PREFIX + name, context=self.context, attributes=attributes)

    def within(self, span: Span | None) -> RequestTrace:
        """This request's trace with `span` as the parent of what follows (e.g. a workflow step's calls)."""
        if span is None:
            return self
        child = RequestTrace(self._tracer, self.root, trace.set_span_in_context(span, self.context))
        child._baggage = self._baggage
        return child

    def attempt(self, api: str, upstream_model: str, host: str, port: int | None, endpoint: str,
                model: str) -> tuple[Span | None, bytes]:
        """A CLIENT span for one upstream attempt, and the header lines that carry it upstream."""
        if self.recording:
            operation = operation_of(api)
            span = self._tracer.start_span(f"{operation} {upstream_model}", context=self.context,
                                           kind=SpanKind.CLIENT, attributes={
                                               "gen_ai.operation.name": operation, "gen_ai.provider.name": "openai",
                                               "gen_ai.request.model": upstream_model, "server.address": host,
                                               "server.port": port, "sits.endpoint": endpoint, "sits.model": model})
        else:
            span = None
        # W3C traceparent written directly (the propagator's generic carrier costs more than the span);
        # the caller's baggage is passed on as received.
        c = (span or self.root).get_span_context()
        traceparent = f"traceparent: 00-{c.trace_id:032x}-{c.span_id:016x}-{c.trace_flags:02x}\r\n"
        return span, traceparent.encode() + self._baggage

    def finish(self, status: int, attributes: Mapping[str, Any] | None = None, error: str | None = None) -> None:
        root = self.root
        if self.recording:
            root.set_attribute("http.response.status_code", status)
            if attributes:
                root.set_attributes(attributes)
            if error is not None or status >= 500:
                root.set_status(Status(StatusCode.ERROR, error))
        root.end()

    def served(self, status: int, model: str, endpoint: str, route: str, usage: tuple[int, int] | None,
               error: str | None) -> None:
        """End the request's span with what answered it."""
        attributes: dict[str, Any] | None = None
        if self.recording:
            attributes = {"gen_ai.response.model": model, "sits.endpoint": endpoint, "sits.route": route}
            if usage is not None:
                attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"] = usage
        self.finish(status, attributes, error)

    @property
    def trace_id(self) -> str:
        return format(self.root.get_span_context().trace_id, "032x")


class NoTrace:
    """The trace of a request when tracing is off: every operation does nothing."""

    __slots__ = ()
    recording = False
    trace_id = ""

    def stage(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        return None

    def within(self, span: Span | None) -> NoTrace:
        return self

    def attempt(self, api: str, upstream_model: str, host: str, port: int | None, endpoint: str,
                model: str) -> tuple[None, bytes]:
        return None, b""

    def finish(self, status: int, attributes: Mapping[str, Any] | None = None, error: str | None = None) -> None:
        return None

    def served(self, status: int, model: str, endpoint: str, route: str, usage: tuple[int, int] | None,
               error: str | None) -> None:
        return None


NO_TRACE: Final = NoTrace()
Trace = RequestTrace | NoTrace  # what a request carries: its spans, or nothing to record


def end_span(span: Span | None, error: str | None = None, attributes: Mapping[str, Any] | None = None) -> None:
    if span is None:
        return
    if attributes:
        span.set_attributes(attributes)
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()


class Tracing:
    def __init__(self, settings: TracingSettings, exporter: SpanExporter | None = None,
                 guard_policy: GuardPolicy = GuardPolicy()) -> None:
        self.settings = settings
        self.environment = settings.environment
        self.enabled = bool(settings.endpoint) or exporter is not None
        self.guard: ExportGuard | None = None
        self._provider: TracerProvider | None = None
        self.sampler: AdjustableSampler | None = None
        if not self.enabled:
            return
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # only when on

            exporter = OTLPSpanExporter(endpoint=traces_url(settings.endpoint or ""),
                                        timeout=settings.export_timeout_s)
        self.guard = guard = ExportGuard(exporter, guard_policy)
        self.sampler = AdjustableSampler(settings.effective_ratio, lambda: guard.degraded)
        self._provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}),
                                        sampler=self.sampler)
        self._provider.add_span_processor(BoundedSpanProcessor(guard, settings.schedule_delay_s))
        self._tracer = self._provider.get_tracer("sits")

    def start_request(self, method: str, path: str, headers: Mapping[str, str],
                      attributes: Mapping[str, Any]) -> Trace:
        if not self.enabled:
            return NO_TRACE
        baggage = headers.get("baggage")
        parent = _PROPAGATOR.extract(headers) if baggage or "traceparent" in headers else Context()
        root = self._tracer.start_span(f"{method} {path}", context=parent, kind=SpanKind.SERVER,
                                       attributes=attributes)
        return RequestTrace(self._tracer, root, trace.set_span_in_context(root, parent),
                            baggage[:8192] if baggage else None)

    def set_sampling(self, ratio: float | None = None, environment: str | None = None) -> None:
        """Change sampling at runtime: an explicit ratio, or the named environment's ratio."""
        if self.sampler is None:
            raise ValueError("tracing is off: configure telemetry.tracing.endpoint or OTEL_EXPORTER_OTLP_ENDPOINT")
        if environment is not None:
            if environment not in ENVIRONMENT_RATIOS:
                raise ValueError(f"unknown environment {environment!r}; use one of {', '.join(ENVIRONMENT_RATIOS)}")
            self.environment = environment
            if ratio is None:
                ratio = ENVIRONMENT_RATIOS[environment]
        if ratio is not None:
            self.sampler.ratio = ratio

    def status(self) -> dict[str, Any]:
        """What GET /v1/health/otel shows."""
        if self.guard is None or self.sampler is None:
            return {"enabled": False, "state": "off"}
        g = self.guard
        return {
            "enabled": True,
            "state": "degraded" if g.degraded else "ok",
            "degraded": g.degraded,
            "degraded_reason": g.reason or None,
            "endpoint": self.settings.endpoint,
            "environment": self.environment,
            "sampling_ratio": self.sampler.ratio,
            "queue": {"pending_spans": g.pending, "max": g.policy.max_queue},
            "exported_spans": g.exported,
            "failed_spans": g.failed,
            "dropped_spans": g.dropped,
            "exports": g.exports,
            "export_latency_ms_ewma": round(g.latency_ewma_s * 1000, 3),
            "export_error_share_ewma": round(g.error_share, 4),
            "thresholds": {"export_latency_ms": g.policy.max_export_latency_s * 1000,
                           "export_error_share": g.policy.max_error_share},
        }

    def flush(self, timeout_s: float = 5.0) -> bool:
        return self._provider.force_flush(int(timeout_s * 1000)) if self._provider is not None else True

    def shutdown(self) -> None:
        if self._provider is not None:
            self._provider.shutdown()


def traces_url(endpoint: str) -> str:
    """OTEL_EXPORTER_OTLP_ENDPOINT semantics: a base URL gets the signal path appended."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"
