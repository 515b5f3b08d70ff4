"""A lean HTTP/1.1 server on asyncio + httptools (llhttp).

Why not an ASGI server: the gateway's own edge is its hot path, and the ASGI
scope/receive/send layer costs more per request than everything else SITS does
(bench/README.md). This module does only what a JSON/SSE API needs: keep-alive,
content-length and chunked request bodies, header and body limits, chunked
streaming responses with back-pressure, and cancellation of the handler when
the client disconnects.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

import httptools

from sits.api.connection_tracker import ConnectionTracker
from sits.api.http_types import Handler, HttpRequest, HttpResponse, StreamingResponse
from sits.errors import HeadersTooLarge, InvalidRequest, PayloadTooLarge, SitsError
from sits.translate.sse import DONE_EVENT

log = logging.getLogger("sits.http")

ErrorRenderer = Callable[[SitsError], HttpResponse]

_STATUS_LINES: Final = {
    s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in HTTPStatus
}
_MAX_PIPELINED: Final = 16
# An HTTP/1.1 chunk's size line for the sizes events mostly have: a lookup, then one formatted literal
# (`_chunk`), where `b"%x..." % ...` is parsed at every event (about 1k instructions in callgrind).
_CHUNK_SIZES: Final = tuple(b"%x" % n for n in range(8192))


def _size_line(size: int) -> bytes:
    return _CHUNK_SIZES[size] if size < 8192 else b"%x" % size


def _chunk(data: bytes) -> bytes:
    """`data` framed as one HTTP/1.1 chunk: a stream's every event (a literal format, one allocation)."""
    return b"%b\r\n%b\r\n" % (_size_line(len(data)), data)


def _edge_chunk(data: bytes, head: bytes, last: bool) -> bytes:
    """`data` framed after `head` (the status line and headers, sent with the first chunk) and, when `last`,
    followed by the body's terminator: one write."""
    return b"".join((head, _size_line(len(data)), b"\r\n", data, b"\r\n0\r\n\r\n" if last else b"\r\n"))


# Header names as sent -> lower-case str: clients send the same few names on every request, and a
# lookup costs less than decoding and lower-casing each one. Bounded: odd names are decoded each time.
_HEADER_NAMES: Final[dict[bytes, str]] = {}
_HEADER_NAMES_KEPT: Final = 512


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_body_bytes: int = 8 * 1024 * 1024
    max_header_bytes: int = 64 * 1024
    keep_alive_timeout_s: float = 75.0
    # After a rejected request: how much more of its body to read and throw away, and for how long,
    # so that a client which sends its whole body before reading (urllib, requests) gets to read
    # the error instead of a reset (closing with unread input makes the kernel send RST).
    reject_drain_bytes: int = 64 * 1024 * 1024
    reject_linger_s: float = 5.0


class _Rejected(Exception):
    """Raised inside parser callbacks; carries the error to answer with."""

    def __init__(self, error: SitsError) -> None:
        self.error = error


# What a closed connection's protocol holds instead of its own parser (never fed: no data comes after
# `connection_lost`).
_DETACHED_PARSER: Final = httptools.HttpRequestParser(object())


