"""The pooled upstream client: the first-token deadline (a stream that sends headers and then nothing
fails with UpstreamTimeout; once its first bytes came, only the total deadline applies again) and reading
paused above 1 MiB buffered (resumed as the consumer takes chunks; never paused for a whole-body read)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from sits.backends.http_client import ConnectionPool, Origin, Timeouts, _UpstreamConnection
from sits.errors import UpstreamConnectError, UpstreamTimeout

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


@asynccontextmanager
async def serving(events: list[tuple[float, bytes]]) -> AsyncIterator[int]:
    """A server on a free port that answers every request with HEAD, then each (delay, bytes) in turn,
    and holds the connection open; everything it opened is closed and awaited on the way out."""
    handlers: list[asyncio.Task] = []
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        writers.append(writer)
        await reader.readuntil(b"{}")
        writer.write(HEAD)
        for delay, data in events:
            await asyncio.sleep(delay)
            writer.write(data)
        await reader.read()  # until the client closes

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        for writer in writers:
            writer.close()
        await asyncio.gather(*(w.wait_closed() for w in writers), return_exceptions=True)
        await server.wait_closed()


async def body_of(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([c async for c in chunks])


@pytest.fixture
async def pool() -> AsyncIterator[ConnectionPool]:
    pool = ConnectionPool()
    yield pool
    await pool.close()


async def test_a_stream_with_no_first_token_in_time_fails_with_a_timeout(pool):
    async with serving([(3.0, chunk(b"data: {}\n\n"))]) as port:
        response = await pool.request(Origin("http", "127.0.0.1", port), REQUEST, Timeouts(total=30))
        response.first_chunk_within(0.2)
        with pytest.raises(UpstreamTimeout, match="sent no token within 0.2s"):
            await asyncio.wait_for(body_of(response.iter_chunks()), 2)


async def test_after_the_first_token_slower_chunks_are_only_bound_by_the_total_deadline(pool):
    events = [(0.1, chunk(b"data: {}\n\n")), (0.6, chunk(b"data: [DONE]\n\n")), (0.0, b"0\r\n\r\n")]
    async with serving(events) as port:
        response = await pool.request(Origin("http", "127.0.0.1", port), REQUEST, Timeouts(total=30))
        response.first_chunk_within(0.3)  # the first token at 0.1 s is in time; the 0.6 s gap after it is fine
        body = await asyncio.wait_for(body_of(response.iter_chunks()), 5)
    assert body == b"data: {}\n\ndata: [DONE]\n\n"


async def test_a_body_over_the_read_buffer_limit_is_read_whole(pool):
    """Above 1 MiB buffered the connection pauses reading until the consumer catches up: `read()` (the
    whole body, e.g. a large embeddings answer) never pauses it, or the body would wait for the total deadline."""
    part = b"x" * (512 * 1024)
    events = [(0.02, chunk(part)) for _ in range(6)] + [(0.0, b"0\r\n\r\n")]
    async with serving(events) as port:
        origin = Origin("http", "127.0.0.1", port)
        response = await pool.request(origin, REQUEST, Timeouts(total=30))
        body = await asyncio.wait_for(response.read(), 5)
    assert body == part * 6


async def test_a_stream_consumer_that_lags_resumes_the_paused_connection(pool):
    part = b"data: {" + b"x" * (512 * 1024) + b"}\n\n"
    events = [(0.0, chunk(part)) for _ in range(6)] + [(0.0, chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")]
    async with serving(events) as port:
        response = await pool.request(Origin("http", "127.0.0.1", port), REQUEST, Timeouts(total=30))
        await asyncio.sleep(0.3)  # everything sent meanwhile: the buffer passes 1 MiB and reading pauses
        body = await asyncio.wait_for(body_of(response.iter_chunks()), 5)
    assert body == part * 6 + b"data: [DONE]\n\n"


async def test_a_pushed_stream_pauses_reading_while_its_consumer_is_full_and_delivers_everything_in_order(pool):
    part = b"data: {" + b"x" * (512 * 1024) + b"}\n\n"
    events = [(0.0, chunk(part)) for _ in range(6)] + [(0.0, chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")]
    got: list[bytes] = []
    async with serving(events) as port:
        response = await pool.request(Origin("http", "127.0.0.1", port), REQUEST, Timeouts(total=30))
        ended = response.push(lambda data: got.append(data) or True)  # full after every chunk
        await asyncio.sleep(0.3)
        conn = response._conn
        assert conn is not None and conn.paused and not ended.done()  # waiting for room, not reading
        while not ended.done():
            response.resume()
            await asyncio.sleep(0.01)
        await ended
    assert b"".join(got) == part * 6 + b"data: [DONE]\n\n"


async def test_a_pushed_stream_that_breaks_fails_its_future(pool):
    events = [(0.0, chunk(b"data: {}\n\n"))]
    async with serving(events) as port:
        response = await pool.request(Origin("http", "127.0.0.1", port), REQUEST, Timeouts(total=0.3))
        got: list[bytes] = []
        ended = response.push(lambda data: got.append(data) or False)
        with pytest.raises(UpstreamTimeout):
            await asyncio.wait_for(ended, 5)
    assert got == [b"data: {}\n\n"]


async def test_a_body_is_ended_only_once_it_came_whole_and_all_of_it_was_taken(pool):
    """`ended()` lets a relay skip waiting on a stream that came with its head: never while bytes are
    still to come or still buffered, never after a failure."""
    events = [(0.0, chunk(b"data: {}\n\n")), (0.2, chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")]
    async with serving(events) as port:
        response = await pool.request(Origin("http", "127.0.0.1", port), REQUEST, Timeouts(total=30))
        assert not response.ended()  # the body is still coming
        first = await asyncio.wait_for(response.next_chunk(), 5)
        assert first == b"data: {}\n\n" and not response.ended()
        await asyncio.sleep(0.5)  # the rest arrived and the body ended, but it is buffered, not taken
        assert not response.ended()
        assert await response.next_chunk() == b"data: [DONE]\n\n"
        assert response.ended()
    async with serving([(0.0, chunk(b"data: {}\n\n"))]) as port:
        broken = await pool.request(Origin("http", "127.0.0.1", port), REQUEST, Timeouts(total=0.2))
        with pytest.raises(UpstreamTimeout):
            await asyncio.wait_for(body_of(broken.iter_chunks()), 5)
        assert not broken.ended()


class _Transport:
    """Just enough of an asyncio transport to drive a connection's callbacks by hand."""

    def __init__(self) -> None:
        self.reading, self.written, self.closed = True, b"", False

    def write(self, data: bytes) -> None:
        self.written += data

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


