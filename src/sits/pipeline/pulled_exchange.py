"""An exchange's body pulled as an async iterator (the HTTP/2 door, the gRPC door, a resumed stream).

An async generator, kept out of `exchange.py`: that module is compiled by mypyc, which compiles no
async generators (docs/hot-path.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from sits.backends.upstream_response import UpstreamBody
from sits.pipeline.sse_guard import SseGuard


async def checked_chunks(response: UpstreamBody, first: bytes | None, guard: SseGuard,
                         close: Callable[[bool], None]) -> AsyncIterator[bytes]:
    """`first` (the prefetched chunk, already checked), then the body's chunks, each SSE-checked;
    `close(ok)` when it ends, breaks or is abandoned."""
    ok = False
    try:
        if first is not None:
            yield first
        async for chunk in response.iter_chunks():
            guard.check(chunk)
            yield chunk
        ok = True
    finally:
        close(ok)
