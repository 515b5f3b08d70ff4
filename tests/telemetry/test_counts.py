"""Counters added to in place (`Count`): what a scrape shows, and label values bounded however many names
come through the hot-path caches."""

from __future__ import annotations

from prometheus_client.exposition import generate_latest

from sits.telemetry.metrics import OVERFLOW_LABEL, GatewayMetrics, Tally


def test_a_count_made_but_never_added_to_is_not_exposed():
    tally = Tally("sits_x", "x", ("a",))
    kept = tally.count(("never",))
    tally.inc(("once",), 2.0)
    assert tally.totals() == [(("once",), 2.0)]
    kept.value += 1.0  # a kept count is the series itself
    assert dict(tally.totals()) == {("once",): 2.0, ("never",): 1.0}
    assert tally.value(("never",)) == 1.0 and tally.value(("nowhere",)) == 0.0


def test_decisions_and_attempts_count_per_pair_and_bound_their_labels():
    metrics = GatewayMetrics(max_values_per_label=3)
    for i in range(6):
        metrics.decision(f"model-{i}", "only-endpoint")
        metrics.decision(f"model-{i}", "only-endpoint")
        metrics.attempt(f"model-{i}", f"ep-{i}", "ok", retry=False)
    decisions = dict(metrics.decisions.totals())
    assert decisions[("model-0", "only-endpoint")] == 2.0
    assert decisions[(OVERFLOW_LABEL, "only-endpoint")] == 6.0  # the three past the bound, twice each
    assert len(decisions) == 4
    attempts = dict(metrics.attempts.totals())
    assert attempts[("ep-2", "ok")] == 1.0 and attempts[(OVERFLOW_LABEL, "ok")] == 3.0


def test_served_requests_and_tokens_reach_the_exposition():
    metrics = GatewayMetrics()
    metrics.served("m", "m/ep-0", 200, 0.003, 0.001, (5, 7))
    metrics.served("m", "m/ep-0", 200, 0.2, None, (5, 0))
    metrics.served("m", "m/ep-0", 502, 0.01, None)
    text = generate_latest(metrics.registry).decode()
    assert 'sits_requests_total{endpoint="m/ep-0",model="m",status="200"} 2.0' in text
    assert 'sits_requests_total{endpoint="m/ep-0",model="m",status="502"} 1.0' in text
    assert 'sits_tokens_total{direction="input",model="m"} 10.0' in text
    assert 'sits_tokens_total{direction="output",model="m"} 7.0' in text
    assert 'sits_request_duration_seconds_bucket{endpoint="m/ep-0",le="0.005",model="m"} 1.0' in text
    assert 'sits_request_duration_seconds_bucket{endpoint="m/ep-0",le="0.25",model="m"} 3.0' in text