async def test_a_body_that_fills_the_buffer_in_its_last_read_leaves_the_connection_reading(pool):
    """If the read that ends the body also passes 1 MiB buffered, the connection goes back to the pool
    paused: the next exchange on it would wait for its first byte forever. It is resumed on release."""
    origin = Origin("http", "127.0.0.1", 9)
    conn, transport = _UpstreamConnection(pool, origin), _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    headers_ready = conn.send(REQUEST, Timeouts(total=30))
    body = b"x" * ((1 << 20) + 10)
    conn.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body))
    response = await headers_ready
    assert transport.reading and not conn.paused
    assert pool._take_idle(origin) is conn  # back in the pool, reading
    assert await response.read() == body


async def test_a_refused_connection_drops_what_is_pooled_for_that_origin(pool):
    """A server that refuses connections went away: its pooled connections are from before it did."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    origin = Origin("http", "127.0.0.1", port)
    conn = await pool._connect(origin, Timeouts(connect=2))
    pool._release(conn)
    assert pool.idle_connections() == 1
    server.close()
    await server.wait_closed()
    with pytest.raises(UpstreamConnectError):
        await pool._connect(origin, Timeouts(connect=2))
    assert pool.idle_connections() == 0 and conn.closed


async def _idle_pair(pool: ConnectionPool, port: int) -> tuple[_UpstreamConnection, _UpstreamConnection]:
    origin = Origin("http", "127.0.0.1", port)
    older, newer = await pool._connect(origin, Timeouts(connect=2)), await pool._connect(origin, Timeouts(connect=2))
    pool._release(older)
    pool._release(newer)
    return older, newer


async def test_connections_idle_for_the_timeout_are_closed_and_the_newest_is_kept():
    """Idle keep-alive connections are closed once idle for the timeout (before the upstream server's own
    keep-alive closes them), oldest first; one released since stays pooled."""
    pool = ConnectionPool(idle_timeout_s=60.0)
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    try:
        older, newer = await _idle_pair(pool, server.sockets[0].getsockname()[1])
        loop = asyncio.get_running_loop()
        older.idle_since = loop.time() - 61.0  # idle past the timeout; `newer` only just released
        pool._expire_idle(loop)
        assert older.closed and not newer.closed
        assert pool.idle_connections() == 1
        assert pool._expiry is not None  # armed again for `newer`
        newer.idle_since = loop.time() - 61.0
        pool._expire_idle(loop)
        assert newer.closed and pool.idle_connections() == 0
        assert pool._expiry is None  # nothing idle: no timer ticking
    finally:
        await pool.close()
        server.close()
        await server.wait_closed()


async def test_the_idle_expiry_runs_by_itself():
    pool = ConnectionPool(idle_timeout_s=0.05)
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    try:
        older, newer = await _idle_pair(pool, server.sockets[0].getsockname()[1])
        for _ in range(200):  # at most 10 s: the timer is due after 0.05 s
            if pool.idle_connections() == 0:
                break
            await asyncio.sleep(0.05)
        assert older.closed and newer.closed and pool._expiry is None
    finally:
        await pool.close()
        server.close()
        await server.wait_closed()
