"""The HTTP edge's request and response values, independent of the server that carries them."""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

Headers = list[tuple[bytes, bytes]]


@dataclass(slots=True)
class HttpRequest:
    """One parsed request. Header names are lower-case; the body is complete."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


@dataclass(slots=True)
class HttpResponse:
    """A response whose body is known up front (sent with content-length)."""

    status: int
    body: bytes = b""
    content_type: bytes = b"application/json"
    headers: Headers = field(default_factory=list)


class ChunkSink(Protocol):
    """Where a pushed stream's chunks go: the client's connection, written to from the producer's own
    callbacks (an upstream connection's reads) without a task switch per chunk."""

    on_drained: Callable[[], None] | None  # set by the producer: called once a full sink has room again

    def send(self, chunk: bytes) -> bool:
        """Write one chunk (nothing once the client is gone); True when the client's buffer is full:
        the producer then stops until `on_drained`."""
        ...


@dataclass(slots=True)
class StreamingResponse:
    """A response relayed chunk by chunk (sent with chunked transfer-encoding).

    `chunks` is consumed exactly once; the server closes it (aclose) if the
    client goes away, which is how cancellation reaches the upstream call.
    `push`, when given, is the same stream for a server that can take chunks as they are produced: it
    sends every chunk into the sink and returns when the stream ended (cancelled if the client goes
    away). A server uses one of the two, never both.
    """

    status: int
    chunks: AsyncIterable[bytes]
    content_type: bytes = b"text/event-stream"
    headers: Headers = field(default_factory=list)
    push: Callable[[ChunkSink], Awaitable[None]] | None = None


Handler = Callable[[HttpRequest], Awaitable[HttpResponse | StreamingResponse]]
