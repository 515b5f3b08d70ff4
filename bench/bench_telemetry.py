"""What SITS' own telemetry costs per request, in-process (no network), on this machine.

    python bench/bench_telemetry.py [--n 50000] [--out bench/results/telemetry-latest.json]

1. Metrics: one answered request's recording (count, duration, TTFT, tokens, decision, attempt)
   with prometheus-client's own Counter/Histogram objects (labels() + inc()/observe()), against
   SITS' tallies (`GatewayMetrics`), which prometheus-client renders only at scrape time.
2. Tracing: a request's spans (server span, one stage, one upstream attempt with header injection)
   through `Tracing` with a no-op exporter, at sampling ratios 1.0, 0.01 and 0.0, and tracing off.
Each figure is the best of 3 repeats of `--n` requests (microseconds per request).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from prometheus_client import CollectorRegistry, Counter, Histogram

from sits.telemetry.metrics import LATENCY_BUCKETS, GatewayMetrics
from sits.telemetry.tracing import Tracing, TracingSettings, end_span


class NullExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def per_request_us(fn: Callable[[], None], n: int) -> float:
    return min(timeit.repeat(fn, number=n, repeat=3)) / n * 1e6


def prometheus_client_request() -> Callable[[], None]:
    r = CollectorRegistry()
    requests = Counter("req", "", ["model", "endpoint", "status"], registry=r)
    seconds = Histogram("dur", "", ["model", "endpoint"], buckets=LATENCY_BUCKETS, registry=r)
    ttft = Histogram("ttft", "", ["model", "endpoint"], buckets=LATENCY_BUCKETS, registry=r)
    tokens = Counter("tok", "", ["model", "direction"], registry=r)
    decisions = Counter("dec", "", ["model", "reason"], registry=r)
    attempts = Counter("att", "", ["endpoint", "outcome"], registry=r)

    def record() -> None:
        requests.labels("m", "m/ep-0", "200").inc()
        seconds.labels("m", "m/ep-0").observe(0.0012)
        ttft.labels("m", "m/ep-0").observe(0.0007)
        tokens.labels("m", "input").inc(5)
        tokens.labels("m", "output").inc(4)
        decisions.labels("m", "only-endpoint").inc()
        attempts.labels("m/ep-0", "ok").inc()
    return record


def sits_tallies_request() -> Callable[[], None]:
    m = GatewayMetrics()

    def record() -> None:
        m.served("m", "m/ep-0", 200, 0.0012, 0.0007, (5, 4))
        m.decision("m", "only-endpoint")
        m.attempt("m", "m/ep-0", "ok", False)
    return record


def traced_request(tracing: Tracing) -> Callable[[], None]:
    def one() -> None:
        trace = tracing.start_request("POST", "/v1/chat/completions", {}, {"gen_ai.request.model": "m"})
        if trace is None:
            return
        end_span(trace.stage("schedule"))
        span, _headers = trace.attempt("chat", "m", {"server.port": 8000})
        end_span(span)
        trace.finish(200, {"sits.endpoint": "m/ep-0"})
    return one


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--out", type=Path, default=Path("bench/results/telemetry-latest.json"))
    args = parser.parse_args()
    rows: dict[str, float] = {
        "metrics: prometheus-client objects": per_request_us(prometheus_client_request(), args.n),
        "metrics: SITS tallies": per_request_us(sits_tallies_request(), args.n),
        "tracing off": per_request_us(traced_request(Tracing(TracingSettings())), args.n),
    }
    for ratio in (1.0, 0.01, 0.0):
        tracing = Tracing(TracingSettings(ratio=ratio, schedule_delay_s=0.2), exporter=NullExporter())
        rows[f"tracing on, ratio {ratio:g}"] = per_request_us(traced_request(tracing), max(1, args.n // 5))
        tracing.shutdown()
    for name, us in rows.items():
        print(f"{name:<40} {us:8.2f} us/request")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"python": platform.python_version(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                    "n": args.n, "us_per_request": rows}, indent=1))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
