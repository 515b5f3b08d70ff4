"""The endpoint-picker door: Envoy's external processing service and gRPC health on one port.

Started and stopped by the gateway (app.py) when `server.epp_port` is configured (docs/envoy.md).
Health (grpc.health.v1) answers for "" (the server), `liveness`, `readiness` and
`envoy.service.ext_proc.v3.ExternalProcessor`: SERVING once started with the routing table
loaded, NOT_SERVING from the moment the gateway drains (liveness stays SERVING).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from sits.api.epp.picker import EndpointPicker
from sits.api.epp.service import ExternalProcessor
from sits.errors import ConfigError

log = logging.getLogger("sits")

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
LIVENESS, READINESS = "liveness", "readiness"
_READY_SERVICES = ("", READINESS, EXT_PROC_SERVICE)


class EppServer:
    def __init__(self, picker: EndpointPicker, port: int, ready: Callable[[], tuple[bool, str]]) -> None:
        self._picker = picker
        self._port = port
        self._ready = ready
        self._health = health.aio.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self.bound_port = 0

    async def start(self, host: str, reuse_port: bool = False) -> None:
        """Listen on host:port (0: a free one, then in `bound_port`); health SERVING once the gateway is ready."""
        server = grpc.aio.server(options=[
            # a message carries at most one body chunk; Envoy's are far smaller than the body limit
            ("grpc.max_receive_message_length", self._picker.max_body_bytes + 64 * 1024),
            ("grpc.so_reuseport", 1 if reuse_port else 0),
        ])
        external_processor_pb2_grpc.add_ExternalProcessorServicer_to_server(ExternalProcessor(self._picker), server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        address = f"[{host}]:{self._port}" if ":" in host else f"{host}:{self._port}"
        try:
            self.bound_port = server.add_insecure_port(address)
        except RuntimeError as exc:
            raise ConfigError(f"server.epp_port: cannot listen on {address}: {exc}") from None
        if not self.bound_port:
            raise ConfigError(f"server.epp_port: cannot listen on {address}")
        await self._health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
        ready = self._ready()[0]
        for service in _READY_SERVICES:
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING if ready
                                   else health_pb2.HealthCheckResponse.NOT_SERVING)
        await server.start()
        self._server = server
        log.info("sits endpoint picker listening on %s:%d", host, self.bound_port)

    async def stop(self, grace_s: float) -> None:
        """NOT_SERVING at once (the proxy stops sending), then in-flight streams get `grace_s`."""
        if self._server is not None:
            for service in _READY_SERVICES:
                await self._health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
            await self._server.stop(grace_s)
            self._server = None
