"""The floor for any Python gateway on this stack: a reverse proxy that does nothing but proxy.

uvloop + httptools on both sides, pooled keep-alive upstream connections, the body's `model` read
with orjson (a gateway must at least know where a request goes), the answer relayed (streamed
chunks framed as they arrive). No validation, routing, limits, metrics, logs or error handling
beyond what keeps it correct for the benchmark's traffic. Streamed chunks that arrive in one read leave
in one write (as SITS relays them): one write per HTTP chunk would make the floor slower than SITS. It is not SITS and not a product: it is
the ceiling a Python gateway's hot path can reach here, so SITS's cost can be read against it
(`bench_instructions.py --server floor`, `run_gateway_bench.py`'s targets).

Two shapes: `--shape callbacks` answers from protocol callbacks only (no coroutine per request, the
least work possible); `--shape tasks` runs each request as an asyncio task awaiting the upstream's
answer, the shape of any gateway written with async/await (SITS's).

    python bench/python_proxy_floor.py --upstream http://127.0.0.1:9000 --port 8080 [--shape tasks]
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from urllib.parse import urlsplit

import httptools
import orjson
import uvloop

OnHead = Callable[[int, bytes, bool], None]  # status, content-type, chunked


class Upstream(asyncio.Protocol):
    """One keep-alive connection to the upstream; one request at a time."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.sink: Client | None = None
        self.content_type = b"application/json"
        self.chunked = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        sink = self.sink
        self.parser.feed_data(data)
        if sink is not None:
            sink.flush()  # what this read brought, in one write

    def connection_lost(self, exc: Exception | None) -> None:
        if self in self.pool.idle:
            self.pool.idle.remove(self)

    def on_message_begin(self) -> None:
        self.chunked = False

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type":
            self.content_type = value
        elif name == b"transfer-encoding":
            self.chunked = b"chunked" in value.lower()

    def on_headers_complete(self) -> None:
        assert self.sink is not None
        self.sink.relay_head(self.parser.get_status_code(), self.content_type, self.chunked)

    def on_body(self, body: bytes) -> None:
        assert self.sink is not None
        self.sink.relay_body(body)

    def on_message_complete(self) -> None:
        sink, self.sink = self.sink, None
        self.pool.idle.append(self)
        assert sink is not None
        sink.relay_done()


class Pool:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.prefix = parts.path.rstrip("/").encode()
        self.idle: list[Upstream] = []

    async def connection(self) -> Upstream:
        if self.idle:
            return self.idle.pop()
        _, protocol = await asyncio.get_running_loop().create_connection(lambda: Upstream(self), self.host, self.port)
        return protocol

    def request_bytes(self, path: bytes, body: bytes) -> bytes:
        return b"POST %b HTTP/1.1\r\nhost: %b\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (
            self.prefix + path.removeprefix(b"/v1"), self.host.encode(), len(body), body)


class Client(asyncio.Protocol):
    def __init__(self, pool: Pool, tasks: bool) -> None:
        self.pool = pool
        self.tasks = tasks
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.parts_in: list[bytes] = []
        self.chunked = False
        self.finished: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.url, self.parts_in = b"", []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.parts_in.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.parts_in)
        orjson.loads(body)["model"]  # where the request goes: the least routing there is
        if self.tasks:
            self.loop.create_task(self.serve(body))
        else:
            self.loop.create_task(self.send(body)) if not self.pool.idle else self.write_upstream(self.pool.idle.pop(), body)

    async def serve(self, body: bytes) -> None:
        self.finished = self.loop.create_future()
        self.write_upstream(await self.pool.connection(), body)
        await self.finished

    async def send(self, body: bytes) -> None:
        self.write_upstream(await self.pool.connection(), body)

    def write_upstream(self, upstream: Upstream, body: bytes) -> None:
        upstream.sink = self
        assert upstream.transport is not None
        upstream.transport.write(self.pool.request_bytes(self.url, body))

    # -- the upstream's answer, relayed ---------------------------------------

    def relay_head(self, status: int, content_type: bytes, chunked: bool) -> None:
        self.chunked = chunked
        self.pending = b"HTTP/1.1 %d OK\r\ncontent-type: %b\r\n%b" % (
            status, content_type, b"transfer-encoding: chunked\r\n\r\n" if chunked else b"")
        self.parts: list[bytes] = []

    def relay_body(self, chunk: bytes) -> None:
        self.parts.append(b"%x\r\n%b\r\n" % (len(chunk), chunk) if self.chunked else chunk)

    def flush(self) -> None:
        """Chunked: relay the chunks framed so far (the end of one upstream read)."""
        if self.chunked and self.parts:
            assert self.transport is not None
            self.transport.write(self.pending + b"".join(self.parts))
            self.pending, self.parts = b"", []

    def relay_done(self) -> None:
        assert self.transport is not None
        if self.chunked:
            self.transport.write(self.pending + b"".join(self.parts) + b"0\r\n\r\n")
            self.pending, self.parts = b"", []
        else:
            payload = b"".join(self.parts)
            self.transport.write(self.pending + b"content-length: %d\r\n\r\n%b" % (len(payload), payload))
        if self.finished is not None:
            self.finished.set_result(None)
            self.finished = None


async def serve(args: argparse.Namespace) -> None:
    pool = Pool(args.upstream)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Client(pool, args.shape == "tasks"), args.host, args.port, backlog=1024)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", required=True, help="base URL of the upstream, e.g. http://127.0.0.1:9000/v1")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--shape", choices=("callbacks", "tasks"), default="callbacks")
    uvloop.run(serve(ap.parse_args()))


if __name__ == "__main__":
    main()
