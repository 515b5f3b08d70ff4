"""Pooled HTTP/1.1 client for upstream model servers, on asyncio + httptools.

Why not aiohttp/httpx here: the upstream call is half of the gateway's hot path,
and a purpose-built client that reuses keep-alive connections, pre-encodes the
static part of each endpoint's request and relays body chunks without copying
costs a fraction of a general client per request (bench/README.md).

Contract: `ConnectionPool.request()` returns once the response headers arrived
(or raises an `UpstreamError`). The caller must either consume the body fully or
`close()` the response; an unfinished response closes its connection, which is
how a cancelled client request cancels the upstream request.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from dataclasses import dataclass
from typing import Final, NamedTuple

import httptools

from sits.backends.address_policy import AddressPolicy, resolve_for_connect
from sits.backends.upstream_response import UpstreamResponse
from sits.errors import UpstreamConnectError, UpstreamConnectionLost, UpstreamProtocolError, UpstreamTimeout

# Upstream timeouts are checked by one sweep over busy connections rather than two loop timers armed
# and cancelled per request (a measurable share of a request's work; figures: bench/README.md,
# "measured"). The sweep runs when the earliest deadline is due, no sooner than this after the last
# one, so a timeout fires up to this late and a pool whose deadlines are far off is not swept at all.
TIMEOUT_RESOLUTION_S = 0.02
# Header names as sent -> lower-case str: an upstream sends the same few names on every answer, and a
# lookup costs less than decoding and lower-casing each. Bounded: odd names are decoded each time.
_HEADER_NAMES: Final[dict[bytes, str]] = {}
_HEADER_NAMES_KEPT: Final = 512
# An idle keep-alive connection is closed after this long: under the 5 s after which uvicorn (vLLM,
# SGLang) and llama-server close one themselves, so the gateway never sends onto a connection the
# server is closing, and the connections a burst opened do not stay held once it has passed.
IDLE_TIMEOUT_S: Final = 4.0


class Origin(NamedTuple):
    """Where connections go; the pool's key (a named tuple: hashed twice a request, in C)."""

    scheme: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.scheme == "https"


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds. `first_byte` bounds the wait for response headers; `total` the whole exchange."""

    connect: float = 5.0
    first_byte: float = 120.0
    total: float = 600.0


class _StaleConnection(Exception):
    """A reused keep-alive connection was closed by the peer before answering."""


# What a closed connection holds instead of its own parser (never fed: no data comes after `connection_lost`).
_DETACHED_PARSER: Final = httptools.HttpResponseParser(object())


class _UpstreamConnection(asyncio.Protocol):
    def __init__(self, pool: ConnectionPool, origin: Origin) -> None:
        self._pool = pool
        self._origin = origin
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._response: UpstreamResponse | None = None
        self._headers_ready: asyncio.Future[UpstreamResponse] | None = None
        self._got_bytes = False
        self.deadline: float | None = None  # loop time this exchange times out at; None: not waiting
        self._waiting_for = "first byte"
        self._timeouts = Timeouts()
        self._started = 0.0
        self._first_token_s = 0.0
        self.closed = False
        self.reused = False
        self.idle_since = 0.0  # loop time it went back to the pool
        self.paused = False  # reading paused because the body buffer is full (see `on_body`)

    # -- protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._parser = _DETACHED_PARSER  # no cycle through the parser's callbacks (api/http_server.py)
        self._disarm()
        if self._headers_ready is not None and not self._headers_ready.done():
            if self.reused and not self._got_bytes:
                self._headers_ready.set_exception(_StaleConnection())
            else:
                self._headers_ready.set_exception(
                    UpstreamConnectionLost(f"upstream {self._origin.host}:{self._origin.port} closed the connection")
                )
        if self._response is not None:
            self._response._fail(
                UpstreamConnectionLost("upstream closed the connection before the response was complete")
            )
            self._response = None

    def data_received(self, data: bytes) -> None:
        self._got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamProtocolError(f"malformed upstream response: {exc}"))

    # -- parser callbacks ----------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._response is not None:
            key = _HEADER_NAMES.get(name)
            if key is None:
                key = name.decode("latin-1").lower()
                if len(_HEADER_NAMES) < _HEADER_NAMES_KEPT:
                    _HEADER_NAMES[name] = key
            self._response.headers[key] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        response = self._response
        if response is None or self._headers_ready is None:
            return
        response.status = self._parser.get_status_code()
        # Headers arrived: from here on only the total deadline applies.
        self.deadline, self._waiting_for = self._started + self._timeouts.total, "total"
        if not self._headers_ready.done():
            self._headers_ready.set_result(response)

    def on_body(self, body: bytes) -> None:
        if self._waiting_for == "first token":  # it came: only the total deadline applies again
            self.deadline, self._waiting_for = self._started + self._timeouts.total, "total"
        response = self._response
        if response is None:
            return
        deliver = response._deliver  # push mode, inline: this runs once per streamed event
        if (deliver(body) if deliver is not None else response._feed(body)) and self._transport is not None:
            self._transport.pause_reading()
            self.paused = True

    def on_message_complete(self) -> None:
        self._disarm()
        response, self._response = self._response, None
        keep_alive = self._parser.should_keep_alive()
        if response is not None:
            response._finish()
        if keep_alive and not self.closed:
            if self.paused:  # the last read both filled the buffer and ended the body: the next exchange reads
                self.resume()
            self._pool._release(self)
        else:
            self.abort()

    # -- used by the pool and the response ----------------------------------

    def send(self, data: bytes, timeouts: Timeouts) -> asyncio.Future[UpstreamResponse]:
        assert self._transport is not None
        self._timeouts = timeouts
        self._started = self._loop.time()
        self._got_bytes = False
        self._response = UpstreamResponse(self)
        self._headers_ready = self._loop.create_future()
        self.deadline, self._waiting_for = self._started + min(timeouts.first_byte, timeouts.total), "first byte"
        self._pool._watch(self)
        self._transport.write(data)
        return self._headers_ready

    def expect_body_within(self, seconds: float) -> None:
        if self.deadline is not None:  # still in the exchange's deadline sweep
            self.deadline = min(self.deadline, self._loop.time() + seconds)
            self._waiting_for, self._first_token_s = "first token", seconds
            self._pool._watch(self)  # the deadline moved closer: the sweep may have to come sooner

    def pause(self) -> None:
        self.paused = True
        if self._transport is not None and not self.closed:
            self._transport.pause_reading()

    def resume(self) -> None:
        self.paused = False
        if self._transport is not None and not self.closed:
            self._transport.resume_reading()

    def abort(self) -> None:
        self._disarm()
        if not self.closed and self._transport is not None:
            self.closed = True
            self._transport.close()

    def _fail(self, error: Exception) -> None:
        if self._headers_ready is not None and not self._headers_ready.done():
            self._headers_ready.set_exception(error)
        if self._response is not None:
            self._response._fail(error)
            self._response = None
        self.abort()

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline = None
            self._pool._busy.discard(self)

    def time_out(self) -> None:
        """Called by the pool's sweep once `deadline` has passed."""
        what = self._waiting_for
        if what == "first token":
            self._fail(UpstreamTimeout(f"upstream {self._origin.host}:{self._origin.port} sent no token within "
                                       f"{self._first_token_s:g}s"))
            return
        limit = self._timeouts.total if what == "total" else self._timeouts.first_byte
        self._fail(UpstreamTimeout(f"upstream {self._origin.host}:{self._origin.port} {what} timeout after {limit:g}s"))


