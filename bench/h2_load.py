"""Closed-loop HTTP/2 (h2c, prior knowledge) load for bench/bench_http2.py: the same loop and checks as
bench/grpc_load.py's, over ONE HTTP/2 connection that multiplexes every worker's stream, the way an
HTTP/2 client is used. A bare asyncio protocol on `h2` (the server's library), not httpx: the client
side should cost as little as Python allows, so the numbers are about the gateway.
"""

from __future__ import annotations

import asyncio
import time

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, ResponseReceived, StreamEnded, StreamReset
from h2.settings import SettingCodes, Settings

from grpc_load import STREAM_CHUNKS, LoadResult, _run
from stream_probe import check_completion_body, check_stream_body

_WINDOW = 1 << 24


class _Response:
    __slots__ = ("done", "status", "body", "first_ns")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.done: asyncio.Future[int] = loop.create_future()
        self.status = 0
        self.body = bytearray()
        self.first_ns = 0


class H2Client(asyncio.Protocol):
    def __init__(self) -> None:
        self.conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        self.transport: asyncio.Transport | None = None
        self.responses: dict[int, _Response] = {}
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.conn.local_settings = Settings(client=True, initial_values={SettingCodes.INITIAL_WINDOW_SIZE: _WINDOW})
        self.conn.initiate_connection()
        self.conn.increment_flow_control_window(_WINDOW)
        self.transport.write(self.conn.data_to_send())

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        for response in self.responses.values():
            if not response.done.done():
                response.done.set_exception(ConnectionError(f"connection lost: {exc}"))

    def data_received(self, data: bytes) -> None:
        for event in self.conn.receive_data(data):
            response = self.responses.get(getattr(event, "stream_id", 0))
            if response is None:
                continue
            if isinstance(event, ResponseReceived):
                response.status = int(dict(event.headers)[b":status"])
            elif isinstance(event, DataReceived):
                if not response.first_ns:
                    response.first_ns = time.perf_counter_ns()
                response.body += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, StreamEnded):
                del self.responses[event.stream_id]
                response.done.set_result(time.perf_counter_ns())
            elif isinstance(event, StreamReset):
                del self.responses[event.stream_id]
                response.done.set_exception(ConnectionError(f"stream reset: {event.error_code!r}"))
        if self.transport is not None:
            self.transport.write(self.conn.data_to_send())

    def post(self, port: int, path: str, body: bytes) -> _Response:
        assert self.transport is not None
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, [
            (b":method", b"POST"), (b":path", path.encode()), (b":scheme", b"http"),
            (b":authority", b"127.0.0.1:%d" % port), (b"content-type", b"application/json"),
            (b"authorization", b"Bearer sk-bench"), (b"content-length", b"%d" % len(body)),
        ])
        self.conn.send_data(stream_id, body, end_stream=True)
        self.transport.write(self.conn.data_to_send())
        response = self.responses[stream_id] = _Response(self.loop)
        return response


async def run_h2(port: int, body: bytes, stream: bool, concurrency: int, duration_s: float,
                 max_requests: int) -> LoadResult:
    _, client = await asyncio.get_running_loop().create_connection(H2Client, "127.0.0.1", port)
    try:
        return await _run(concurrency, duration_s, max_requests,
                          lambda result, deadline, budget: _h2_worker(client, port, body, stream, result, deadline,
                                                                      budget))
    finally:
        if client.transport is not None:
            client.transport.close()


async def _h2_worker(client: H2Client, port: int, body: bytes, stream: bool, result: LoadResult, deadline: float,
                     budget: list[int]) -> None:
    checked = False
    while time.perf_counter() < deadline and budget[0] > 0:
        budget[0] -= 1
        t0 = time.perf_counter_ns()
        try:
            response = client.post(port, "/v1/chat/completions", body)
            end = await asyncio.wait_for(response.done, timeout=30)
        except (OSError, ConnectionError, TimeoutError, AssertionError) as exc:
            result.fail(repr(exc))
            if client.transport is None:
                return  # the one connection is gone: nothing left to measure on
            continue
        problem = f"HTTP {response.status}: {bytes(response.body[:200])!r}" if response.status != 200 else None
        if problem is None and not checked:
            answer = bytes(response.body)
            problem = check_stream_body(answer, STREAM_CHUNKS) if stream else check_completion_body(answer)
            checked = True
        if problem:
            result.fail(problem)
            continue
        result.ok += 1
        result.first_us.append(((response.first_ns or end) - t0) / 1000)
        result.total_us.append((end - t0) / 1000)
