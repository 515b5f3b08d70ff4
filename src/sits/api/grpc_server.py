"""The gRPC front door: a grpc.aio server on the gateway's event loop, next to the HTTP one.

It serves sits.v1.ChatCompletions (proto/sits/v1/chat.proto) through the same director as the HTTP
door. Started and stopped by the gateway (app.py) when `server.grpc_port` is configured.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc

from sits.api.auth import DataPlaneKeys
from sits.api.grpc import chat_pb2_grpc
from sits.api.grpc.chat_service import ChatCompletionsService
from sits.api.http_types import HttpRequest
from sits.api.request_observer import RequestObserver
from sits.api.tenant_gate import HttpTenantGate
from sits.errors import ConfigError
from sits.pipeline.admission_step import Admission
from sits.pipeline.director import Director

log = logging.getLogger("sits")


class GrpcServer:
    def __init__(self, director: Director, admission: Admission | None, keys: DataPlaneKeys,
                 request_id_of: Callable[[HttpRequest], str], port: int, max_message_bytes: int,
                 observer: RequestObserver | None = None, tenants: HttpTenantGate | None = None) -> None:
        """`request_id_of` and `observer` are the HTTP door's (shared ids, metrics, spans, logs); `tenants`
        its key gate (tenants on: every call presents a tenant key in its `authorization` metadata)."""
        self._service = ChatCompletionsService(director, admission, keys, request_id_of, max_message_bytes, observer,
                                               tenants)
        self._port = port
        self._max_message_bytes = max_message_bytes
        self._server: grpc.aio.Server | None = None
        self.bound_port = 0

    async def start(self, host: str, reuse_port: bool = False) -> None:
        """Listen on host:port (port 0: a free one, then in `bound_port`). `reuse_port` for
        `sits serve --workers N`, where every process listens on the port; otherwise a port in use
        is an error, never a port silently shared with another gateway."""
        server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", self._max_message_bytes),
            ("grpc.so_reuseport", 1 if reuse_port else 0),
        ])
        chat_pb2_grpc.add_ChatCompletionsServicer_to_server(self._service, server)
        address = f"[{host}]:{self._port}" if ":" in host else f"{host}:{self._port}"
        try:
            self.bound_port = server.add_insecure_port(address)
        except RuntimeError as exc:
            raise ConfigError(f"server.grpc_port: cannot listen on {address}: {exc}") from None
        if not self.bound_port:
            raise ConfigError(f"server.grpc_port: cannot listen on {address}")
        await server.start()
        self._server = server
        log.info("sits gRPC listening on %s:%d", host, self.bound_port)

    async def stop(self, grace_s: float) -> None:
        """Stop accepting calls; in-flight calls get `grace_s` to finish, then are cancelled."""
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
