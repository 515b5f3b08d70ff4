"""Metric label bounds and the JSON log format (request id, trace id, redaction)."""

from __future__ import annotations

import logging

import orjson
from prometheus_client import generate_latest

from sits.telemetry.logging_setup import JsonFormatter, current_request_id, current_trace_id, redact
from sits.telemetry.metrics import OVERFLOW_LABEL, BoundedLabels, GatewayMetrics


def test_label_values_are_bounded():
    labels = BoundedLabels(2)
    assert [labels(v) for v in ("a", "b", "c", "a", "d")] == ["a", "b", OVERFLOW_LABEL, "a", OVERFLOW_LABEL]


def test_two_gateways_keep_separate_registries():
    one, two = GatewayMetrics(), GatewayMetrics()
    one.served("m", "m/ep-0", 200, 0.1, 0.05)
    assert b'sits_requests_total{endpoint="m/ep-0",model="m",status="200"} 1.0' in generate_latest(one.registry)
    assert b"m/ep-0" not in generate_latest(two.registry)


def test_endpoint_churn_cannot_grow_the_exposition_without_bound():
    metrics = GatewayMetrics(max_values_per_label=4)
    for i in range(50):
        metrics.served("m", f"m/ep-{i}", 200, 0.1, None)
    text = generate_latest(metrics.registry).decode()
    assert text.count("sits_requests_total{") == 5  # four endpoints plus "other"
    assert 'endpoint="other"' in text


def record(message: str, **extra: object) -> logging.LogRecord:
    r = logging.LogRecord("sits.test", logging.INFO, __file__, 1, message, None, None)
    for k, v in extra.items():
        setattr(r, k, v)
    return r


def test_json_lines_carry_request_and_trace_ids():
    request, trace = current_request_id.set("req-1"), current_trace_id.set("ab" * 16)
    try:
        line = orjson.loads(JsonFormatter().format(record("routed", model="m1", latency_ms=1.5)))
    finally:
        current_request_id.reset(request)
        current_trace_id.reset(trace)
    assert line["msg"] == "routed" and line["level"] == "info" and line["logger"] == "sits.test"
    assert line["request_id"] == "req-1" and line["trace_id"] == "ab" * 16
    assert line["model"] == "m1" and line["latency_ms"] == 1.5


def test_keys_never_reach_a_log_line():
    assert redact("Authorization: Bearer sk-live-abcdef123456") == "Authorization: Bearer [REDACTED]"
    assert "sk-proj" not in redact("key sk-proj-ABCDEFGH12345678 leaked")
    line = orjson.loads(JsonFormatter().format(record("calling with Bearer abc.def", header="Bearer xyz")))
    assert "abc.def" not in line["msg"] and "xyz" not in line["header"]


def test_histograms_render_cumulative_buckets_with_le_semantics():
    from prometheus_client.parser import text_string_to_metric_families

    metrics = GatewayMetrics()
    for seconds in (0.004, 0.005, 0.02, 7.0, 500.0):
        metrics.served("m", "m/ep-0", 200, seconds, None)
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())}
    samples = {(s.name, s.labels.get("le")): s.value for s in families["sits_request_duration_seconds"].samples}
    assert samples[("sits_request_duration_seconds_bucket", "0.005")] == 2  # 0.005 itself is <= 0.005
    assert samples[("sits_request_duration_seconds_bucket", "0.025")] == 3
    assert samples[("sits_request_duration_seconds_bucket", "10.0")] == 4
    assert samples[("sits_request_duration_seconds_bucket", "+Inf")] == 5
    assert samples[("sits_request_duration_seconds_count", None)] == 5
    assert abs(samples[("sits_request_duration_seconds_sum", None)] - 507.029) < 1e-9