class HttpServerProtocol(asyncio.Protocol):
    """One client connection. Requests on it are answered in order."""

    def __init__(
        self,
        handler: Handler,
        render_error: ErrorRenderer,
        limits: ServerLimits,
        tracker: ConnectionTracker,
    ) -> None:
        self._handler = handler
        self._render_error = render_error
        self._limits = limits
        self._tracker = tracker
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: dict[str, str] = {}
        self._header_bytes = 0
        self._body: list[bytes] = []
        self._body_bytes = 0
        self._pending: deque[tuple[HttpRequest, bool]] = deque()
        # One task per connection, not per request: it waits on `_wake` between requests (a future
        # costs less than a task, whose creation registers it in asyncio's weak set of all tasks).
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[None] | None = None
        self._handling = False  # a request is being answered (what draining waits for)
        self._closed = False
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._discard_left: int | None = None  # set once rejected: input still to be read and dropped
        self._linger: asyncio.TimerHandle | None = None
        self._sink: _ChunkedSink | None = None  # a pushed stream being written
        self.idle_since: float | None = None  # loop time the connection last became idle

    # -- connection events ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._tracker.connections.add(self)
        self.idle_since = self._loop.time()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        # The parser holds this protocol's callbacks, and so this protocol: without the swap the pair is
        # a cycle, freed only by the cyclic collector, which a burst of closed connections can outrun.
        self._parser = _DETACHED_PARSER
        if self._linger is not None:
            self._linger.cancel()
        self._tracker.connections.discard(self)
        if self._task is not None and not self._task.done():
            self._task.cancel()  # the client went away: stop its upstream work too
        self._task = None  # a cancelled task's exception holds its frames, and they this protocol
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_exception(ConnectionResetError("client disconnected"))

    def data_received(self, data: bytes) -> None:
        if self._discard_left is not None:
            self._discard_left -= len(data)
            if self._discard_left <= 0:
                self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            error = cause.error if isinstance(cause, _Rejected) else InvalidRequest("malformed HTTP request")
            self._reject(error)
        except httptools.HttpParserError as exc:
            self._reject(InvalidRequest(f"malformed HTTP request: {exc}"))

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)
        sink = self._sink
        if sink is not None and sink.on_drained is not None:
            sink.on_drained()

    @property
    def busy(self) -> bool:
        return self._handling

    def close(self) -> None:
        if self._transport is not None and not self._closed:
            self._transport.close()

    # -- parser callbacks ----------------------------------------------------

    def on_message_begin(self) -> None:
        self.idle_since = None
        self._url = b""
        self._headers = {}
        self._header_bytes = 0
        self._body = []
        self._body_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._header_bytes += len(url)
        if self._header_bytes > self._limits.max_header_bytes:
            self._headers_too_large()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4
        if self._header_bytes > self._limits.max_header_bytes:
            self._headers_too_large()
        key = _HEADER_NAMES.get(name)
        if key is None:
            key = name.decode("latin-1").lower()
            if len(_HEADER_NAMES) < _HEADER_NAMES_KEPT:
                _HEADER_NAMES[name] = key
        text = value.decode("latin-1")
        headers = self._headers
        if key in headers:
            text = f"{headers[key]}, {text}"
        headers[key] = text

    def on_headers_complete(self) -> None:
        declared = self._headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._limits.max_body_bytes:
            raise _Rejected(self._too_large())

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self._limits.max_body_bytes:
            raise _Rejected(self._too_large())
        self._body.append(body)

    def on_message_complete(self) -> None:
        path, _, query = self._url.decode("latin-1").partition("?")
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        request = HttpRequest(self._parser.get_method().decode("ascii"), path, query, self._headers, body)
        self._pending.append((request, self._parser.should_keep_alive()))
        if len(self._pending) >= _MAX_PIPELINED and self._transport is not None:
            self._transport.pause_reading()
        if self._task is None:
            self._task = self._loop.create_task(self._serve())
        elif self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    # -- answering -----------------------------------------------------------

    async def _serve(self) -> None:
        """Answer the connection's requests in order, for as long as it is open."""
        while not self._closed:
            await self._serve_pending()
            if self._closed:
                return
            self._wake = self._loop.create_future()
            await self._wake
            self._wake = None

    async def _serve_pending(self) -> None:
        while self._pending and not self._closed:
            request, keep_alive = self._pending.popleft()
            self._handling = True
            try:
                try:
                    response = await self._handler(request)
                except Exception:  # the handler renders its own errors; this is the last guard
                    log.exception("handler failed for %s %s", request.method, request.path)
                    response = self._render_error(SitsError("internal error"))
                if isinstance(response, HttpResponse):
                    self._write_response(response, keep_alive)
                elif response.push is not None:
                    await self._push_stream(response, keep_alive)
                else:
                    await self._write_stream(response, keep_alive)
            finally:
                self._handling = False
            if not keep_alive:
                self.close()
                return
        if self._transport is not None and not self._closed:
            self._transport.resume_reading()
            self.idle_since = self._loop.time()

    def _write_response(self, response: HttpResponse, keep_alive: bool) -> None:
        if self._closed or self._transport is None:
            return
        head = [
            _STATUS_LINES.get(response.status) or b"HTTP/1.1 %d Unknown\r\n" % response.status,
            b"content-type: ",
            response.content_type,
            b"\r\ncontent-length: %d\r\n" % len(response.body),
        ]
        for name, value in response.headers:
            head.append(name + b": " + value + b"\r\n")
        head.append(b"\r\n" if keep_alive else b"connection: close\r\n\r\n")
        head.append(response.body)
        self._transport.write(b"".join(head))

    def _stream_head(self, response: StreamingResponse, keep_alive: bool) -> bytes:
        head = [
            _STATUS_LINES.get(response.status) or b"HTTP/1.1 %d Unknown\r\n" % response.status,
            b"content-type: ",
            response.content_type,
            b"\r\ntransfer-encoding: chunked\r\ncache-control: no-cache\r\n",
        ]
        for name, value in response.headers:
            head.append(name + b": " + value + b"\r\n")
        head.append(b"\r\n" if keep_alive else b"connection: close\r\n\r\n")
        return b"".join(head)

    async def _push_stream(self, response: StreamingResponse, keep_alive: bool) -> None:
        """A stream whose producer writes each chunk into the connection as it comes (no task switch
        per chunk); the head goes out with the first chunk, in one write."""
        assert response.push is not None
        if self._closed or self._transport is None:
            return
        sink = self._sink = _ChunkedSink(self, self._transport, self._stream_head(response, keep_alive))
        try:
            await response.push(sink)
            if not self._closed:
                self._transport.write((sink.head or b"") + (b"" if sink.terminated else b"0\r\n\r\n"))
        except Exception:
            # Headers are gone already: the only honest signal left is an unterminated body.
            log.exception("stream relay failed")
            self.close()
        finally:
            self._sink = None

    async def _write_stream(self, response: StreamingResponse, keep_alive: bool) -> None:
        transport = self._transport
        chunks = response.chunks
        try:
            if self._closed or transport is None:
                return
            pending: bytes | None = self._stream_head(response, keep_alive)  # sent with the first chunk
            terminated = False
            async for chunk in chunks:
                if not chunk or terminated:
                    continue
                if self._closed:
                    return
                terminated = chunk[-14:] == DONE_EVENT  # the stream's last event: the body closes in its write
                if pending is None and not terminated:
                    transport.write(_chunk(chunk))
                else:
                    transport.write(_edge_chunk(chunk, pending or b"", terminated))
                    pending = None
                if self._write_paused:
                    await self._drain()
            if not self._closed:
                transport.write((pending or b"") + (b"" if terminated else b"0\r\n\r\n"))
        except Exception:
            # Headers are gone already: the only honest signal left is an unterminated body.
            log.exception("stream relay failed")
            self.close()
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _drain(self) -> None:
        self._drain_waiter = self._loop.create_future()
        try:
            await self._drain_waiter
        finally:
            self._drain_waiter = None

    def _reject(self, error: SitsError) -> None:
        """Answer a request we could not even parse, then close the connection: after the answer,
        half-close and drop what the client still sends (bounded in bytes and time, or until it
        half-closes too), so that the answer is read rather than reset away."""
        self._pending.clear()
        transport = self._transport
        if self._handling or self._closed or transport is None:
            self.close()
            return
        self._write_response(self._render_error(error), keep_alive=False)
        if not transport.can_write_eof():
            self.close()
            return
        transport.write_eof()
        transport.resume_reading()
        self._discard_left = self._limits.reject_drain_bytes
        self._linger = self._loop.call_later(self._limits.reject_linger_s, self.close)

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"request body exceeds the limit of {self._limits.max_body_bytes} bytes", param="body"
        )

    def _headers_too_large(self) -> None:
        raise _Rejected(HeadersTooLarge(f"request headers exceed the limit of {self._limits.max_header_bytes} bytes"))


class _ChunkedSink:
    """A pushed stream's chunks, framed as HTTP/1.1 chunks and written to the client's transport."""

    __slots__ = ("_conn", "_transport", "head", "terminated", "on_drained")

    def __init__(self, conn: HttpServerProtocol, transport: asyncio.Transport, head: bytes) -> None:
        self._conn = conn
        self._transport = transport
        self.head: bytes | None = head  # the status line and headers, not yet written
        self.terminated = False  # the last chunk (and the body's terminator) went out
        self.on_drained: Callable[[], None] | None = None

    def send(self, chunk: bytes) -> bool:
        conn = self._conn
        if conn._closed:
            return True
        if not chunk or self.terminated:
            return conn._write_paused
        # After the stream's last event the body closes in the same write. A slice compare: bytes.endswith
        # parses its arguments every call.
        done = chunk[-14:] == DONE_EVENT
        head = self.head
        if head is None and not done:
            self._transport.write(_chunk(chunk))  # most of a stream
            return conn._write_paused
        self.head = None
        self.terminated = done
        self._transport.write(_edge_chunk(chunk, head or b"", done))
        return conn._write_paused
