"""The tenant parts of one gateway (docs/tenants.md, docs/limits-and-budgets.md), built by the composition
root only with `tenants.enabled`: the store, the live key directory over it, the spend log into it, the
key gate on the request path and the admin routes over them."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from sits.api.auth import AdminGuard
from sits.api.tenant_gate import HttpTenantGate, PromptTokens
from sits.api.tenant_routes import RouteTables, TenantRoutes
from sits.control.config import ServerConfig
from sits.errors import ConfigError
from sits.runtime.runnable import Runnable
from sits.settings import Settings
from sits.state.replication.replica import Replica
from sits.state.routing_table import RoutingTable
from sits.telemetry.metrics import GatewayMetrics, NoMetrics
from sits.tenants.budget import BudgetChecks, PeriodSpend
from sits.tenants.config import TenantsConfig
from sits.tenants.directory import LiveKeyDirectory
from sits.tenants.gate import GateSettings, TenantGate
from sits.tenants.key_lifecycle import KeyLifecycle
from sits.tenants.key_notices import KeyNotices
from sits.tenants.key_secret import key_secret
from sits.tenants.limiter import Limiter
from sits.tenants.metrics import TenantMetrics
from sits.tenants.records import KeyDirectory, SpendSink
from sits.tenants.redis_wire import RedisWire
from sits.tenants.spend_log import SpendLog
from sits.tenants.spend_store import SpendStore
from sits.tenants.store import TenantStore
from sits.tenants.store_metrics import TenantStoreMetrics
from sits.tenants.usage_panel import UsagePanel
from sits.understanding.tokenizers.catalog import TokenizerCatalog


class TenantParts:
    def __init__(self, config: TenantsConfig, settings: Settings, metrics: GatewayMetrics | NoMetrics) -> None:
        self.config = config
        # The data plane hashes presented keys under this secret, reads the directory, records into the log.
        self.key_secret = key_secret(settings.secrets.get(config.key_secret_env), config.key_secret_env,
                                     config.database_url, settings.data_dir)
        self.store = TenantStore.open_url(config.database_url, settings.data_dir)
        self.directory = LiveKeyDirectory(self.store, config.refresh_s)
        self.spend_log = SpendLog(SpendStore(self.store.db), config.spend_log)
        self._registry = metrics.registry if isinstance(metrics, GatewayMetrics) else None
        if self._registry is not None:
            self._registry.register(TenantStoreMetrics(self.spend_log, self.directory))
        self._redis: RedisWire | None = None
        self._limiter: Limiter | None = None
        self.notices: KeyNotices | None = None

    def follow_cluster(self, replica: Replica) -> None:
        """Key and team changes made here are pushed to the other replicas, and theirs to this one, through
        the cluster document (tenants/key_notices.py); polling the store stays as the backstop."""
        self.notices = KeyNotices(replica, self.directory)
        self.directory.announce = self.notices.announce

    def background(self) -> list[Runnable]:
        """Started in this order (migrations, first key load, period totals); stopped in reverse (the last flush)."""
        return [self.store, self.directory, self.spend_log]  # type: ignore[list-item]

    def gate(self, server: ServerConfig, members: Callable[[], list[str]], tokenizers: TokenizerCatalog,
             table: Callable[[], RoutingTable], data_plane_paths: Collection[str],
             directory: KeyDirectory | None = None, sink: SpendSink | None = None,
             period_spend: PeriodSpend | None = None) -> HttpTenantGate:
        """The key gate; `directory`, `sink` and `period_spend` replace the store's own (tests, benches)."""
        if server.epp_port is not None:  # Envoy would send traffic SITS never sees end: nothing to settle
            raise ConfigError("tenants.enabled: the endpoint picker (server.epp_port) cannot enforce tenant keys "
                              "(it picks endpoints, Envoy carries the traffic; docs/limits-and-budgets.md); unset "
                              "server.epp_port, or turn tenants off")
        limits = self.config.limits
        self._redis = RedisWire(limits.redis_url, limits.redis_timeout_s) if limits.redis_url else None
        self._limiter = limiter = Limiter(self._redis, members, lease_s=limits.concurrency_lease_s,
                                          retry_redis_s=limits.retry_redis_s, max_batch=limits.max_batch,
                                          credit_s=limits.credit_s)
        metrics = TenantMetrics(lambda: limiter.mode, lambda: limiter.fallbacks, max_teams=limits.max_team_labels,
                                credits=limiter.credits.counts if limiter.credits is not None else None)
        if self._registry is not None:
            self._registry.register(metrics)
        prompt_tokens = PromptTokens(tokenizers, table)
        gate = TenantGate(directory or self.directory, sink or self.spend_log, limiter,
                          BudgetChecks(limits.key_prefix, period_spend or self.spend_log.period_spend),
                          table, metrics, GateSettings(self.key_secret, limits.default_output_reservation,
                                                       limits.key_prefix), prompt_tokens)
        return HttpTenantGate(gate, prompt_tokens, data_plane_paths, limits.ask_stream_usage)

    def usage_panel(self) -> UsagePanel | None:
        """The dashboard's spend and limits panel (admin viewers only), once the key gate is built."""
        if self._limiter is None:
            return None
        return UsagePanel(self.directory, self.spend_log.spend_by, self._limiter, self.config.limits.key_prefix)

    def routes(self, admin_guard: AdminGuard) -> RouteTables:
        """The tenant admin API and spend reports (api/tenant_routes.py)."""
        return TenantRoutes(self.store, KeyLifecycle(self.store, self.key_secret, time.time), SpendStore(self.store.db),
                            self.directory, admin_guard, self.config.rotation_overlap_s).route_table()

    async def close(self) -> None:
        """After the drain: the last settlements go to Redis."""
        if self._limiter is not None:
            await self._limiter.close()
        if self._redis is not None:
            await self._redis.close()
