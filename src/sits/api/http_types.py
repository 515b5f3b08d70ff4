"""The HTTP edge's request and response values, independent of the server that carries them."""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Protocol

Headers = list[tuple[bytes, bytes]]

# Plain classes with their own __init__, not dataclasses: one of each is made per request, and compiled,
# a dataclass's generated __init__ still runs as Python (several times a plain class's cost).


class HttpRequest:
    """One parsed request. Header names are lower-case; the body is complete."""

    __slots__ = ("method", "path", "query", "headers", "body")

    def __init__(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body

    def __repr__(self) -> str:
        return f"HttpRequest({self.method} {self.path}, {len(self.body)} bytes)"


class HttpResponse:
    """A response whose body is known up front (sent with content-length)."""

    __slots__ = ("status", "body", "content_type", "headers")

    def __init__(self, status: int, body: bytes = b"", content_type: bytes = b"application/json",
                 headers: Headers | None = None) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers: Headers = [] if headers is None else headers

    def __repr__(self) -> str:
        return f"HttpResponse({self.status}, {len(self.body)} bytes)"


class ChunkSink(Protocol):
    """Where a pushed stream's chunks go: the client's connection, written to from the producer's own
    callbacks (an upstream connection's reads) without a task switch per chunk."""

    on_drained: Callable[[], None] | None  # set by the producer: called once a full sink has room again

    def send(self, chunk: bytes) -> bool:
        """Write one chunk (nothing once the client is gone); True when the client's buffer is full:
        the producer then stops until `on_drained`."""
        ...


class StreamingResponse:
    """A response relayed chunk by chunk (sent with chunked transfer-encoding).

    `chunks` is consumed exactly once; the server closes it (aclose) if the
    client goes away, which is how cancellation reaches the upstream call.
    `push`, when given, is the same stream for a server that can take chunks as they are produced: it
    sends every chunk into the sink and returns when the stream ended (cancelled if the client goes
    away). A server uses one of the two, never both.
    """

    __slots__ = ("status", "chunks", "content_type", "headers", "push")

    def __init__(self, status: int, chunks: AsyncIterable[bytes], content_type: bytes = b"text/event-stream",
                 headers: Headers | None = None, push: Callable[[ChunkSink], Awaitable[None]] | None = None) -> None:
        self.status = status
        self.chunks = chunks
        self.content_type = content_type
        self.headers: Headers = [] if headers is None else headers
        self.push = push


Handler = Callable[[HttpRequest], Awaitable[HttpResponse | StreamingResponse]]
