"""Decision latency of SITS's endpoint picker (Envoy ext_proc, docs/envoy.md).

    python bench/bench_epp.py                 # about 30 s; writes bench/results/epp-latest.md
    python bench/bench_epp.py --requests 200  # quicker, noisier

A `sits serve --epp-port` process (its own process, as in a deployment) with one model of 1 or 16
endpoints; this process plays Envoy in full-duplex streaming mode, one stream per request, one request
at a time: request headers, the body in 62 KB chunks, then it waits for the headers' answer (the
pick: x-gateway-destination-endpoint and the envoy.lb metadata), reads the body streamed back and
sends the response path (headers, body) so every stream ends as in production. Decision latency is
from the first message written to the headers' answer read: body upload, parsing, model resolution,
scheduling and the answer, over loopback gRPC. Cells: a small chat body (about 100 bytes) and a
200 KB prompt, over 1 and 16 endpoints. The endpoints need not exist (the picker never sends them
traffic); health probes are slowed down and engine scraping is off so nothing marks them down or
adds background work during the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import grpc
import orjson
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

BENCH_DIR = Path(__file__).resolve().parent
SRC = BENCH_DIR.parent / "src"
RESULTS = BENCH_DIR / "results" / "epp-latest.md"
CHUNK = 62_000
DUPLEX = processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(endpoints: int, epp_port: int) -> dict:
    return {
        "server": {"epp_port": epp_port, "max_body_bytes": 4 * 1024 * 1024},
        "control": {"health": {"interval_s": 3600, "unhealthy_threshold": 100}},
        "routing": {"engine_metrics": {"enabled": False}},
        "models": [{"name": "m", "endpoints": [{"url": f"http://10.0.0.{i + 1}:8000/v1"} for i in range(endpoints)]}],
    }


def start_gateway(endpoints: int, folder: Path) -> tuple[subprocess.Popen, int]:
    epp_port = free_port()
    path = folder / f"epp-{endpoints}.yaml"
    path.write_text(json.dumps(config(endpoints, epp_port)))  # YAML is a superset of JSON
    env = {**os.environ, "PYTHONPATH": str(SRC), "SITS_DATA_DIR": str(folder / f"data-{endpoints}"),
           "SITS_LOG_LEVEL": "warning"}
    proc = subprocess.Popen([sys.executable, "-m", "sits", "serve", "--config", str(path), "--port",
                             str(free_port())], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if "endpoint picker" in line:
            return proc, epp_port
    proc.kill()
    raise RuntimeError("the gateway did not start its endpoint picker")


def messages(body: bytes) -> list[pb.ProcessingRequest]:
    headers = [(":method", "POST"), (":path", "/v1/chat/completions"), ("content-type", "application/json"),
               ("content-length", str(len(body)))]
    first = pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in headers])))
    first.protocol_config.request_body_mode = DUPLEX
    parts = [body[i:i + CHUNK] for i in range(0, len(body), CHUNK)]
    return [first, *(pb.ProcessingRequest(request_body=pb.HttpBody(body=p, end_of_stream=i == len(parts) - 1))
                     for i, p in enumerate(parts))]


RESPONSE = [
    pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=":status", raw_value=b"200")]))),
    pb.ProcessingRequest(response_body=pb.HttpBody(body=b"{}", end_of_stream=True)),
]


async def one(stub: pb_grpc.ExternalProcessorStub, request: list[pb.ProcessingRequest], body_answers: int) -> float:
    call = stub.Process()
    started = time.perf_counter()
    for m in request:
        await call.write(m)
    answer = await call.read()
    elapsed = time.perf_counter() - started
    assert answer.HasField("request_headers"), answer
    for _ in range(body_answers):
        await call.read()
    for m in RESPONSE:
        await call.write(m)
    await call.read()
    await call.read()
    await call.done_writing()
    await call.read()
    return elapsed


async def cell(port: int, body: bytes, requests: int, warmup: int) -> list[float]:
    request = messages(body)
    answers = max(1, -(-len(body) // CHUNK))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ExternalProcessorStub(channel)
        for _ in range(warmup):
            await one(stub, request, answers)
        return [await one(stub, request, answers) for _ in range(requests)]


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000.0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()
    small = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "What is the capital of France?"}],
                          "max_tokens": 64})
    large = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "lorem ipsum " * 16_667}],
                          "max_tokens": 64})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for endpoints in (1, 16):
            proc, port = start_gateway(endpoints, Path(tmp))
            try:
                for label, body in (("small", small), ("200 KB", large)):
                    samples = asyncio.run(cell(port, body, args.requests, args.warmup))
                    rows.append((label, len(body), endpoints, pct(samples, 0.5), pct(samples, 0.99), len(samples)))
                    print(f"{label:>7} body, {endpoints:>2} endpoints: p50 {rows[-1][3]:.3f} ms  "
                          f"p99 {rows[-1][4]:.3f} ms", flush=True)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    lines = [
        "# Endpoint picker decision latency",
        "",
        (f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}, {platform.python_implementation()} "
         f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs (shared), "
         f"`python bench/bench_epp.py --requests {args.requests}`."),
        "",
        ("One request at a time over one ext_proc stream each (full-duplex streaming): from the first message "
         "written to the headers' answer read. Gateway and client on the same host, loopback gRPC."),
        "",
        "| body | bytes | endpoints | p50 ms | p99 ms | requests |",
        "|---|---:|---:|---:|---:|---:|",
        *(f"| {label} | {size} | {n} | {p50:.3f} | {p99:.3f} | {count} |"
          for label, size, n, p50, p99, count in rows),
        "",
    ]
    RESULTS.write_text("\n".join(lines))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
