"""Size and time of gRPC message compression (none, gzip, LZ4) on real prompt text: 1 KB, 100 KB, 1 MB.

    python bench/bench_grpc_compression.py     # about 30 s; writes bench/results/grpc-compression.json
    python bench/bench_grpc_compression.py --update-docs   # and the tables in docs/grpc.md

Prompt text: the Python language reference (pydoc_data.topics, English prose) from the start; the 1 MB
prompt continues with the asyncio and email packages' source code (a documents-plus-code prompt, as a RAG or code
review call sends). Nothing is repeated to flatter the ratios.

Two measurements per size:
- codec: the serialized ChatCompletionRequest, compressed and decompressed in this process (median of
  repeated runs). gzip at zlib's default level 6 with a gzip header, what gRPC's gzip encoding does;
  LZ4 frame at its default (fast) level, what the gateway's lz4 fields use.
- end to end: sequential unary calls through `sits serve` (fast upstream, loopback), median and p90 of
  the full call: HTTP/JSON, gRPC plain, gRPC with gzip request compression, gRPC with an lz4_request.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import grpc  # noqa: E402
import lz4.frame  # noqa: E402
import orjson  # noqa: E402
import uvloop  # noqa: E402

from bench_grpc import DOCS, replace_between, start_sits_with_grpc  # noqa: E402
from grpc_load import run_grpc, run_http  # noqa: E402
from measure import percentile  # noqa: E402
from processes import ProcessSet  # noqa: E402
from sits.api.grpc import chat_pb2 as pb  # noqa: E402
from sits.api.grpc.client_codec import lz4_request  # noqa: E402
from targets import MODEL, start_upstream  # noqa: E402

RESULTS = BENCH_DIR / "results" / "grpc-compression.json"
LOG_DIR = BENCH_DIR / "results" / "tmp" / "logs-grpc-compression"
SIZES = {"1 KB": 1_000, "100 KB": 100_000, "1 MB": 1_000_000}
CALLS = {"1 KB": 200, "100 KB": 60, "1 MB": 20}


def prompt_corpus() -> str:
    from pydoc_data.topics import topics

    prose = "\n\n".join(topics[k] for k in sorted(topics))
    import email

    code = "\n\n".join(p.read_text() for package in (asyncio, email)
                       for p in sorted(Path(package.__file__).parent.glob("*.py")))
    return prose + "\n\n" + code


def request_for(text: str) -> pb.ChatCompletionRequest:
    return pb.ChatCompletionRequest(model=MODEL, max_tokens=16, messages=[
        pb.ChatMessage(role="system", content="Answer from the documents below."),
        pb.ChatMessage(role="user", content=text)])


def timed(fn, data: bytes, reps: int) -> float:
    """Median microseconds of fn(data)."""
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn(data)
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return round(statistics.median(samples), 1)


def codec_rows(label: str, serialized: bytes) -> list[dict]:
    reps = 200 if len(serialized) < 10_000 else 50 if len(serialized) < 500_000 else 30
    gz = gzip.compress(serialized, compresslevel=6, mtime=0)
    lz = lz4.frame.compress(serialized)
    rows = [{"size": label, "codec": "none", "bytes": len(serialized), "ratio": 1.0, "compress_us": 0.0,
             "decompress_us": 0.0}]
    for codec, packed, compress, decompress in [
        ("gzip", gz, lambda d: gzip.compress(d, compresslevel=6, mtime=0), gzip.decompress),
        ("lz4", lz, lz4.frame.compress, lz4.frame.decompress),
    ]:
        rows.append({"size": label, "codec": codec, "bytes": len(packed),
                     "ratio": round(len(serialized) / len(packed), 2),
                     "compress_us": timed(compress, serialized, reps), "decompress_us": timed(decompress, packed, reps)})
    return rows


async def end_to_end(label: str, request: pb.ChatCompletionRequest, ports: dict[str, int]) -> list[dict]:
    calls = CALLS[label]
    body = orjson.dumps({"model": MODEL, "max_tokens": 16, "messages": [
        {"role": m.role, "content": m.content} for m in request.messages]})
    wrapped = lz4_request(request)
    runs = {
        "http-json": lambda: run_http(ports["http"], body, False, 1, 120, calls),
        "grpc-none": lambda: run_grpc(ports["grpc"], request, False, 1, 120, calls),
        "grpc-gzip": lambda: run_grpc(ports["grpc"], request, False, 1, 120, calls, grpc.Compression.Gzip),
        "grpc-lz4": lambda: run_grpc(ports["grpc"], wrapped, False, 1, 120, calls),
    }
    rows = []
    for name, run in runs.items():
        await run()  # warm-up pass, same count
        result = await run()
        if result.errors:
            raise RuntimeError(f"{name} {label}: {result.error_samples}")
        p50, p90 = percentile(result.total_us, 50), percentile(result.total_us, 90)
        rows.append({"size": label, "client": name, "calls": result.ok,
                     "request_bytes": {"http-json": len(body), "grpc-none": request.ByteSize(),
                                       "grpc-gzip": len(gzip.compress(request.SerializeToString(), 6, mtime=0)),
                                       "grpc-lz4": wrapped.ByteSize()}[name],
                     "p50_ms": round((p50 or 0) / 1000, 3), "p90_ms": round((p90 or 0) / 1000, 3)})
    return rows


def main() -> int:
    corpus = prompt_corpus()
    assert len(corpus) >= max(SIZES.values()), len(corpus)
    procs = ProcessSet(LOG_DIR)
    started = time.time()
    codec, e2e = [], []
    try:
        upstream = start_upstream(procs, None)
        http_port, grpc_port, _ = start_sits_with_grpc(procs, upstream.port, None)
        ports = {"http": http_port, "grpc": grpc_port}
        for label, size in SIZES.items():
            request = request_for(corpus[:size])
            codec += codec_rows(label, request.SerializeToString())
            e2e += uvloop.run(end_to_end(label, request, ports))
    finally:
        procs.stop_all()
    report = {"command": "python bench/bench_grpc_compression.py",
              "when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "wall_s": round(time.time() - started, 1),
              "machine": {"nproc": os.cpu_count(), "python": platform.python_version(), "grpcio": grpc.__version__,
                          "lz4": lz4.version.version, "loadavg_end": " ".join(f"{x:.2f}" for x in os.getloadavg())},
              "codec": codec, "end_to_end": e2e}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    tables = render(codec, e2e)
    print(tables)
    print(f"\nwrote {RESULTS.relative_to(BENCH_DIR.parent)}")
    if "--update-docs" in sys.argv[1:]:
        replace_between(DOCS, "<!-- compression:begin -->", "<!-- compression:end -->", tables)
    return 0


def render(codec: list[dict], e2e: list[dict]) -> str:
    lines = ["| prompt | codec | bytes | ratio | compress µs | decompress µs |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['size']} | {r['codec']} | {r['bytes']:,} | {r['ratio']} | {r['compress_us']} | "
              f"{r['decompress_us']} |" for r in codec]
    lines += ["", "Whole unary calls through `sits serve` over loopback (fast upstream; sequential; p50 / p90 ms):", "",
              "| prompt | client | request bytes | p50 ms | p90 ms |", "|---|---|---|---|---|"]
    lines += [f"| {r['size']} | {r['client']} | {r['request_bytes']:,} | {r['p50_ms']} | {r['p90_ms']} |" for r in e2e]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
