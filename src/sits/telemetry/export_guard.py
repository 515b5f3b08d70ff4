"""Self-protection for span export: telemetry must never hurt the traffic it describes.

`ExportGuard` wraps the real exporter and keeps an EWMA of export latency and of the export
error share. Over 200 ms or over 5% errors it is *degraded*: the sampler then keeps only key
spans (the request's server span and its upstream attempts) and drops the per-stage ones.
The key spans keep flowing, so the guard keeps measuring and recovers by itself once exports
are fast and clean again. `BoundedSpanProcessor` caps what may wait for export and counts drops,
so a dead collector costs a bounded amount of memory and nothing on the event loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


@dataclass(frozen=True, slots=True)
class GuardPolicy:
    max_export_latency_s: float = 0.2
    max_error_share: float = 0.05
    latency_alpha: float = 0.3  # EWMA weight of the newest export
    error_alpha: float = 0.2
    max_queue: int = 4096


class ExportGuard(SpanExporter):
    def __init__(self, exporter: SpanExporter, policy: GuardPolicy = GuardPolicy(),
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._exporter = exporter
        self.policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self.latency_ewma_s = 0.0
        self.error_share = 0.0
        self.degraded = False
        self.reason = ""
        self.pending = 0  # spans handed to the batch processor, not yet exported
        self.exported = 0
        self.failed = 0
        self.dropped = 0
        self.exports = 0

    # -- the processor side ----------------------------------------------------------

    def admit(self) -> bool:
        """One more span may wait for export, unless the queue is full (then it is counted dropped)."""
        with self._lock:
            if self.pending >= self.policy.max_queue:
                self.dropped += 1
                return False
            self.pending += 1
            return True

    # -- the exporter side (the batch processor's worker thread) ------------------------

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        started = self._clock()
        try:
            result = self._exporter.export(spans)
        except Exception:  # an exporter bug must not kill the export thread
            result = SpanExportResult.FAILURE
        self.record(len(spans), self._clock() - started, result is SpanExportResult.SUCCESS)
        return result

    def record(self, count: int, seconds: float, ok: bool) -> None:
        p = self.policy
        with self._lock:
            self.pending = max(0, self.pending - count)
            self.exports += 1
            if ok:
                self.exported += count
            else:
                self.failed += count
            first = self.exports == 1
            self.latency_ewma_s = seconds if first else p.latency_alpha * seconds + (1 - p.latency_alpha) * self.latency_ewma_s
            error = 0.0 if ok else 1.0
            self.error_share = error if first else p.error_alpha * error + (1 - p.error_alpha) * self.error_share
            reasons = []
            if self.latency_ewma_s > p.max_export_latency_s:
                reasons.append(f"export latency {self.latency_ewma_s * 1000:.0f} ms > "
                               f"{p.max_export_latency_s * 1000:.0f} ms")
            if self.error_share > p.max_error_share:
                reasons.append(f"export errors {self.error_share:.0%} > {p.max_error_share:.0%}")
            self.degraded = bool(reasons)
            self.reason = "; ".join(reasons)

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)


class BoundedSpanProcessor(SpanProcessor):
    """A batch processor whose queue the guard bounds (and counts drops for)."""

    def __init__(self, guard: ExportGuard, schedule_delay_s: float = 1.0, max_batch: int = 512) -> None:
        self._guard = guard
        # The inner queue is never the limit: the guard refuses spans before it fills.
        self._batch = BatchSpanProcessor(guard, max_queue_size=guard.policy.max_queue * 2,
                                         schedule_delay_millis=schedule_delay_s * 1000,
                                         max_export_batch_size=max_batch)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if context is None or not context.trace_flags.sampled:
            return
        if self._guard.admit():
            self._batch.on_end(span)

    def shutdown(self) -> None:
        self._batch.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._batch.force_flush(timeout_millis)
