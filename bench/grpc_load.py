"""Closed-loop load for the gRPC bench: the same loop over HTTP/1.1 (raw httptools keep-alive
connections, bench/stream_probe.py's client) and over gRPC (the official grpcio aio client, one
channel: one HTTP/2 connection multiplexing every call, the way gRPC clients are used).

Each of `concurrency` workers sends requests back to back until the deadline or the request budget
runs out, recording time to the first answer bytes (first SSE event / first stream message) and to
the end of each answer. Every worker checks its first answer's content.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import grpc

from sits.api.grpc import chat_pb2 as pb
from sits.api.grpc import chat_pb2_grpc
from sits.api.grpc.client_codec import chunks_of, completion_of
from stream_probe import _Connection, build_request, check_completion_body, check_stream_body

EXPECTED_TEXT = "Hello from the bench upstream."
STREAM_CHUNKS = 8


@dataclass
class LoadResult:
    concurrency: int
    duration_s: float = 0.0
    ok: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    first_us: list[float] = field(default_factory=list)
    total_us: list[float] = field(default_factory=list)

    def fail(self, problem: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(problem)


def grpc_request(stream: bool) -> pb.ChatCompletionRequest:
    """bench/measure.py's body_bytes(stream), as a ChatCompletionRequest."""
    del stream  # the RPC decides
    return pb.ChatCompletionRequest(model="bench-model", max_tokens=16, temperature=0.0, messages=[
        pb.ChatMessage(role="system", content="You are a terse assistant."),
        pb.ChatMessage(role="user", content="Say hello to the benchmark."),
    ])


async def run_http(port: int, body: bytes, stream: bool, concurrency: int, duration_s: float,
                   max_requests: int) -> LoadResult:
    request = build_request("127.0.0.1", port, "/v1/chat/completions", body)
    return await _run(concurrency, duration_s, max_requests,
                      lambda result, deadline, budget: _http_worker(port, request, stream, result, deadline, budget))


async def run_grpc(port: int, request: pb.ChatCompletionRequest, stream: bool, concurrency: int, duration_s: float,
                   max_requests: int, compression: grpc.Compression | None = None) -> LoadResult:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = chat_pb2_grpc.ChatCompletionsStub(channel)
        await channel.channel_ready()
        return await _run(concurrency, duration_s, max_requests,
                          lambda result, deadline, budget: _grpc_worker(stub, request, stream, compression, result,
                                                                        deadline, budget))


async def _run(concurrency: int, duration_s: float, max_requests: int, worker) -> LoadResult:
    result = LoadResult(concurrency)
    budget = [max_requests]
    start = time.perf_counter()
    await asyncio.gather(*(worker(result, start + duration_s, budget) for _ in range(concurrency)))
    result.duration_s = time.perf_counter() - start
    return result


async def _http_worker(port: int, request: bytes, stream: bool, result: LoadResult, deadline: float,
                       budget: list[int]) -> None:
    loop = asyncio.get_running_loop()
    conn: _Connection | None = None
    checked = False
    while time.perf_counter() < deadline and budget[0] > 0:
        budget[0] -= 1
        try:
            if conn is None or conn.transport is None or not conn.keep_alive:
                _, conn = await loop.create_connection(_Connection, "127.0.0.1", port)
            t0 = time.perf_counter_ns()
            end = await asyncio.wait_for(conn.send(request), timeout=30)
        except (OSError, ConnectionError, TimeoutError) as exc:
            result.fail(repr(exc))
            if conn is not None and conn.transport is not None:
                conn.transport.close()
            conn = None
            continue
        problem = f"HTTP {conn.status}: {bytes(conn.body[:200])!r}" if conn.status != 200 else None
        if problem is None and not checked:
            body = bytes(conn.body)
            problem = check_stream_body(body, STREAM_CHUNKS) if stream else check_completion_body(body)
            checked = True
        if problem:
            result.fail(problem)
            continue
        result.ok += 1
        result.first_us.append(((conn.first_event_ns or end) - t0) / 1000)
        result.total_us.append((end - t0) / 1000)
    if conn is not None and conn.transport is not None:
        conn.transport.close()


async def _grpc_worker(stub: chat_pb2_grpc.ChatCompletionsStub, request: pb.ChatCompletionRequest, stream: bool,
                       compression: grpc.Compression | None, result: LoadResult, deadline: float,
                       budget: list[int]) -> None:
    checked = False
    while time.perf_counter() < deadline and budget[0] > 0:
        budget[0] -= 1
        t0 = time.perf_counter_ns()
        first = 0
        text: list[str] = []
        try:
            if stream:
                chunks = 0
                async for message in stub.CreateStream(request, timeout=30, compression=compression):
                    if not first:
                        first = time.perf_counter_ns()
                    received = chunks_of(message)
                    chunks += len(received)
                    if not checked:
                        text += [choice.delta.content for c in received for choice in c.choices]
                end = time.perf_counter_ns()
                problem = None if chunks == STREAM_CHUNKS else f"expected {STREAM_CHUNKS} chunks, got {chunks}"
            else:
                response = await stub.Create(request, timeout=30, compression=compression)
                end = first = time.perf_counter_ns()
                if not checked:
                    text = [c.message.content for c in completion_of(response).choices]
                problem = None
        except grpc.aio.AioRpcError as exc:
            result.fail(f"{exc.code().name}: {exc.details()}")
            continue
        if problem is None and not checked:
            problem = None if "".join(text) == EXPECTED_TEXT else f"unexpected text {''.join(text)!r}"
            checked = True
        if problem:
            result.fail(problem)
            continue
        result.ok += 1
        result.first_us.append((first - t0) / 1000)
        result.total_us.append((end - t0) / 1000)
