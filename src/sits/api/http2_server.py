"""HTTP/2 for the HTTP door: an asyncio protocol on the `h2` state machine (pure Python, hyper-h2).

A second server next to the HTTP/1.1 one (http_server.py), never a change to it: each stream's
HEADERS and DATA become the same `HttpRequest`, the same handler answers it, and the answer goes
back as HEADERS + DATA frames. What HTTP/2 adds over the HTTP/1.1 server:

- many streams per connection, each answered by its own task (no ordering between them);
- flow control: a stream sends only what the peer's windows allow, so a streaming relay waits on
  WINDOW_UPDATE and pulls the next upstream chunk only when the last one went out; what one slow
  reader makes us buffer is bounded by its window plus the transport's high-water mark;
- RST_STREAM cancels that stream's task (and so its upstream request) and nothing else;
- graceful drain: streams already opened finish, newer ones are refused (retryable), then GOAWAY.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    RemoteSettingsChanged,
    RequestReceived,
    StreamEnded,
    StreamReset,
    WindowUpdated,
)
from h2.exceptions import ProtocolError, StreamClosedError
from h2.settings import SettingCodes, Settings
from hyperframe.frame import GoAwayFrame

from sits.api.connection_tracker import ConnectionTracker
from sits.api.http_server import ErrorRenderer, ServerLimits
from sits.api.http_types import Handler, HttpRequest, HttpResponse, StreamingResponse
from sits.errors import HeadersTooLarge, PayloadTooLarge, SitsError

log = logging.getLogger("sits.http2")

MAX_CONCURRENT_STREAMS = 128
_RECEIVE_WINDOW = 1 << 20  # per stream and per connection: request bodies need few WINDOW_UPDATE round trips
# Connection-specific headers are forbidden in HTTP/2 (RFC 9113 8.2.2); a handler's are dropped.
_CONNECTION_HEADERS = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"})


class _StreamGone(Exception):
    """The stream was reset or the connection lost while we were writing to it."""


@dataclass(slots=True)
class _Stream:
    headers: dict[str, str]
    method: str
    target: str
    body: list[bytes] = field(default_factory=list)
    body_bytes: int = 0
    answered: bool = False  # a task owns the answer (the handler's, or a limit error's)
    task: asyncio.Task[None] | None = None
    window: asyncio.Future[None] | None = None  # set while the stream waits for WINDOW_UPDATE


class Http2Connections(ConnectionTracker):
    """The HTTP/2 connections: the HTTP/1.1 tracker's idle sweep and drain, plus GOAWAY."""

    def go_away(self) -> None:
        for conn in list(self.connections):
            conn.go_away()  # type: ignore[attr-defined]


