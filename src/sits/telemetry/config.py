"""The `telemetry:` config section (tracing, logs, metrics, dashboard)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class TracingConfig(_Strict):
    # OTLP/HTTP collector base URL, e.g. http://127.0.0.1:4318; OTEL_EXPORTER_OTLP_ENDPOINT wins. None: off.
    endpoint: str | None = None
    # poc 1.0, canary 0.1, production 0.01 (parent-based trace-id ratio); OTEL_SAMPLING_RATIO wins.
    environment: Literal["poc", "canary", "production"] = "poc"
    sampling_ratio: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    service_name: str = "sits"


class LogsConfig(_Strict):
    access_log: bool = False  # one JSON line per request (model, endpoint, status, latency, route)
    log_prompts: bool = False  # include the prompt text in access-log lines; never on by default


class TelemetryConfig(_Strict):
    tracing: TracingConfig = TracingConfig()
    logs: LogsConfig = LogsConfig()
    metrics: bool = True  # GET /metrics (Prometheus text format)
    dashboard: bool = True  # GET /dashboard
    recent_decisions: Annotated[int, Field(ge=0, le=10_000)] = 200  # kept for the dashboard
