"""One upstream exchange as the API edge consumes it (an `Answer`, pipeline/answer.py); records its
outcome when the body ends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import orjson

from sits.backends.upstream_response import UpstreamBody
from sits.errors import UpstreamError, UpstreamProtocolError
from sits.pipeline.answer import JSON, counts_of, usage_of
from sits.pipeline.pulled_exchange import checked_chunks
from sits.pipeline.sse_guard import SseGuard
from sits.state.endpoint_stats import EndpointStats
from sits.state.routing_table import Endpoint
from sits.state.semantic_cache import CacheKey
from sits.telemetry.tracing import Span, end_span


class Exchange:
    __slots__ = ("endpoint", "source", "model", "route", "response", "attempts", "cache_key", "on_finish", "intent",
                 "span", "first_byte_at", "content_type", "reader_checks", "_guard", "_stats", "_clock", "_started", "_open", "_first")

    def __init__(
        self,
        endpoint: Endpoint,
        model: str,
        route: str,
        response: UpstreamBody,
        stats: EndpointStats,
        clock: Callable[[], float],
        started: float,
    ) -> None:
        self.endpoint = endpoint
        self.source = endpoint.id
        self.model = model
        self.route = route
        self.response = response
        self.attempts = ""
        self.cache_key: CacheKey | None = None  # set when the answer may be stored for the cache steps
        self.on_finish: Callable[[], None] | None = None  # e.g. give back the admission slot
        self.intent = ""  # x-sits-intent, when the request was understood (model "auto")
        self.span: Span | None = None  # the upstream attempt's span, ended with the exchange
        # The stream's reader refuses malformed SSE itself (RoutingRequest.translated): the guard checks
        # only the first event, what decides a fallback, and passes the rest on.
        self.reader_checks = False
        self.first_byte_at = clock()  # headers in; for streams, moved to the first event
        self._stats = stats
        self._clock = clock
        self._started = started
        self._open = True
        self._first: bytes | None = None
        self._guard: SseGuard | None = None  # streams only

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [
            (b"x-sits-model", self.model.encode()),
            (b"x-sits-endpoint", self.source.encode()),
            (b"x-sits-route", self.route.encode("latin-1", "replace")),
            (b"x-sits-attempts", self.attempts.encode("latin-1", "replace")),
        ]
        if self.intent:
            headers.append((b"x-sits-intent", self.intent.encode("latin-1", "replace")))
        return headers

    def usage(self, body: bytes, parsed: object = None) -> tuple[int, int] | None:
        return usage_of(body) if parsed is None else counts_of(parsed)

    async def read(self) -> bytes:
        ok = False
        try:
            body = await self.response.read()
            ok = True
            value = self.response.headers.get("content-type")
            self.content_type = JSON if value is None else value.encode("latin-1")
            return body
        finally:
            self._finish(ok)

    async def prefetch_first_chunk(self, timeout_s: float) -> None:
        """Wait for the stream's first bytes before anything reaches the client, so a stream that
        stalls, breaks or opens with an error event can still fall back transparently."""
        self._guard = SseGuard(self.endpoint.id)
        self.response.first_chunk_within(timeout_s)  # the pool's deadline sweep: no timer per request
        try:
            first = await self.response.next_chunk()
        except UpstreamError:
            self.close()
            raise
        if not first:
            self.close()
            raise UpstreamProtocolError(f"upstream {self.endpoint.id} ended the stream before any event")
        if first.startswith(b"data: {\"error\"") or first.startswith(b"data:{\"error\""):
            self.close()
            raise UpstreamProtocolError(f"upstream {self.endpoint.id} streamed an error: {_error_message(first)}")
        try:
            if self.reader_checks:
                self._guard.check_first_event(first)
            else:
                self._guard.check(first)
        except UpstreamProtocolError:
            self.close()
            raise
        self._first = first
        self.first_byte_at = self._clock()

    def chunks(self, include_usage: bool = False) -> AsyncIterator[bytes]:
        """The upstream's SSE bytes as they come (`include_usage` is the forwarded body's business)."""
        first, self._first = self._first, None
        guard = self._guard or SseGuard(self.endpoint.id)
        if first is not None and self.reader_checks:
            guard.check(first)  # pulled, every chunk is checked: the prefetch checked only its first event
        return checked_chunks(self.response, first, guard, self.close)

    async def push(self, deliver: Callable[[bytes], bool], include_usage: bool = False) -> None:
        """`chunks()` pushed: each chunk, SSE-checked, goes to `deliver` from the upstream connection's
        read callback, with no task woken per event (`deliver` returns True when its consumer is full;
        then reading pauses until `resume_reading()`). Returns when the stream ended; raises its error."""
        ok = False
        response = self.response
        guard = self._guard or SseGuard(self.endpoint.id)
        try:
            first, self._first = self._first, None
            if first is not None:
                deliver(first)  # checked by the prefetch (its first event, where the reader checks the rest)
            if not response.ended():  # else the whole stream came with its head: nothing to wait for
                guard.forward_to(deliver, response.fail, self.reader_checks)
                await response.push(guard.relay)
            ok = True
        finally:
            guard.detach()
            self.close(ok)

    def resume_reading(self) -> None:
        """The consumer of `push()` has room again."""
        self.response.resume()

    def close(self, ok: bool = False) -> None:
        self.response.close()
        self._finish(ok)

    def _finish(self, ok: bool) -> None:
        if self._open:
            self._open = False
            self._stats.finished(self._clock() - self._started, ok)
            if self.span is not None:
                end_span(self.span, None if ok else "the exchange did not complete")
            if self.on_finish is not None:
                self.on_finish()


def _error_message(event: bytes) -> str:
    try:
        error = orjson.loads(event.split(b"\n", 1)[0][5:])["error"]
        return str(error.get("message", error)) if isinstance(error, dict) else str(error)
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return event[:200].decode("utf-8", "replace")
