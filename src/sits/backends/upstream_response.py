"""An upstream response as the pipeline reads it: status, headers, and a body that arrives in chunks,
read whole, pulled chunk by chunk, or pushed to a consumer from the connection's read callback.
The connection that feeds it and the pool: backends/http_client.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Final, Protocol, TYPE_CHECKING

from sits.backends.pulled_body import pulled_body

if TYPE_CHECKING:
    from sits.backends.http_client import _UpstreamConnection

_PAUSE_ABOVE_BYTES: Final = 1 << 20


class UpstreamBody(Protocol):
    """What the pipeline reads of an upstream's answer: an `UpstreamResponse`, or one translated as it
    is read (an Anthropic-API upstream's, backends/anthropic_upstream.py)."""

    status: int
    headers: dict[str, str]

    async def read(self) -> bytes: ...

    def iter_chunks(self) -> AsyncIterator[bytes]: ...

    async def next_chunk(self) -> bytes: ...

    def push(self, deliver: Callable[[bytes], bool]) -> asyncio.Future[None]: ...

    def resume(self) -> None: ...

    def ended(self) -> bool: ...

    def fail(self, error: BaseException) -> None: ...

    def first_chunk_within(self, seconds: float) -> None: ...

    def close(self) -> None: ...


class UpstreamResponse:
    """Status, headers and a body that arrives in chunks."""

    __slots__ = ("status", "headers", "_chunks", "_buffered", "_done", "_error", "_waiter", "_conn", "_loop", "_whole",
                 "_deliver", "_ended")

    def __init__(self, conn: _UpstreamConnection) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._done = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._conn: _UpstreamConnection | None = conn
        self._loop = conn._loop  # asyncio.get_running_loop() costs a getpid() per call on 3.11
        self._whole = False  # read() takes the whole body: reading never pauses for it
        self._deliver: Callable[[bytes], bool] | None = None  # push mode: where each chunk goes as it arrives
        self._ended: asyncio.Future[None] | None = None  # push mode: done when the body is

    async def read(self) -> bytes:
        """The whole body."""
        self._whole = True
        conn = self._conn
        if conn is not None and conn.paused:  # paused before read() began
            conn.resume()
        while not self._done:
            await self._wait()
        return self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)

    def iter_chunks(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive (each may join several network reads); closed when it ends."""
        return pulled_body(self)

    async def next_chunk(self) -> bytes:
        """The bytes that arrived since the last call, waiting for some; b"" once the body ended."""
        chunks = self._chunks
        while not chunks:
            if self._error is not None:
                raise self._error
            if self._done:
                return b""
            waiter = self._waiter = self._loop.create_future()
            await waiter
            self._waiter = None
        return self._take()

    def _take(self) -> bytes:
        """What is buffered, joined; reading goes on if a full buffer had paused it."""
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        conn = self._conn
        if conn is not None and conn.paused:
            conn.resume()
        return data

    def push(self, deliver: Callable[[bytes], bool]) -> asyncio.Future[None]:
        """Push mode, for relaying a stream: from now on each body chunk goes to `deliver` straight from
        the connection's read callback, so no task wakes up per chunk. `deliver` returns True when its
        consumer is full: reading then pauses until `resume()`. The future ends with the body, or fails
        with its error (a broken connection, a timeout, `fail()`)."""
        ended = self._ended = self._loop.create_future()
        full = False
        if self._chunks:  # what arrived before: first, in order
            full = deliver(self._take())
        if self._error is not None:
            ended.set_exception(self._error)
        elif self._done:
            ended.set_result(None)
        else:
            self._deliver = deliver
            conn = self._conn
            if conn is not None and conn.paused != full:
                conn.pause() if full else conn.resume()
        return ended

    def ended(self) -> bool:
        """The body ended well and all of it was taken: nothing is left to push (a stream that came in
        the read that brought its head)."""
        return self._done and not self._chunks and self._error is None

    def resume(self) -> None:
        """Push mode: the consumer has room again."""
        conn = self._conn
        if conn is not None and conn.paused:
            conn.resume()

    def fail(self, error: BaseException) -> None:
        """End the body with `error` (the consumer found it malformed) and drop the connection."""
        self._fail(error)
        self.close()

    def first_chunk_within(self, seconds: float) -> None:
        """Fail the body (UpstreamTimeout) unless its first bytes arrive within `seconds` (a stream's
        first token); checked by the pool's deadline sweep, like the first-byte and total timeouts."""
        if not self._chunks and not self._done and self._conn is not None:
            self._conn.expect_body_within(seconds)

    def close(self) -> None:
        """Abandon the body; an unfinished exchange closes its connection."""
        if not self._done and self._conn is not None:
            self._conn.abort()
        self._conn = None
        self._deliver = None
        ended = self._ended
        if ended is not None and not ended.done():
            ended.cancel()  # its consumer is gone: nobody will read an error set on it later

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self._error is not None:
            raise self._error

    # called by the connection
    def _feed(self, data: bytes) -> bool:
        """True: stop reading, the buffer is full (in push mode the connection calls `_deliver` instead)."""
        self._chunks.append(data)
        self._buffered += len(data)
        self._wake()
        return self._buffered > _PAUSE_ABOVE_BYTES and not self._whole

    def _finish(self) -> None:
        self._done = True
        self._conn = None
        self._deliver = None
        ended = self._ended
        if ended is not None and not ended.done():
            ended.set_result(None)
        self._wake()

    def _fail(self, error: BaseException) -> None:
        if not self._done and self._error is None:
            self._error = error
            self._deliver = None
            ended = self._ended
            if ended is not None and not ended.done():
                ended.set_exception(error)
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
