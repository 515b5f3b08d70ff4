"""Step 5 of a request at the HTTP edge: metrics, the server span, the decision log, the access log.

One `Observation` per data-plane request, begun when the body is parsed and finished exactly once,
when the last byte of the answer is written or the request failed. Model labels come from the
routing table only (a client cannot grow the label set by inventing model names).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from sits.api.http_types import HttpRequest
from sits.errors import SitsError
from sits.state.routing_table import RoutingTable
from sits.telemetry.config import LogsConfig
from sits.telemetry.decision_log import DecisionLog
from sits.telemetry.logging_setup import current_trace_id
from sits.telemetry.metrics import Buckets, GatewayMetrics
from sits.telemetry.tracing import NO_TRACE, Trace, Tracing, operation_of
from sits.tenants.gate import Ticket

access_log = logging.getLogger("sits.access")
UNKNOWN_MODEL = "unknown"


class RequestObserver:
    def __init__(self, metrics: GatewayMetrics, tracing: Tracing, decisions: DecisionLog, logs: LogsConfig,
                 table: Callable[[], RoutingTable], clock: Callable[[], float] = time.perf_counter,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.metrics = metrics
        self.tracing = tracing
        self.decisions = decisions
        self.logs = logs
        self._table = table
        self._clock = clock
        self._wall_clock = wall_clock

    def begin(self, request: HttpRequest, api: str, request_id: str, model: str, body: Mapping[str, Any]) -> Observation:
        trace: Trace = NO_TRACE
        if self.tracing.enabled:
            attributes: dict[str, Any] = {
                "http.request.method": request.method, "url.path": request.path,
                "gen_ai.operation.name": operation_of(api), "gen_ai.request.model": model,
                "sits.request_id": request_id,
            }
            for name in ("max_tokens", "temperature", "top_p"):
                value = body.get(name)
                if isinstance(value, int | float):
                    attributes[f"gen_ai.request.{name}"] = value
            trace = self.tracing.start_request(request.method, request.path, request.headers, attributes)
            current_trace_id.set(trace.trace_id)
        return Observation(self, api, request_id, model, self._clock(), trace)

    def label(self, model: str) -> str:
        table = self._table()
        return model if model in table.models or model in table.aliases else UNKNOWN_MODEL


class Observation:
    __slots__ = ("_observer", "api", "request_id", "model", "started", "trace", "_done", "tenant")

    def __init__(self, observer: RequestObserver, api: str, request_id: str, model: str, started: float,
                 trace: Trace) -> None:
        self._observer = observer
        self.api = api
        self.request_id = request_id
        self.model = model
        self.started = started
        self.trace = trace
        self._done = False
        self.tenant: Ticket | None = None  # the key gate's ticket (tenants on): settled when this ends

    def inter_token(self, model: str, endpoint: str) -> Buckets | None:
        """The histogram a stream relay observes chunk gaps on, or None when metrics are off."""
        return self._observer.metrics.inter_token(model, endpoint)

    def served(self, model: str, endpoint: str, route: str, attempts: str, first_byte_at: float | None,
               usage: tuple[int, int] | None, status: int = 200, prompt: str = "", error: str | None = None,
               raw_usage: bytes = b"") -> None:
        """`raw_usage`: the answer or the stream's last events, where the key gate reads usage by kind."""
        if self._done:
            return
        self._done = True
        o = self._observer
        seconds = o._clock() - self.started
        o.metrics.served(model, endpoint, status, seconds,
                         first_byte_at - self.started if first_byte_at else None, usage)
        tenant = self.tenant
        if tenant is not None:
            tenant.finish(model, endpoint, status, seconds, raw_usage, usage)
        if o.decisions.enabled:  # seconds kept raw: rounded when the dashboard reads them
            o.decisions.add((o._wall_clock(), self.request_id, model, endpoint, route, status, seconds, attempts))
        self.trace.served(status, model, endpoint, route, usage, error)
        if o.logs.access_log:
            self._access(status, seconds, model=model, endpoint=endpoint, route=route, attempts=attempts,
                         prompt=prompt, error=error, **_who(tenant))

    def failed(self, error: SitsError, prompt: str = "") -> None:
        if self._done:
            return
        self._done = True
        o = self._observer
        seconds = o._clock() - self.started
        model = o.label(self.model)
        o.metrics.failed(model, error.http_status)
        tenant = self.tenant
        if tenant is not None:
            tenant.finish(model, "none", error.http_status, seconds)
        if o.decisions.enabled:
            o.decisions.add((o._wall_clock(), self.request_id, model, "none", "", error.http_status, seconds, ""))
        self.trace.finish(error.http_status, {"error.type": error.code or error.error_type}, error.message)
        if o.logs.access_log:
            self._access(error.http_status, seconds, model=model, error=error.message, prompt=prompt, **_who(tenant))

    def _access(self, status: int, seconds: float, prompt: str, **fields: Any) -> None:
        extra = {"api": self.api, "status": status, "latency_ms": round(seconds * 1000, 3),
                 **{k: v for k, v in fields.items() if v}}
        if self._observer.logs.log_prompts and prompt:
            extra["prompt"] = prompt
        access_log.info("request", extra=extra)


_NOBODY: dict[str, str] = {}


def _who(tenant: Ticket | None) -> dict[str, str]:
    """The key's public id and team for the access log (never the key)."""
    return _NOBODY if tenant is None else {"key_id": tenant.key.key_id, "team": tenant.key.team_id}