class Http2ServerProtocol(asyncio.Protocol):
    """One HTTP/2 connection (h2c with prior knowledge, or h2 chosen by ALPN)."""

    def __init__(self, handler: Handler, render_error: ErrorRenderer, limits: ServerLimits,
                 tracker: Http2Connections) -> None:
        self._handler = handler
        self._render_error = render_error
        self._limits = limits
        self._tracker = tracker
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._conn = H2Connection(H2Configuration(client_side=False, header_encoding=None))
        # Our own header limit answers 431 on the stream; hpack's cap (a connection error) only stops bombs.
        self._conn.decoder.max_header_list_size = 4 * limits.max_header_bytes + 4096
        self._streams: dict[int, _Stream] = {}
        self._closed = False
        self._last_stream_id: int | None = None  # set by a drain: streams above it are refused
        self._goaway_sent = False
        self._flush_scheduled = False
        self._writable = asyncio.Event()
        self._writable.set()
        self.idle_since: float | None = None

    # -- connection events ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._tracker.connections.add(self)  # type: ignore[arg-type]
        self.idle_since = self._loop.time()
        self._conn.local_settings = Settings(client=False, initial_values={
            SettingCodes.MAX_CONCURRENT_STREAMS: MAX_CONCURRENT_STREAMS,
            SettingCodes.INITIAL_WINDOW_SIZE: _RECEIVE_WINDOW,
        })
        self._conn.initiate_connection()
        self._conn.increment_flow_control_window(_RECEIVE_WINDOW)  # the connection window beyond 64 KiB
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._tracker.connections.discard(self)  # type: ignore[arg-type]
        self._writable.set()
        for stream in self._streams.values():
            if stream.task is not None and not stream.task.done():
                stream.task.cancel()  # the client went away: stop every stream's upstream work
        self._streams.clear()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        try:
            events = self._conn.receive_data(data)
        except ProtocolError as exc:  # h2 has queued a GOAWAY naming the error
            log.debug("HTTP/2 protocol error: %s", exc)
            self._goaway_sent = True
            self._flush()
            self.close()
            return
        for event in events:
            if isinstance(event, RequestReceived):
                self._on_request(event.stream_id, event.headers)  # type: ignore[arg-type]
            elif isinstance(event, DataReceived):
                self._on_data(event.stream_id, event.data, event.flow_controlled_length)  # type: ignore[arg-type]
            elif isinstance(event, StreamEnded):
                self._on_end(event.stream_id)  # type: ignore[arg-type]
            elif isinstance(event, StreamReset):
                self._on_reset(event.stream_id)  # type: ignore[arg-type]
            elif isinstance(event, WindowUpdated):
                self._wake(event.stream_id)  # type: ignore[arg-type]
            elif isinstance(event, RemoteSettingsChanged):
                if SettingCodes.INITIAL_WINDOW_SIZE in event.changed_settings:
                    self._wake(0)
            elif isinstance(event, ConnectionTerminated):
                # The client's GOAWAY: h2 sends nothing after one (its state machine is closed), so the
                # streams still open cannot be answered; closing cancels them and their upstream requests.
                self._goaway_sent = True
                self.close()
                return
        self._flush()

    @property
    def busy(self) -> bool:
        return bool(self._streams)

    def close(self) -> None:
        """Close now (idle timeout, end of a drain): a GOAWAY first, so the client knows not to reuse it."""
        if self._transport is not None and not self._closed:
            self._send_goaway()
            self._transport.close()

    def go_away(self) -> None:
        """Drain: the streams open now are answered, newer ones are refused (REFUSED_STREAM: safe to
        retry elsewhere), and the GOAWAY goes out with the close once the last open stream is answered.

        Not GOAWAY at once, as RFC 9113 6.8 allows: Python clients on `h2` (httpx) treat a received
        GOAWAY as the end of the connection and fail the streams still in flight (h2 issue #1181)."""
        if self._closed or self._last_stream_id is not None:
            return
        self._last_stream_id = self._conn.highest_inbound_stream_id
        if not self._streams:
            self.close()

    def _send_goaway(self) -> None:
        if self._goaway_sent or self._transport is None:
            return
        self._goaway_sent = True
        self._flush()
        last = self._conn.highest_inbound_stream_id if self._last_stream_id is None else self._last_stream_id
        # Framed by hand: h2's close_connection() also closes its state machine for the open streams.
        self._transport.write(GoAwayFrame(0, last_stream_id=last).serialize())

    # -- requests ------------------------------------------------------------

    def _on_request(self, stream_id: int, raw: list[tuple[bytes, bytes]]) -> None:
        if self._last_stream_id is not None and stream_id > self._last_stream_id:
            self._conn.reset_stream(stream_id, ErrorCodes.REFUSED_STREAM)  # never started: the client may retry
            return
        self.idle_since = None
        headers: dict[str, str] = {}
        pseudo: dict[bytes, bytes] = {}
        size = 0
        for name, value in raw:
            size += len(name) + len(value) + 4
            if name.startswith(b":"):
                pseudo[name] = value
                continue
            key, text = name.decode("latin-1"), value.decode("latin-1")
            previous = headers.get(key)
            headers[key] = text if previous is None else f"{previous}, {text}"
        if b":authority" in pseudo and "host" not in headers:
            headers["host"] = pseudo[b":authority"].decode("latin-1")
        stream = _Stream(headers, pseudo.get(b":method", b"GET").decode("latin-1"),
                         pseudo.get(b":path", b"/").decode("latin-1"))
        self._streams[stream_id] = stream
        if size > self._limits.max_header_bytes:
            self._reject(stream_id, stream, HeadersTooLarge(
                f"request headers exceed the limit of {self._limits.max_header_bytes} bytes"))
            return
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._limits.max_body_bytes:
            self._reject(stream_id, stream, self._too_large())

    def _on_data(self, stream_id: int, data: bytes, flow_controlled: int) -> None:
        # The body is buffered whole (up to the limit) anyway: hand the window back at once.
        self._conn.acknowledge_received_data(flow_controlled, stream_id)
        stream = self._streams.get(stream_id)
        if stream is None or stream.answered:
            return
        stream.body_bytes += len(data)
        if stream.body_bytes > self._limits.max_body_bytes:
            stream.body.clear()
            self._reject(stream_id, stream, self._too_large())
            return
        stream.body.append(data)

    def _on_end(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is None or stream.answered:
            return
        path, _, query = stream.target.partition("?")
        body = stream.body[0] if len(stream.body) == 1 else b"".join(stream.body)
        stream.body = []
        request = HttpRequest(stream.method, path, query, stream.headers, body)
        stream.answered = True
        stream.task = self._loop.create_task(self._answer(stream_id, request))

    def _on_reset(self, stream_id: int) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            return
        if stream.task is not None and not stream.task.done():
            stream.task.cancel()  # this stream only: its handler and upstream request stop, siblings go on
        self._stream_done()

    def _reject(self, stream_id: int, stream: _Stream, error: SitsError) -> None:
        """Answer a limit error before the request is complete, then ask the client to stop sending."""
        stream.answered = True
        stream.task = self._loop.create_task(self._answer(stream_id, None, self._render_error(error)))

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"request body exceeds the limit of {self._limits.max_body_bytes} bytes", param="body"
        )

    # -- answers -------------------------------------------------------------

    async def _answer(self, stream_id: int, request: HttpRequest | None,
                      response: HttpResponse | StreamingResponse | None = None) -> None:
        try:
            if request is not None:
                try:
                    response = await self._handler(request)
                except Exception:  # the handler renders its own errors; this is the last guard
                    log.exception("handler failed for %s %s", request.method, request.path)
                    response = self._render_error(SitsError("internal error"))
            assert response is not None
            if isinstance(response, HttpResponse):
                await self._send_response(stream_id, response)
            else:
                await self._send_stream(stream_id, response)
            if request is None and not self._closed:
                # A limit error went out before the request ended: stop the upload (RFC 9113 8.1).
                self._reset(stream_id, ErrorCodes.NO_ERROR)
        except _StreamGone:
            pass
        finally:
            if self._streams.pop(stream_id, None) is not None:
                self._stream_done()

    async def _send_response(self, stream_id: int, response: HttpResponse) -> None:
        head = [(b":status", b"%d" % response.status), (b"content-type", response.content_type),
                (b"content-length", b"%d" % len(response.body))]
        self._send_headers(stream_id, head, response.headers, end_stream=not response.body)
        if response.body:
            await self._send_data(stream_id, response.body, end_stream=True)
        else:
            self._flush_soon()

    async def _send_stream(self, stream_id: int, response: StreamingResponse) -> None:
        chunks = response.chunks
        try:
            head = [(b":status", b"%d" % response.status), (b"content-type", response.content_type),
                    (b"cache-control", b"no-cache")]
            self._send_headers(stream_id, head, response.headers, end_stream=False)  # goes out with the first chunk
            async for chunk in chunks:
                if chunk:
                    await self._send_data(stream_id, chunk, end_stream=False)
            await self._send_data(stream_id, b"", end_stream=True)
        except _StreamGone:
            raise
        except Exception:
            # Headers are gone already: a reset is the honest signal that the body is incomplete.
            log.exception("HTTP/2 stream relay failed")
            self._reset(stream_id, ErrorCodes.INTERNAL_ERROR)
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()

    def _send_headers(self, stream_id: int, head: list[tuple[bytes, bytes]], extra: list[tuple[bytes, bytes]],
                      end_stream: bool) -> None:
        for name, value in extra:
            name = name.lower()
            if name not in _CONNECTION_HEADERS:
                head.append((name, value))
        try:
            self._conn.send_headers(stream_id, head, end_stream=end_stream)
        except (StreamClosedError, ProtocolError):
            raise _StreamGone from None

    async def _send_data(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        """Send within the peer's flow-control windows, waiting for WINDOW_UPDATE when they are spent."""
        view = memoryview(data)
        while True:
            if self._closed:
                raise _StreamGone
            try:
                n = min(self._conn.local_flow_control_window(stream_id), self._conn.max_outbound_frame_size)
                if len(view) <= n:
                    self._conn.send_data(stream_id, data if len(view) == len(data) else view.tobytes(),
                                         end_stream=end_stream)
                    break
                if n > 0:
                    self._conn.send_data(stream_id, view[:n].tobytes())
                    view = view[n:]
                    continue
            except (StreamClosedError, ProtocolError):
                raise _StreamGone from None
            await self._wait_window(stream_id)
        self._flush_soon()
        if not self._writable.is_set():
            await self._writable.wait()  # the socket's buffer is full: a slow reader holds us here

    async def _wait_window(self, stream_id: int) -> None:
        """Wait for WINDOW_UPDATE, for at most the keep-alive timeout: a client that grants no window for
        that long has abandoned the stream. httpx does exactly that when a response is closed early: it
        forgets the stream without RST_STREAM (encode/httpcore#1022), so without this bound the relay,
        and the upstream request behind it, would wait as long as the connection lives."""
        stream = self._streams.get(stream_id)
        if stream is None:
            raise _StreamGone
        self._flush_soon()
        stream.window = self._loop.create_future()
        try:
            await asyncio.wait_for(stream.window, self._limits.keep_alive_timeout_s)
        except TimeoutError:
            log.info("HTTP/2 stream %d: no flow-control window for %.0f s, reset", stream_id,
                     self._limits.keep_alive_timeout_s)
            self._reset(stream_id, ErrorCodes.CANCEL)
            raise _StreamGone from None
        finally:
            stream.window = None

    def _wake(self, stream_id: int) -> None:
        """A WINDOW_UPDATE for one stream, or for the connection (0): every waiting stream may go on."""
        streams = self._streams.values() if stream_id == 0 else [s for s in [self._streams.get(stream_id)] if s]
        for stream in streams:
            if stream.window is not None and not stream.window.done():
                stream.window.set_result(None)

    def _reset(self, stream_id: int, code: ErrorCodes) -> None:
        try:
            self._conn.reset_stream(stream_id, code)
        except (StreamClosedError, ProtocolError):
            return
        self._flush_soon()

    def _stream_done(self) -> None:
        if self._streams:
            return
        self.idle_since = self._loop.time()
        if self._last_stream_id is not None:
            self.close()  # draining, or the client said GOAWAY: the last stream is answered

    def _flush_soon(self) -> None:
        """Write what the answering tasks framed, once per loop iteration: with many streams on a
        connection, one write carries every answer that became ready together (a syscall each cost
        more than all of h2's framing)."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        data = self._conn.data_to_send()
        if data and self._transport is not None and not self._closed:
            self._transport.write(data)
