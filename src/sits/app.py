"""The composition root: builds every object of one gateway and wires them.

Nothing else constructs long-lived objects; two Gateways in one process share nothing.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
from collections.abc import Mapping

from sits.api.dispatch import Dispatcher
from sits.api.error_responses import render_error
from sits.api.health_routes import HealthRoutes
from sits.api.http_server import ConnectionTracker, HttpServerProtocol, ServerLimits
from sits.api.openai_routes import OpenAIRoutes
from sits.backends.http_client import ConnectionPool
from sits.backends.local.supervisor import LocalWorkerPool
from sits.backends.openai_upstream import OpenAIUpstream
from sits.control.config import GatewayConfig
from sits.control.local_models import local_model_specs
from sits.control.table_builder import build_routing_table
from sits.pipeline.director import Director
from sits.scheduling.registry import builtin_plugins, default_profile
from sits.settings import Settings
from sits.state.endpoint_stats import StatsStore
from sits.state.routing_table import RoutingTable

log = logging.getLogger("sits")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


class Gateway:
    def __init__(self, settings: Settings, config: GatewayConfig, *, rng_seed: int | None = None) -> None:
        self.settings = settings
        self.config = config
        self._table: RoutingTable | None = None
        self._draining = False
        self._pool = ConnectionPool()
        self._stats = StatsStore()
        self._local: LocalWorkerPool | None = None
        self._tracker = ConnectionTracker()
        self._server: asyncio.Server | None = None
        self._limits = ServerLimits(
            max_body_bytes=config.server.max_body_bytes,
            max_header_bytes=config.server.max_header_bytes,
            keep_alive_timeout_s=config.server.keep_alive_timeout_s,
        )
        backend = OpenAIUpstream(self._pool)
        director = Director(
            self.routing_table, default_profile(builtin_plugins()), backend, self._stats,
            time.monotonic, random.Random(rng_seed),
        )
        openai_routes = OpenAIRoutes(director, self.routing_table, created=int(time.time()))
        health = HealthRoutes(self.readiness)
        self.handler = Dispatcher({
            ("POST", "/v1/chat/completions"): openai_routes.chat_completions,
            ("POST", "/v1/completions"): openai_routes.completions,
            ("POST", "/v1/embeddings"): openai_routes.embeddings,
            ("GET", "/v1/models"): openai_routes.list_models,
            ("GET", "/healthz"): health.healthz,
            ("GET", "/readyz"): health.readyz,
        })

    # -- state the layers read ------------------------------------------------

    def routing_table(self) -> RoutingTable:
        assert self._table is not None, "gateway not started"
        return self._table

    def readiness(self) -> tuple[bool, str]:
        if self._draining:
            return False, "draining"
        if self._table is None:
            return False, "starting"
        return True, f"{len(self._table.models)} models"

    # -- lifecycle -------------------------------------------------------------

    async def start(self, sock: socket.socket | None = None) -> None:
        """Start local model workers, build the routing table, then accept connections."""
        local_urls = await self._start_local_models()
        self._table = build_routing_table(self.config, self.settings.secrets, local_urls)
        loop = asyncio.get_running_loop()

        def protocol() -> HttpServerProtocol:
            return HttpServerProtocol(self.handler, render_error, self._limits, self._tracker)

        if sock is not None:
            self._server = await loop.create_server(protocol, sock=sock, backlog=2048)
        else:
            self._server = await loop.create_server(protocol, self.host, self.port, backlog=2048, reuse_address=True)
        log.info("sits listening on %s:%d with models %s", self.host, self.bound_port, ", ".join(self._table.names()))

    async def stop(self) -> None:
        """Report not ready, stop accepting, drain in-flight requests (bounded), close clients."""
        self._draining = True
        if self._server is not None:
            self._server.close()
        self._tracker.close_idle()
        deadline = time.monotonic() + self.config.server.drain_timeout_s
        while self._tracker.busy() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self._tracker.close_all()
        await self._pool.close()
        if self._local is not None:
            await self._local.stop()

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

    async def _start_local_models(self) -> Mapping[str, str]:
        specs = local_model_specs(self.config)
        if not specs:
            return {}
        self._local = LocalWorkerPool()
        return await self._local.start(specs, self.settings.data_dir)
