"""A cheap keep-alive HTTP/1.1 client for SSE timing and response checks.

Raw asyncio.Protocol + httptools response parser (run it under uvloop). Each worker
owns one connection and sends requests back to back (closed loop); per request it
records the time to the first SSE `data:` event (TTFT) and the time to the end of
the response. Runs are bounded by a deadline and by a request count.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import httptools
import orjson


def build_request(host: str, port: int, path: str, body: bytes) -> bytes:
    return (
        b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer sk-bench\r\nContent-Length: %d\r\n\r\n"
        % (path.encode(), host.encode(), port, len(body))
    ) + body


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request in flight at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.done: asyncio.Future[int] | None = None
        self.status = 0
        self.body = bytearray()
        self.first_event_ns = 0
        self.keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost: {exc}"))

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.done is not None and not self.done.done():
                self.done.set_exception(exc)

    def send(self, request: bytes) -> asyncio.Future[int]:
        assert self.transport is not None
        self.done = asyncio.get_running_loop().create_future()
        self.status = 0
        self.body = bytearray()
        self.first_event_ns = 0
        self.transport.write(request)
        return self.done

    # httptools callbacks
    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, chunk: bytes) -> None:
        self.body += chunk
        if not self.first_event_ns and b"data:" in self.body:
            self.first_event_ns = time.perf_counter_ns()

    def on_message_complete(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(time.perf_counter_ns())


@dataclass
class ProbeResult:
    concurrency: int
    duration_s: float = 0.0
    ok: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    ttft_us: list[float] = field(default_factory=list)
    total_us: list[float] = field(default_factory=list)


def check_stream_body(body: bytes, expected_events: int) -> str | None:
    """None if body is a well-formed chat.completion.chunk SSE stream ending in [DONE]."""
    events = [line[5:].strip() for line in body.split(b"\n") if line.startswith(b"data:")]
    if not events or events[-1] != b"[DONE]":
        return "stream did not end with data: [DONE]"
    chunks = events[:-1]
    if expected_events and len(chunks) != expected_events:
        return f"expected {expected_events} chunks, got {len(chunks)}"
    text = []
    for raw in chunks:
        obj = orjson.loads(raw)
        if obj.get("object") != "chat.completion.chunk":
            return f"unexpected chunk object: {obj.get('object')!r}"
        for choice in obj.get("choices") or []:
            text.append((choice.get("delta") or {}).get("content") or "")
    if "".join(text) != "Hello from the bench upstream.":
        return f"unexpected streamed text {''.join(text)!r}"
    return None


def check_completion_body(body: bytes) -> str | None:
    obj = orjson.loads(body)
    if obj.get("object") != "chat.completion":
        return f"unexpected object {obj.get('object')!r}"
    content = obj["choices"][0]["message"]["content"]
    if content != "Hello from the bench upstream.":
        return f"unexpected content {content!r}"
    return None


async def _worker(
    host: str,
    port: int,
    request: bytes,
    deadline: float,
    budget: list[int],
    result: ProbeResult,
    expected_events: int,
    validate_every: int,
) -> None:
    loop = asyncio.get_running_loop()
    conn: _Connection | None = None
    n = 0
    while time.perf_counter() < deadline and budget[0] > 0:
        budget[0] -= 1
        try:
            if conn is None or conn.transport is None or not conn.keep_alive:
                if conn is not None and conn.transport is not None:
                    conn.transport.close()
                _, conn = await loop.create_connection(_Connection, host, port)
            t0 = time.perf_counter_ns()
            end = await asyncio.wait_for(conn.send(request), timeout=30)
        except (OSError, ConnectionError, httptools.HttpParserError, asyncio.TimeoutError) as exc:
            result.errors += 1
            if len(result.error_samples) < 5:
                result.error_samples.append(repr(exc))
            if conn is not None and conn.transport is not None:
                conn.transport.close()
            conn = None
            continue
        problem = None
        if conn.status != 200:
            problem = f"HTTP {conn.status}: {bytes(conn.body[:200])!r}"
        elif n % validate_every == 0:
            problem = check_stream_body(bytes(conn.body), expected_events)
        n += 1
        if problem:
            result.errors += 1
            if len(result.error_samples) < 5:
                result.error_samples.append(problem)
            continue
        result.ok += 1
        first = conn.first_event_ns or end
        result.ttft_us.append((first - t0) / 1000)
        result.total_us.append((end - t0) / 1000)
    if conn is not None and conn.transport is not None:
        conn.transport.close()


async def run_probe(
    host: str,
    port: int,
    path: str,
    body: bytes,
    concurrency: int,
    duration_s: float,
    max_requests: int,
    expected_events: int,
    validate_every: int = 64,
) -> ProbeResult:
    """Closed-loop streaming load: `concurrency` connections until deadline or count."""
    request = build_request(host, port, path, body)
    result = ProbeResult(concurrency=concurrency)
    budget = [max_requests]
    start = time.perf_counter()
    deadline = start + duration_s
    await asyncio.gather(
        *(
            _worker(host, port, request, deadline, budget, result, expected_events, validate_every)
            for _ in range(concurrency)
        )
    )
    result.duration_s = time.perf_counter() - start
    return result


async def fetch_once(host: str, port: int, method: str, path: str, body: bytes | None, timeout: float = 10.0) -> tuple[int, bytes]:
    """One request on a fresh connection: (status, body)."""
    loop = asyncio.get_running_loop()
    transport, conn = await asyncio.wait_for(loop.create_connection(_Connection, host, port), timeout)
    try:
        if method == "POST":
            request = build_request(host, port, path, body or b"")
        else:
            request = b"GET %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (path.encode(), host.encode(), port)
        await asyncio.wait_for(conn.send(request), timeout)
        return conn.status, bytes(conn.body)
    finally:
        transport.close()
