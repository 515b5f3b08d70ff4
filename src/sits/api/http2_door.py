"""The HTTP/2 listeners next to the HTTP/1.1 door (docs/grpc.md, "HTTP/2 on the HTTP door").

- `server.http2_port`: cleartext HTTP/2 with prior knowledge (h2c), for internal clients that
  multiplex many requests over one connection (httpx `http2=True, http1=False`, grpc-less services).
- `server.tls`: TLS on its own port, offering `h2` and `http/1.1` by ALPN; each connection gets the
  protocol the client chose, both answered by the same handler.

Started and drained by the gateway (app.py) like the gRPC door.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable


from sits.api.http2_server import Http2Connections, Http2ServerProtocol
from sits.api.http_server import ErrorRenderer, ServerLimits
from sits.api.http_types import Handler
from sits.control.config import TlsConfig
from sits.errors import ConfigError

log = logging.getLogger("sits")


def tls_context(tls: TlsConfig) -> ssl.SSLContext:
    """A server context offering h2 then http/1.1; a certificate that does not load is a config error."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2  # RFC 9113 9.2: HTTP/2 needs TLS 1.2 or later
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"server.tls: cannot load cert_file {tls.cert_file!r} with key_file "
                          f"{tls.key_file!r}: {exc}") from None
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


class AlpnSelector(asyncio.Protocol):
    """Placeholder protocol of a TLS connection: once the handshake chose a protocol by ALPN, it hands
    the transport to an HTTP/2 or an HTTP/1.1 protocol and steps aside (no per-byte indirection)."""

    def __init__(self, http1: Callable[[], asyncio.Protocol], http2: Callable[[], asyncio.Protocol]) -> None:
        self._http1 = http1
        self._http2 = http2

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ssl_object = transport.get_extra_info("ssl_object")
        chosen = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        protocol = self._http2() if chosen == "h2" else self._http1()  # no ALPN at all: HTTP/1.1
        transport.set_protocol(protocol)
        protocol.connection_made(transport)


class Http2Door:
    def __init__(self, handler: Handler, render_error: ErrorRenderer, limits: ServerLimits,
                 h2c_port: int | None, tls: TlsConfig | None, http1: Callable[[], asyncio.Protocol]) -> None:
        """`http1` builds the HTTP/1.1 door's protocol, for TLS clients that choose http/1.1."""
        self._handler = handler
        self._render_error = render_error
        self._limits = limits
        self._h2c_port = h2c_port
        self._tls = tls
        self._tls_context = tls_context(tls) if tls is not None else None  # at construction: fail before listening
        self._http1 = http1
        self.connections = Http2Connections()
        self._servers: list[asyncio.Server] = []
        self.h2c_bound_port: int | None = None
        self.tls_bound_port: int | None = None

    def _protocol(self) -> Http2ServerProtocol:
        return Http2ServerProtocol(self._handler, self._render_error, self._limits, self.connections)

    async def start(self, host: str, reuse_port: bool = False) -> None:
        """Listen (port 0: a free one, then in `*_bound_port`); `reuse_port` for `sits serve --workers N`."""
        if self._h2c_port is not None:
            server = await self._listen("server.http2_port", self._protocol, host, self._h2c_port, reuse_port, None)
            self.h2c_bound_port = server.sockets[0].getsockname()[1]
            log.info("sits HTTP/2 (h2c) listening on %s:%d", host, self.h2c_bound_port)
        if self._tls is not None:
            server = await self._listen("server.tls.port", lambda: AlpnSelector(self._http1, self._protocol), host,
                                        self._tls.port, reuse_port, self._tls_context)
            self.tls_bound_port = server.sockets[0].getsockname()[1]
            log.info("sits HTTPS (h2, http/1.1) listening on %s:%d", host, self.tls_bound_port)
        self.connections.start_idle_sweep(self._limits.keep_alive_timeout_s)

    async def _listen(self, key: str, factory: Callable[[], asyncio.Protocol], host: str, port: int,
                      reuse_port: bool, context: ssl.SSLContext | None) -> asyncio.Server:
        loop = asyncio.get_running_loop()
        try:
            server = await loop.create_server(factory, host, port, backlog=2048, reuse_address=True,
                                              reuse_port=reuse_port or None, ssl=context)
        except OSError as exc:
            for opened in self._servers:  # the h2c listener must not outlive a TLS port that failed
                opened.close()
            raise ConfigError(f"{key}: cannot listen on {host}:{port}: {exc}") from None
        self._servers.append(server)
        return server

    def go_away(self) -> None:
        """Drain: stop accepting, GOAWAY on every connection (open streams finish, idle ones close)."""
        for server in self._servers:
            server.close()
        self.connections.go_away()

    def busy(self) -> int:
        return self.connections.busy()

    def close_all(self) -> None:
        self.connections.close_all()
        self.connections.stop_idle_sweep()
