"""Export self-protection: degrade on slow or failing export, keep key spans, recover by itself."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import Decision

from sits.telemetry.export_guard import ExportGuard, GuardPolicy
from sits.telemetry.sampling import AdjustableSampler
from sits.telemetry.tracing import NO_TRACE, Tracing, TracingSettings


class ScriptedExporter(SpanExporter):
    """Takes `seconds` per export on the guard's clock and answers `result`."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.seconds = 0.01
        self.result = SpanExportResult.SUCCESS
        self.raises = False
        self.names: list[str] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.clock[0] += self.seconds
        if self.raises:
            raise ConnectionError("collector down")
        self.names += [s.name for s in spans]
        return self.result

    def shutdown(self) -> None:
        pass


def guard_with(policy: GuardPolicy = GuardPolicy()) -> tuple[ExportGuard, ScriptedExporter]:
    clock = [0.0]
    exporter = ScriptedExporter(clock)
    return ExportGuard(exporter, policy, clock=lambda: clock[0]), exporter


def test_slow_exports_degrade_and_fast_ones_recover():
    guard, exporter = guard_with()
    guard.export([])
    assert not guard.degraded
    exporter.seconds = 0.5
    for _ in range(3):
        guard.export([])
    assert guard.degraded and "export latency" in guard.reason
    exporter.seconds = 0.01
    for _ in range(10):
        guard.export([])
    assert not guard.degraded and guard.reason == ""


def test_export_errors_over_five_percent_degrade_then_recover():
    guard, exporter = guard_with()
    for _ in range(5):
        guard.export([])
    exporter.raises = True  # an exporter that raises counts as a failed export, it never kills the thread
    assert guard.export([]) is SpanExportResult.FAILURE
    assert guard.degraded and "export errors" in guard.reason
    exporter.raises = False
    for _ in range(20):
        guard.export([])
    assert not guard.degraded


def test_a_full_queue_drops_and_counts():
    guard, _ = guard_with(GuardPolicy(max_queue=3))
    assert [guard.admit() for _ in range(5)] == [True, True, True, False, False]
    assert guard.dropped == 2 and guard.pending == 3
    guard.record(3, 0.01, ok=True)
    assert guard.pending == 0 and guard.exported == 3 and guard.admit()


def test_degraded_sampler_keeps_key_spans_only():
    degraded = [False]
    sampler = AdjustableSampler(1.0, lambda: degraded[0])
    trace_id = 0x4BF92F3577B34DA6A3CE929D0E0E4736
    assert sampler.should_sample(None, trace_id, "sits.schedule").decision is Decision.RECORD_AND_SAMPLE
    degraded[0] = True
    assert sampler.should_sample(None, trace_id, "sits.schedule").decision is Decision.DROP
    assert sampler.should_sample(None, trace_id, "POST /v1/chat/completions").decision is Decision.RECORD_AND_SAMPLE
    assert sampler.should_sample(None, trace_id, "chat m1").decision is Decision.RECORD_AND_SAMPLE


def test_ratio_zero_samples_nothing_and_bad_ratios_are_refused():
    sampler = AdjustableSampler(0.0, lambda: False)
    assert sampler.should_sample(None, 12345, "POST /v1/chat/completions").decision is Decision.DROP
    for bad in (-0.1, 1.5):
        try:
            sampler.ratio = bad
        except ValueError as exc:
            assert "[0, 1]" in str(exc)
        else:
            raise AssertionError("accepted a bad ratio")


def test_environments_set_the_ratio():
    clock = [0.0]
    tracing = Tracing(TracingSettings(environment="production"), exporter=ScriptedExporter(clock))
    assert tracing.status()["sampling_ratio"] == 0.01
    tracing.set_sampling(environment="canary")
    assert tracing.status()["sampling_ratio"] == 0.1 and tracing.status()["environment"] == "canary"
    tracing.set_sampling(ratio=0.5)
    assert tracing.status()["sampling_ratio"] == 0.5
    tracing.shutdown()


def test_end_to_end_through_the_provider_drops_stage_spans_while_degraded():
    clock = [0.0]
    exporter = ScriptedExporter(clock)
    tracing = Tracing(TracingSettings(environment="poc"), exporter=exporter)
    assert tracing.guard is not None
    tracing.guard.degraded = True
    trace = tracing.start_request("POST", "/v1/chat/completions", {}, {})
    assert trace is not NO_TRACE
    assert trace.stage("schedule") is not None  # a non-recording span: created, never exported
    span, headers = trace.attempt("/chat/completions", "m1", "127.0.0.1", 8000, "m1/0", "m1")
    assert span is not None and headers.startswith(b"traceparent: 00-")
    span.end()
    trace.finish(200)
    tracing.flush()
    assert sorted(exporter.names) == ["POST /v1/chat/completions", "chat m1"]
    tracing.shutdown()


def test_tracing_is_off_without_an_endpoint():
    tracing = Tracing(TracingSettings())
    assert not tracing.enabled
    trace = tracing.start_request("POST", "/v1/chat/completions", {}, {})
    assert trace is NO_TRACE and not trace.recording
    assert trace.attempt("/chat/completions", "m1", "127.0.0.1", 8000, "m1/0", "m1") == (None, b"")
    assert trace.stage("schedule") is None and trace.within(None) is trace
    assert tracing.status() == {"enabled": False, "state": "off"}