class ConnectionPool:
    """Keep-alive connections per origin, shared by every endpoint on that origin.

    With an `address_policy`, every new connection resolves the host itself, checks every
    address and connects to a checked one. Redirects are never followed (a 3xx is relayed as
    an upstream status), so the checked addresses are the only ones ever contacted.
    """

    def __init__(
        self,
        max_idle_per_origin: int = 256,
        ssl_context: ssl.SSLContext | None = None,
        address_policy: AddressPolicy | None = None,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        # Per origin, oldest first: a request takes the newest (the right end), so under light load the
        # same few stay warm and the surplus ages at the left end, where the expiry looks.
        self._idle: dict[Origin, deque[_UpstreamConnection]] = {}
        self._max_idle = max_idle_per_origin
        self._idle_timeout = idle_timeout_s
        self._expiry: asyncio.TimerHandle | None = None  # armed while any connection is idle
        self._ssl_context = ssl_context
        self._address_policy = address_policy
        self._closing = False
        self._busy: set[_UpstreamConnection] = set()  # exchanges with a deadline, checked by the sweep
        self._sweep: asyncio.TimerHandle | None = None
        self._sweep_at = 0.0  # loop time the armed sweep runs at

    async def request(self, origin: Origin, data: bytes, timeouts: Timeouts) -> UpstreamResponse:
        """Send one pre-encoded HTTP/1.1 request; return when its headers are in."""
        for _ in range(3):
            conn = self._take_idle(origin) or await self._connect(origin, timeouts)
            try:
                return await conn.send(data, timeouts)
            except _StaleConnection:
                continue  # the peer closed an idle keep-alive connection; nothing was processed
            except BaseException:
                conn.abort()  # cancelled or failed mid-exchange: the connection is not reusable
                raise
        raise UpstreamConnectError(f"upstream {origin.host}:{origin.port} keeps closing connections")

    def _take_idle(self, origin: Origin) -> _UpstreamConnection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                conn.reused = True
                return conn
        return None

    def _release(self, conn: _UpstreamConnection) -> None:
        idle = self._idle.setdefault(conn._origin, deque())
        if self._closing or len(idle) >= self._max_idle:
            conn.abort()
            return
        loop = conn._loop
        conn.idle_since = loop.time()
        idle.append(conn)
        if self._expiry is None:
            self._expiry = loop.call_at(conn.idle_since + self._idle_timeout, self._expire_idle, loop)

    def _expire_idle(self, loop: asyncio.AbstractEventLoop) -> None:
        """Close the connections idle for the timeout; come back when the next one will have been."""
        now = loop.time()
        oldest: float | None = None
        for idle in self._idle.values():
            while idle and (idle[0].closed or idle[0].idle_since + self._idle_timeout <= now):
                idle.popleft().abort()
            if idle and (oldest is None or idle[0].idle_since < oldest):
                oldest = idle[0].idle_since
        if oldest is not None:
            # Not sooner than a tenth of the timeout from now: a steady trickle of releases is swept in batches.
            due = max(oldest + self._idle_timeout, now + self._idle_timeout / 10)
            self._expiry = loop.call_at(due, self._expire_idle, loop)
        else:
            self._expiry = None

    async def _connect(self, origin: Origin, timeouts: Timeouts) -> _UpstreamConnection:
        loop = asyncio.get_running_loop()
        tls = None
        if origin.tls:
            tls = self._ssl_context or ssl.create_default_context()
        try:
            async with asyncio.timeout(timeouts.connect):
                hosts: tuple[str, ...] = (origin.host,)
                if self._address_policy is not None:
                    # Checked here again, not only at registration: DNS may answer differently
                    # now (rebinding), so connect to exactly the addresses just checked.
                    hosts = await resolve_for_connect(origin.host, origin.port, self._address_policy)
                for i, host in enumerate(hosts):
                    try:
                        _, conn = await loop.create_connection(
                            lambda: _UpstreamConnection(self, origin),
                            host,
                            origin.port,
                            ssl=tls,
                            server_hostname=origin.host if tls else None,
                        )
                        break
                    except OSError:
                        if i == len(hosts) - 1:
                            raise
        except TimeoutError:
            raise UpstreamConnectError(
                f"connect to {origin.host}:{origin.port} timed out after {timeouts.connect:g}s"
            ) from None
        except OSError as exc:
            # Refused: the server went away, and whatever is pooled for it is from before (a restarted
            # server's old connections must not be the first thing its readmission meets).
            self._drop_idle(origin)
            raise UpstreamConnectError(f"cannot connect to {origin.host}:{origin.port}: {exc.strerror or exc}") from None
        return conn

    def _drop_idle(self, origin: Origin) -> None:
        idle = self._idle.get(origin)
        while idle:
            idle.pop().abort()

    def idle_connections(self) -> int:
        """Open keep-alive connections waiting in the pool (what a descriptor count includes besides leaks)."""
        return sum(1 for idle in self._idle.values() for conn in idle if not conn.closed)

    def _watch(self, conn: _UpstreamConnection) -> None:
        """`conn` has a deadline (new, or moved closer): sweep by then."""
        self._busy.add(conn)
        deadline = conn.deadline
        assert deadline is not None
        if self._sweep is None or deadline < self._sweep_at:
            if self._sweep is not None:
                self._sweep.cancel()
            self._arm(conn._loop, deadline)

    def _arm(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        self._sweep_at = max(due, loop.time() + TIMEOUT_RESOLUTION_S)
        self._sweep = loop.call_at(self._sweep_at, self._check_deadlines, loop)

    def _check_deadlines(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        for conn in [c for c in self._busy if c.deadline is not None and c.deadline <= now]:
            conn.time_out()
        # Armed only while exchanges are in flight: an idle gateway has no timer ticking.
        deadlines = [c.deadline for c in self._busy if c.deadline is not None]
        if deadlines:
            self._arm(loop, min(deadlines))
        else:
            self._sweep = None

    async def close(self) -> None:
        self._closing = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        for idle in self._idle.values():
            while idle:
                idle.pop().abort()
        self._idle.clear()
