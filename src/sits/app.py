"""The composition root: builds every object of one gateway and wires them.

Nothing else constructs long-lived objects; two Gateways in one process share nothing.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import random
import socket
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from sits.api.attachments import FileRoutes
from sits.api.adapter_routes import COLLECTION as ADAPTERS
from sits.api.adapter_routes import PREFIX as ADAPTERS_PREFIX
from sits.api.adapter_routes import AdapterRoutes
from sits.api.auth import AdminGuard, DataPlaneKeys
from sits.api.cluster_routes import ALIASES_PREFIX, ClusterRoutes, cluster_route_table
from sits.api.control_routes import PREFIX as CONTROL_PREFIX
from sits.api.control_routes import ControlRoutes
from sits.api.dispatch import Dispatcher, Route
from sits.api.engine_routes import SLEEPING as ENGINES_SLEEPING
from sits.api.engine_routes import SWITCH as ENGINE_SWITCH
from sits.api.engine_routes import EngineRoutes
from sits.api.error_responses import anthropic_error, render_error
from sits.api.grpc_server import GrpcServer
from sits.api.health_routes import HealthRoutes
from sits.api.kv_routes import MIGRATE as KV_MIGRATE
from sits.api.kv_routes import MIGRATIONS as KV_MIGRATIONS
from sits.api.kv_routes import KvRoutes
from sits.api.http2_door import Http2Door
from sits.api.connection_tracker import ConnectionTracker
from sits.hot_path import STATE as HOT_PATH
from sits.api.http_server import HttpServerProtocol, ServerLimits
from sits.api.http_types import HttpRequest
from sits.api.live_snapshot import LiveSnapshot
from sits.api.request_observer import RequestObserver
from sits.api.telemetry_routes import DASHBOARD_PREFIX, TelemetryRoutes
from sits.api.messages_routes import COUNT_TOKENS as MESSAGES_COUNT_TOKENS
from sits.api.messages_routes import PATH as MESSAGES
from sits.api.messages_routes import MessagesRoutes
from sits.api.openai_routes import OpenAIRoutes
from sits.api.responses_routes import PATH as RESPONSES
from sits.api.responses_routes import PREFIX as RESPONSES_PREFIX
from sits.api.responses_routes import ResponsesRoutes
from sits.api.surface_path import SurfacePath
from sits.api.tokenizer_routes import COUNT as TOKENIZER_COUNT
from sits.api.tokenizer_routes import LIST as TOKENIZERS
from sits.api.tokenizer_routes import TokenizerRoutes
from sits.backends.address_policy import AddressPolicy
from sits.backends.engine_metrics_scraper import EngineMetricsScraper
from sits.backends.http_client import ConnectionPool
from sits.backends.llama_cpp_slots import LlamaCppSlots
from sits.backends.local.supervisor import LocalWorkerPool
from sits.backends.openai_upstream import OpenAIUpstream
from sits.backends.vllm_admin import VllmAdmin
from sits.control.adapters.registry import AdapterRegistry
from sits.control.adapters.store import AdapterStore
from sits.control.engine_residency import EngineResidency
from sits.control.cluster_node import ClusterNode
from sits.configuration.gateway import GatewayConfig
from sits.control.discovery import discover_models
from sits.control.health_prober import HealthProber, ProbeSettings
from sits.control.kv_migration import KvMigrator
from sits.control.local_models import local_model_specs
from sits.control.registry import Registry
from sits.control.registry_records import records_from_config
from sits.control.shared_store_follower import SharedStoreFollower
from sits.pipeline.admission_step import Admission
from sits.pipeline.cache_embedder import load_minilm_embedder
from sits.pipeline.cache_step import CacheStep
from sits.pipeline.director import Director
from sits.pipeline.fallback import FallbackPolicy
from sits.pipeline.pool_planner import PoolPlanner
from sits.pipeline.scheduling_hints import AdapterHooks, SchedulingHints
from sits.pipeline.fusion.default_calibration import default_calibration
from sits.pipeline.fusion.documents import DocumentParser
from sits.pipeline.fusion.runner import WorkflowRunner
from sits.pipeline.fusion.uploads import UploadStore
from sits.pipeline.fusion.workflow_config import check_workflows
from sits.scheduling.metrics import SchedulingMetrics
from sits.scheduling.policy import build_scheduler
from sits.settings import Settings
from sits.state.circuit_breaker import BreakerPolicy, CircuitBreakers
from sits.state.endpoint_health import HealthBoard, HealthPolicy
from sits.state.endpoint_stats import StatsStore
from sits.state.registry_store import RegistryStore
from sits.state.retry_budget import RetryBudget, RetryBudgetPolicy
from sits.state.live_table import LiveTable
from sits.state.routing_table import RoutingTable
from sits.state.response_store import build_response_store
from sits.state.semantic_cache_factory import build_semantic_cache
from sits.telemetry.decision_log import DecisionLog
from sits.telemetry.metrics import GatewayMetrics, NoMetrics
from sits.runtime.heap_trim import HeapTrim
from sits.runtime.runnable import BackgroundTask, Runnable, SyncStart
from sits.runtime.worker_share import WorkerShare
from sits.telemetry.tracing import Tracing, TracingSettings
from sits.tenant_parts import TenantParts
from sits.tenants.budget import PeriodSpend
from sits.tenants.records import KeyDirectory, SpendSink
from sits.understanding.factory import build_understander
from sits.understanding.tokenizers.catalog import TokenizerCatalog, discover_sources
from sits.understanding.understander import RequestUnderstander

log = logging.getLogger("sits")

if TYPE_CHECKING:
    from sits.api.epp_server import EppServer

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DATA_PLANE_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/v1/files",
                              RESPONSES, MESSAGES, MESSAGES_COUNT_TOKENS})


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def tracing_settings(settings: Settings, config: GatewayConfig) -> TracingSettings:
    """The environment (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SAMPLING_RATIO) wins over `telemetry.tracing`."""
    t = config.telemetry.tracing
    ratio = settings.otel_sampling_ratio if settings.otel_sampling_ratio is not None else t.sampling_ratio
    return TracingSettings(endpoint=settings.otel_endpoint or t.endpoint, environment=t.environment, ratio=ratio,
                           service_name=t.service_name)


class Gateway:
    def __init__(self, settings: Settings, config: GatewayConfig, *, rng_seed: int | None = None,
                 key_directory: KeyDirectory | None = None, spend_sink: SpendSink | None = None,
                 period_spend: PeriodSpend | None = None) -> None:
        """`key_directory`, `spend_sink`, `period_spend`: in place of the tenant store's (tests, benches)."""
        self.settings = settings
        self.config = config
        self.routing_table = LiveTable()  # published by the registry (through the cluster's alias overlay)
        self._draining = False
        self._clock = time.monotonic
        control = config.control
        self._policy = AddressPolicy(
            allow_loopback=control.allow_loopback,
            allowed_private=tuple(ipaddress.ip_network(c, strict=False) for c in control.allowed_private_cidrs),
        )
        idle_s = config.server.upstream_keep_alive_s
        self._pool = ConnectionPool(idle_timeout_s=idle_s)  # endpoints the operator configured
        # endpoints registered at runtime
        self._guarded_pool = ConnectionPool(address_policy=self._policy, idle_timeout_s=idle_s)
        # llama.cpp KV caches moved off a draining endpoint (automatic only with kv_migration.enabled)
        kv = config.kv_migration
        self.kv_migrator = KvMigrator(LlamaCppSlots(self._pool, self._guarded_pool, kv.timeout_s), kv, self._clock)
        policy = config.routing
        self._understanding = config.understanding
        # Built (embedding model loaded) in start(); the director holds this slot until then.
        self._understander: RequestUnderstander | None = None
        self._stats = StatsStore(refresh_interval_s=policy.stats_refresh_s,
                                 engine_max_age_s=policy.engine_metrics.stale_after_s)
        self._health = HealthBoard(HealthPolicy(healthy_threshold=control.health.healthy_threshold,
                                                unhealthy_threshold=control.health.unhealthy_threshold))
        self._local: LocalWorkerPool | None = None
        self._tracker = ConnectionTracker()
        self._server: asyncio.Server | None = None
        self._limits = ServerLimits(
            max_body_bytes=config.server.max_body_bytes,
            max_header_bytes=config.server.max_header_bytes,
            keep_alive_timeout_s=config.server.keep_alive_timeout_s,
        )
        self._backend = backend = OpenAIUpstream(self._pool, self._guarded_pool)
        self.registry = Registry(
            RegistryStore(settings.data_dir / "registry.sqlite3"), settings.secrets, self._policy, self._health,
            publish=self._set_table,
        )
        self._prober = HealthProber(self.routing_table, backend, self._health, self._stats,
                                    ProbeSettings(control.health.interval_s, control.health.timeout_s), self._clock)
        self.scheduling_metrics = SchedulingMetrics(time.perf_counter_ns)
        self._scheduler = build_scheduler(policy, metrics=self.scheduling_metrics)
        self._engine_metrics = EngineMetricsScraper(
            self._pool, self._guarded_pool, self._stats,
            lambda: [e for m in self.routing_table().models.values() for e in m.endpoints],
            self._clock, interval_s=policy.engine_metrics.interval_s, timeout_s=policy.engine_metrics.timeout_s,
        ) if policy.engine_metrics.enabled else None
        resilience = config.resilience
        self._answers = CacheStep(config.semantic_cache, resilience.static_answer)
        self.admission = Admission(config.admission, self.routing_table, self._clock) if config.admission.enabled else None
        self._breakers = CircuitBreakers(BreakerPolicy(resilience.breaker_failure_threshold, resilience.breaker_open_s))
        telemetry = config.telemetry
        self.metrics = GatewayMetrics(idle_upstream=lambda: self._pool.idle_connections() +
                                      self._guarded_pool.idle_connections()) if telemetry.metrics else NoMetrics()
        self.tracing = Tracing(tracing_settings(settings, config))
        decisions = DecisionLog(telemetry.recent_decisions)
        # Teams, keys and the spend log (docs/tenants.md), built only with `tenants.enabled`.
        self.tenants = tenants = TenantParts(config.tenants, settings, self.metrics) if config.tenants.enabled else None
        # LoRA adapters as `base:adapter` models, exact token counts (docs/adapters.md, docs/tokenizers.md).
        vllm_admin = VllmAdmin(self._pool)
        self.adapters = AdapterRegistry(self.routing_table, vllm_admin, AdapterStore(settings.data_dir / "adapters.json"))
        # Saved adapter registrations come back, and the engines say where they are loaded (background).
        self._adapters_restored = BackgroundTask("sits-adapters", self.adapters.restore)
        self.tokenizers = TokenizerCatalog(settings.data_dir / "tokenizers" / "cache")
        # Tokenizers under <data dir>/tokenizers/ load in the background; until then counts are estimates.
        self._tokenizers_loaded = BackgroundTask("sits-tokenizers", lambda: asyncio.to_thread(
            self.tokenizers.load, discover_sources(settings.data_dir / "tokenizers")))
        hints = SchedulingHints(AdapterHooks(self.adapters.resolve, self.adapters.loaded_on, self.adapters.registered),
                                self.tokenizers, self.routing_table)
        observer = RequestObserver(self.metrics, self.tracing, decisions, telemetry.logs, self.routing_table,
                                   clock=self._clock)
        # With --workers N the run's workers share one folder: /metrics and the dashboard of any worker answer
        # with every worker's figures, and uploads and the cluster document live in subfolders of it.
        self._worker_share = WorkerShare(settings.worker_share_dir, settings.worker_index) \
            if settings.worker_share_dir is not None and settings.worker_index is not None else None
        share_folder = self._worker_share.folder if self._worker_share is not None else None
        # Fusion workflows and attachments (docs/workflows.md): the director builds the runner with itself,
        # since every step is a request it routes.
        limits, workflows = config.attachments, config.workflows.root
        uploads, documents = UploadStore(limits.upload_store_bytes, limits.upload_ttl_s, self._clock, time.time,
                                         share_folder / "uploads" if share_folder is not None else None), \
            DocumentParser(limits.max_pages)
        workflow_models = check_workflows(workflows, {*(m.name for m in config.models), *config.all_aliases()},
                                          self._understanding)
        self._director = director = Director(
            self.routing_table, self._scheduler, backend, self._stats, self._health,
            self._breakers, RetryBudget(RetryBudgetPolicy(resilience.retry_budget_ratio,
                                                          resilience.min_retries_per_window)),
            FallbackPolicy(resilience.max_attempts, resilience.ttft_timeout_s, resilience.request_timeout_s),
            self._answers, self.admission, lambda: self._understander, self._clock, random.Random(rng_seed),
            metrics=self.metrics, hints=hints,
            workflows=lambda steps: WorkflowRunner(workflows, workflow_models, steps, self.routing_table, documents,
                                                   uploads, limits, self._clock, time.time, default_calibration()),
        )
        files = FileRoutes(uploads, documents, limits)
        # The key gate: keys, limits, budgets and prices on the request path (docs/limits-and-budgets.md).
        self.tenant_gate = tenants.gate(config.server, lambda: self.cluster.members(), self.tokenizers,
                                        self.routing_table, DATA_PLANE_PATHS, key_directory, spend_sink,
                                        period_spend) if tenants is not None else None
        openai_routes = OpenAIRoutes(director, self.routing_table, created=int(time.time()), observer=observer,
                                     admission=self.admission, resume_streams=resilience.resume_streams,
                                     tenants=self.tenant_gate)
        gated: Callable[[Route], Route] = self.tenant_gate.wrap if self.tenant_gate is not None else lambda r: r
        admin_guard = AdminGuard(settings.secrets.get(control.admin_key_env))
        engine_routes = EngineRoutes(EngineResidency(self.routing_table, vllm_admin, self._health, self._stats,
                                                     self._clock), admin_guard)
        self.live_snapshot = LiveSnapshot(self.routing_table, self._stats, self._health, self._breakers,
                                          self.admission, self._clock, scheduling=self.scheduling_metrics)
        telemetry_routes = TelemetryRoutes(self.metrics, self.tracing, decisions, self.live_snapshot, admin_guard,
                                           lambda: self.registry.version, loopback_only=_is_loopback(self.host),
                                           share=self._worker_share)
        health = HealthRoutes(self.readiness, HOT_PATH.describe())
        control_routes = ControlRoutes(
            self.registry, admin_guard, self._health, self._breakers,
            self._stats,
            self._clock, functools.partial(discover_models, pool=self._guarded_pool, policy=self._policy),
            on_change=self._prober.poke,  # probe new endpoints now, not at the next tick
        )
        adapter_routes = AdapterRoutes(self.adapters, admin_guard)
        tokenizer_routes = TokenizerRoutes(self.tokenizers, self.routing_table, admin_guard)
        kv_routes = KvRoutes(self.kv_migrator, self.routing_table, admin_guard)
        # Replicated aliases and state (docs/replication.md); a cluster of one without a transport.
        self.cluster = ClusterNode(
            config.cluster, settings.replica_of(settings.replica_id or config.cluster.replica_id
                                                or f"{socket.gethostname()}:{self.port}"),
            settings.data_dir,
            settings.secrets.get(control.admin_key_env), self._stats, self._serve_table, random.Random(rng_seed),
            workers_folder=share_folder / "cluster" if share_folder is not None else None,
            registry=self.registry, breakers=self._breakers)  # runtime registrations and circuits replicate too
        cluster_routes = ClusterRoutes(self.cluster, admin_guard,
                                       self.tenant_gate.gate.limiter.describe if self.tenant_gate is not None else None)
        self.live_snapshot.replication_lag = self.cluster.replication_lag_s  # sits_replication_lag_seconds
        if tenants is not None:  # key changes reach the other replicas through the cluster document
            tenants.follow_cluster(self.cluster.replica)
            telemetry_routes.tenant_panel = tenants.usage_panel()  # the dashboard's spend and limits panel
        tenant_routes, tenant_prefixes = tenants.routes(admin_guard) if tenants is not None else ({}, {})
        keys_env = config.server.api_keys_env
        self._client_keys = DataPlaneKeys((settings.secrets.get(keys_env, "") if keys_env else "").split(","))
        # The Responses and Messages APIs: translated to chat completions, the same request path.
        surface_path = SurfacePath(director, observer, self.admission, self.tenant_gate)
        self._response_store = build_response_store(config.responses)
        responses = ResponsesRoutes(surface_path, self._response_store, self._client_keys,
                                    config.responses.max_record_bytes)
        messages = MessagesRoutes(surface_path, self.tokenizers, self.routing_table)
        self.handler = Dispatcher(
            {
                ("POST", "/v1/chat/completions"): gated(openai_routes.chat_completions),
                ("POST", RESPONSES): gated(responses.create),
                ("POST", MESSAGES): gated(messages.create),
                ("POST", MESSAGES_COUNT_TOKENS): messages.count_tokens,
                ("POST", "/v1/files"): files.upload,
                ("POST", "/v1/completions"): gated(openai_routes.completions),
                ("POST", "/v1/embeddings"): gated(openai_routes.embeddings),
                ("GET", "/v1/models"): openai_routes.list_models,
                ("POST", "/v1/models/register"): control_routes.register,
                ("POST", "/v1/models/discover"): control_routes.discover,
                ("GET", "/v1/registry"): control_routes.list_registry,
                ("POST", ADAPTERS): adapter_routes.register,
                ("GET", ADAPTERS): adapter_routes.list_adapters,
                ("POST", ENGINE_SWITCH): engine_routes.switch,
                ("GET", TOKENIZERS): tokenizer_routes.list_tokenizers,
                ("POST", TOKENIZER_COUNT): tokenizer_routes.count,
                ("GET", ENGINES_SLEEPING): engine_routes.sleeping,
                ("POST", KV_MIGRATE): kv_routes.migrate,
                ("GET", KV_MIGRATIONS): kv_routes.migrations,
                ("GET", "/healthz"): health.healthz,
                ("GET", "/readyz"): health.readyz,
                **cluster_route_table(cluster_routes),
                ("GET", "/metrics"): telemetry_routes.metrics,
                ("GET", "/v1/health/otel"): telemetry_routes.otel_health,
                ("PUT", "/v1/telemetry/sampling"): telemetry_routes.set_sampling,
                ("GET", "/v1/dashboard/state"): telemetry_routes.dashboard_state,
                **({("GET", "/dashboard"): telemetry_routes.dashboard} if telemetry.dashboard else {}),
                **tenant_routes,
            },
            prefix_routes={RESPONSES_PREFIX: responses.resource, CONTROL_PREFIX: control_routes.model_resource,
                           ALIASES_PREFIX: cluster_routes.alias_resource,
                           ADAPTERS_PREFIX: adapter_routes.adapter_resource, **tenant_prefixes,
                           **({DASHBOARD_PREFIX: telemetry_routes.dashboard_asset} if telemetry.dashboard else {})},
            before=self.tenant_gate.before if self.tenant_gate is not None
            else self._authenticate if self._client_keys.enabled else None,
            renderers={MESSAGES: anthropic_error},  # a refused key, 404 and 405 too, in Anthropic's shape
        )

        # The gRPC door (docs/grpc.md): the same director behind sits.v1.ChatCompletions.
        self.grpc = GrpcServer(director, self.admission, self._client_keys, self.handler.request_id_of,
                               config.server.grpc_port, config.server.max_body_bytes, observer, self.tenant_gate) \
            if config.server.grpc_port is not None else None
        # The endpoint picker (docs/envoy.md): Envoy's ext_proc; the same scheduling, no traffic sent by SITS.
        self.epp: EppServer | None = None
        if config.server.epp_port is not None:
            # Imported only here: the Envoy stubs come with the `epp` extra (xds-protos, docs/envoy.md).
            from sits.api.epp.picker import EndpointPicker
            from sits.api.epp_server import EppServer

            self.epp = EppServer(EndpointPicker(
                self.routing_table, PoolPlanner(self._scheduler, self._stats, self._health, self._breakers,
                                                self.admission, random.Random(rng_seed), hints),
                self.admission, self._client_keys, self._stats, self._clock, lambda: self._understander,
                hints, self.readiness, config.server.max_body_bytes, config.server.epp_fallbacks),
                config.server.epp_port, self.readiness)
        # HTTP/2: h2c and HTTPS with ALPN (docs/grpc.md), the same handler behind more listeners.
        self.http2 = Http2Door(self.handler, render_error, self._limits, config.server.http2_port, config.server.tls,
                               self._http1_protocol) \
            if config.server.http2_port is not None or config.server.tls is not None else None
        # What runs in the background for the gateway's life, in start order (docs/architecture.md).
        self._background: list[Runnable] = [
            self._tokenizers_loaded, self._adapters_restored, BackgroundTask("sits-health-prober", self._prober.run)]
        if self._worker_share is not None:  # --workers N: catch up with the other workers' changes
            self._background.append(BackgroundTask("sits-registry-sync",
                                                   SharedStoreFollower(self.registry, self.adapters).run))
        if self._engine_metrics is not None:
            self._background.append(SyncStart("sits-engine-metrics", self._engine_metrics))
        if self._worker_share is not None:
            self._background.append(SyncStart("sits-worker-share", self._worker_share))
        if tenants is not None:
            self._background += tenants.background()
        self.heap_trim = HeapTrim(config.server.heap_trim_s)
        if config.server.heap_trim_s > 0:
            self._background.append(BackgroundTask("sits-heap-trim", self.heap_trim.run))

    # -- state the layers read ------------------------------------------------

    def _set_table(self, table: RoutingTable) -> None:
        served = self.cluster.overlay(table)  # replicated aliases on top of the registry's
        old = self.routing_table.publish(served)
        if self.config.kv_migration.enabled:
            self.kv_migrator.table_changed(old, served)
        self._backend.forget({e for m in table.models.values() for e in m.endpoints})

    def _serve_table(self, table: RoutingTable) -> None:
        self.routing_table.publish(table)  # the replicated aliases changed: same models, new alias routes

    def readiness(self) -> tuple[bool, str]:
        if self._draining:
            return False, "draining"
        table = self.routing_table.current
        if table is None:
            return False, "starting"
        return True, f"{len(table.models)} models"

    async def tokenizers_ready(self) -> None:
        """Wait until the tokenizers found at startup are loaded (exact counts from then on)."""
        await self._tokenizers_loaded.finished()

    async def adapters_ready(self) -> None:
        """Wait until the saved adapter registrations are restored."""
        await self._adapters_restored.finished()

    def _authenticate(self, request: HttpRequest, path: str) -> None:
        if path in DATA_PLANE_PATHS:
            self._client_keys.check(request)

    # -- lifecycle -------------------------------------------------------------

    def _http1_protocol(self) -> HttpServerProtocol:
        return HttpServerProtocol(self.handler, render_error, self._limits, self._tracker)

    async def start(self, sock: socket.socket | None = None) -> None:
        """Start local model workers, load the registry, start health probes, then accept connections."""
        local_urls = await self._start_local_models()
        await self._open_cache()
        if self._understanding.enabled:
            # Loads the embedding model (seconds) once, off the event loop, before any request.
            self._understander = await asyncio.to_thread(build_understander, self._understanding)
            await self._understander.start()
        await self.registry.load(records_from_config(self.config.models, dict(local_urls)), self.config.all_aliases())
        await self.cluster.start()
        for part in self._background:  # stopped in the reverse order, after the drain (stop())
            await part.start()
        loop = asyncio.get_running_loop()
        protocol = self._http1_protocol
        if sock is not None:
            self._server = await loop.create_server(protocol, sock=sock, backlog=2048)
        else:
            self._server = await loop.create_server(protocol, self.host, self.port, backlog=2048, reuse_address=True)
        self._tracker.start_idle_sweep(self._limits.keep_alive_timeout_s)
        if self.grpc is not None:
            await self.grpc.start(self.host, reuse_port=sock is not None)  # a shared socket: N workers
        if self.epp is not None:
            await self.epp.start(self.host, reuse_port=sock is not None)
        if self.http2 is not None:
            await self.http2.start(self.host, reuse_port=sock is not None)
        log.info("sits listening on %s:%d with models %s; hot path %s", self.host, self.bound_port,
                 ", ".join(self.routing_table().names()), HOT_PATH.describe())

    async def stop(self) -> None:
        """Report not ready, stop accepting, drain in-flight requests (bounded), stop runnables, close clients."""
        self._draining = True
        if self._server is not None:
            self._server.close()
        grpc_drained = asyncio.create_task(self.grpc.stop(self.config.server.drain_timeout_s)) \
            if self.grpc is not None else None  # stops accepting now, drains alongside HTTP
        epp_drained = asyncio.create_task(self.epp.stop(self.config.server.drain_timeout_s)) \
            if self.epp is not None else None
        self._tracker.close_idle()
        if self.http2 is not None:
            self.http2.go_away()  # streams already open finish; new ones are refused
        deadline = time.monotonic() + self.config.server.drain_timeout_s
        while (self._tracker.busy() or (self.http2 is not None and self.http2.busy())) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if grpc_drained is not None:
            await grpc_drained
        if epp_drained is not None:
            await epp_drained
        self._tracker.close_all()
        self._tracker.stop_idle_sweep()
        if self.http2 is not None:
            self.http2.close_all()
        for part in reversed(self._background):  # a tokenizer load still running finishes in its thread, unused
            await part.stop()
        await self.kv_migrator.stop()
        if self.tenants is not None:
            await self.tenants.close()
        await self.cluster.stop()
        await self._answers.close()
        await self._response_store.close()
        if self._understander is not None:
            await self._understander.aclose()
        await self._guarded_pool.close()
        await self._pool.close()
        if self._local is not None:
            await self._local.stop()
        await asyncio.to_thread(self.tracing.shutdown)  # flushes what is queued, off the event loop

    @property
    def host(self) -> str:
        return self.settings.host or self.config.server.host or DEFAULT_HOST

    @property
    def port(self) -> int:
        if self.settings.port is not None:
            return self.settings.port
        return self.config.server.port if self.config.server.port is not None else DEFAULT_PORT

    @property
    def bound_port(self) -> int:
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def _open_cache(self) -> None:
        cfg = self.config.semantic_cache
        if not cfg.enabled:
            return
        # The embedding model loads once, here (seconds), never on a request; exact-only needs none.
        embedder = await load_minilm_embedder() if cfg.threshold < 1.0 else None
        self._answers.attach(build_semantic_cache(cfg, embedder, self._clock))

    async def _start_local_models(self) -> Mapping[str, str]:
        specs = local_model_specs(self.config.models)
        if not specs:
            return {}
        self._local = LocalWorkerPool()
        return await self._local.start(specs, self.settings.data_dir)
