"""The HTTP edge's request and response values, independent of the server that carries them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

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


@dataclass(slots=True)
class StreamingResponse:
    """A response relayed chunk by chunk (sent with chunked transfer-encoding).

    `chunks` is consumed exactly once; the server closes it (aclose) if the
    client goes away, which is how cancellation reaches the upstream call.
    """

    status: int
    chunks: AsyncIterator[bytes]
    content_type: bytes = b"text/event-stream"
    headers: Headers = field(default_factory=list)


Handler = Callable[[HttpRequest], Awaitable[HttpResponse | StreamingResponse]]
