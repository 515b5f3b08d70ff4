"""What operators read: /metrics (Prometheus), /v1/health/otel, runtime sampling, and the dashboard.

The dashboard is three bundled files (no CDN) that poll `/v1/dashboard/state`; the page carries
no data itself, so only the state endpoint needs the admin key (sent from the URL fragment
`#key=...`, which browsers never send to the server or to referrers). With tenants on, the state
carries the spend and limits panel (`tenants`) only for a caller that presents the admin key.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from sits.api.auth import AdminGuard
from sits.api.http_types import HttpRequest, HttpResponse
from sits.api.live_snapshot import LiveSnapshot
from sits.api.body_schema import parse_body
from sits.errors import InvalidRequest, NotFound
from sits.telemetry.decision_log import DecisionLog
from sits.telemetry.live_state import LiveStateCollector
from sits.telemetry.metrics import GatewayMetrics
from sits.telemetry.tracing import Tracing
from sits.telemetry import worker_dashboard, worker_metrics
from sits.telemetry.worker_dashboard import merge_dashboards
from sits.runtime.worker_share import WorkerShare

DASHBOARD_PREFIX = "/dashboard/"
_ASSETS = {"dashboard.js": b"application/javascript; charset=utf-8", "dashboard.css": b"text/css; charset=utf-8"}


class SamplingChange(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    ratio: float | None = Field(default=None, ge=0.0, le=1.0)
    environment: str | None = None


class TelemetryRoutes:
    def __init__(self, metrics: GatewayMetrics, tracing: Tracing, decisions: DecisionLog,
                 snapshot: LiveSnapshot, guard: AdminGuard, registry_version: Callable[[], int],
                 loopback_only: bool = False, share: WorkerShare | None = None) -> None:
        """`loopback_only`: the gateway listens on loopback alone, so with no admin key configured
        the read-only dashboard state is served to local callers (a laptop works out of the box)."""
        self._open_state = loopback_only and not guard.configured
        self._metrics = metrics
        self._tracing = tracing
        self._decisions = decisions
        self._snapshot = snapshot
        self._guard = guard
        self._registry_version = registry_version
        self._share = share  # with --workers N: every worker's figures in one answer
        # Tenants on: spend against budgets and limits in use per team and key (admin viewers only).
        self.tenant_panel: Callable[[], Awaitable[dict[str, Any]]] | None = None
        if share is not None:
            if metrics.enabled:
                share.add(worker_metrics.KIND, lambda: worker_metrics.families_of(metrics.registry))
            share.add(worker_dashboard.KIND, self._local_state)
        if metrics.enabled:
            metrics.registry.register(LiveStateCollector(snapshot))
        package = resources.files("sits.api") / "dashboard_assets"
        self._assets = {name: (package / name).read_bytes() for name in ("index.html", *_ASSETS)}

    async def metrics(self, request: HttpRequest, request_id: str) -> HttpResponse:
        if not self._metrics.enabled:
            raise NotFound("metrics are off (telemetry.metrics: false)")
        registry = self._metrics.registry
        if self._share is not None:  # --workers N: this worker's live families and the others' latest
            text = worker_metrics.exposition(self._share.gather(worker_metrics.KIND, worker_metrics.families_of(registry)))
        else:
            text = generate_latest(registry)
        return HttpResponse(200, text, content_type=CONTENT_TYPE_LATEST.encode())

    async def otel_health(self, request: HttpRequest, request_id: str) -> HttpResponse:
        return HttpResponse(200, orjson.dumps(self._tracing.status()))

    async def set_sampling(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        change = parse_body(SamplingChange, request.body)
        if change.ratio is None and change.environment is None:
            raise InvalidRequest("give `ratio` (0..1) or `environment` (poc, canary, production)", param="ratio")
        try:
            self._tracing.set_sampling(change.ratio, change.environment)
        except ValueError as exc:
            raise InvalidRequest(str(exc), param="environment" if change.environment else "ratio") from None
        return HttpResponse(200, orjson.dumps(self._tracing.status()))

    async def dashboard(self, request: HttpRequest, request_id: str) -> HttpResponse:
        return HttpResponse(200, self._assets["index.html"], content_type=b"text/html; charset=utf-8",
                            headers=[(b"cache-control", b"no-cache")])

    async def dashboard_asset(self, request: HttpRequest, request_id: str) -> HttpResponse:
        name = request.path[len(DASHBOARD_PREFIX):]
        if request.method != "GET" or name not in _ASSETS:
            raise NotFound(f"no dashboard asset {name!r}")
        return HttpResponse(200, self._assets[name], content_type=_ASSETS[name],
                            headers=[(b"cache-control", b"no-cache")])

    async def dashboard_state(self, request: HttpRequest, request_id: str) -> HttpResponse:
        if not self._open_state:
            self._guard.check(request)
        payload = self._local_state()
        if self._share is not None:
            payload = merge_dashboards(self._share.gather(worker_dashboard.KIND, payload), self._share.worker)
        if self.tenant_panel is not None and self._guard.is_admin(request):  # spend is for admins only
            payload["tenants"] = await self.tenant_panel()
        return HttpResponse(200, orjson.dumps(payload), headers=[(b"cache-control", b"no-store")])

    def _local_state(self) -> dict[str, Any]:
        """This process's dashboard state (with --workers N, one worker's part of the answer)."""
        state = self._snapshot()
        models: dict[str, list[dict[str, Any]]] = {}
        for row in state.endpoints:
            models.setdefault(row.model, []).append({
                "id": row.endpoint, "phase": row.phase, "available": row.available, "circuit": row.circuit,
                "weight": row.weight, "dynamic_weight": round(row.dynamic_weight, 4), "in_flight": row.in_flight,
                "latency_ewma_ms": round(row.latency_ewma_s * 1000, 3),
                "latency_p95_ms": round(row.latency_p95_s * 1000, 3), "ttft_ewma_ms": round(row.ttft_ewma_s * 1000, 3),
                "error_rate": round(row.error_rate, 4), "qps": round(row.qps, 2), "ejections": row.ejections,
                "circuit_opens": row.circuit_opens, "concurrency_limit": row.concurrency_limit,
            })
        payload = {
            "now": time.time(),
            "registry_version": self._registry_version(),
            "models": [{"name": name, "endpoints": rows} for name, rows in models.items()],
            "totals": self._totals(),
            "admission_queued": {str(k): v for k, v in state.admission_queued.items()},
            "replication_lag_s": state.replication_lag_s,
            "decisions": self._decisions.recent(50),
            "tracing": self._tracing.status(),
        }
        return payload

    def _totals(self) -> dict[str, float]:
        """Counter totals the dashboard turns into rates (requests, errors, cache hits, fallbacks, retries)."""
        m = self._metrics
        if m is None:
            return {}
        errors = sum(v for (_, _, status), v in m.requests.totals() if not status.startswith("2"))
        hits = sum(v for (result,), v in m.cache.totals() if result != "miss")
        return {"requests": sum(v for _, v in m.requests.totals()), "errors": errors,
                "cache_lookups": sum(v for _, v in m.cache.totals()), "cache_hits": hits,
                "fallbacks": sum(v for _, v in m.fallbacks.totals()), "retries": sum(v for _, v in m.retries.totals())}

