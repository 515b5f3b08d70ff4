"""Adaptive concurrency limiters: AIMD, gradient2, engine caps; limits always within bounds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits.state.concurrency_limit import (
    AimdLimiter,
    AimdSettings,
    EndpointLimits,
    EnginePressure,
    FixedLimiter,
    GradientLimiter,
    GradientSettings,
    LatencySample,
    LimitBounds,
)
from sits.state.engine_load import EngineLoad

BOUNDS = LimitBounds(initial=10, min=2, max=50)


def aimd(**kw) -> AimdLimiter:
    return AimdLimiter(AimdSettings(bounds=BOUNDS, latency_target_s=1.0, **kw))


def gradient(**kw) -> GradientLimiter:
    return GradientLimiter(GradientSettings(bounds=BOUNDS, **kw))


def busy(limiter, rtt: float, now: float = 0.0, dropped: bool = False) -> int:
    """A sample from an endpoint whose limit is what holds traffic back."""
    return limiter.update(LatencySample(rtt, in_flight=limiter.limit, dropped=dropped, now=now))


# --- AIMD --------------------------------------------------------------------------------------

def test_aimd_grows_additively_under_the_target():
    limiter = aimd()
    assert [busy(limiter, 0.1) for _ in range(3)] == [11, 12, 13]


def test_aimd_does_not_grow_when_application_limited():
    limiter = aimd()
    limiter.update(LatencySample(0.1, in_flight=2, now=0.0))
    assert limiter.limit == 10


@pytest.mark.parametrize("rtt,dropped", [(0.1, True), (5.0, False)])
def test_aimd_backs_off_on_a_drop_or_a_slow_sample(rtt, dropped):
    limiter = aimd(backoff=0.5)
    assert busy(limiter, rtt, dropped=dropped) == 5


def test_aimd_backs_off_once_per_cooldown():
    limiter = aimd(backoff=0.5, decrease_cooldown_s=1.0)
    results = [busy(limiter, 0.1, now=t, dropped=True) for t in (0.0, 0.1, 0.5, 1.0)]
    assert results == [5, 5, 5, 2]  # the burst at 0.0-0.5 is one congestion event; 2.5 floors at min 2


def test_aimd_stays_within_bounds():
    limiter = aimd()
    for _ in range(100):
        busy(limiter, 0.1)
    assert limiter.limit == 50
    for t in range(100):
        busy(limiter, 0.1, now=float(t) * 10, dropped=True)
    assert limiter.limit == 2


# --- gradient ----------------------------------------------------------------------------------

def test_gradient_probes_upwards_while_latency_is_steady():
    limiter = gradient()
    seen = [busy(limiter, 0.1) for _ in range(200)]
    assert seen[-1] == 50 and seen == sorted(seen)


def test_gradient_shrinks_when_latency_rises_past_tolerance():
    limiter = gradient(tolerance=1.5)
    for _ in range(200):
        busy(limiter, 0.1)
    before = limiter.limit
    for _ in range(20):
        busy(limiter, 0.5)  # 5x the long-term RTT: queueing
    assert limiter.limit < before / 2


def test_gradient_tolerates_latency_within_tolerance():
    limiter = gradient(tolerance=2.0)
    for _ in range(50):
        busy(limiter, 0.1)
    before = limiter.limit
    busy(limiter, 0.15)
    assert limiter.limit >= before


def test_gradient_ignores_application_limited_samples():
    limiter = gradient()
    limiter.update(LatencySample(10.0, in_flight=1))
    assert limiter.limit == 10


def test_gradient_treats_a_drop_as_strong_congestion():
    limiter = gradient(smoothing=1.0, queue_allowance=0)
    busy(limiter, 0.1)
    assert busy(limiter, 0.1, dropped=True) == 5


def test_gradient_long_rtt_recovers_after_latency_falls():
    limiter = gradient()
    for _ in range(50):
        busy(limiter, 1.0)
    for _ in range(200):
        busy(limiter, 0.1)
    assert limiter.long_rtt_s < 0.3


def test_gradient_survives_odd_rtts():
    limiter = gradient()
    for rtt in (0.0, -1.0, float("inf"), float("nan"), 1e-12, 1e9):
        busy(limiter, rtt)
        assert BOUNDS.min <= limiter.limit <= BOUNDS.max


# --- engine signals ----------------------------------------------------------------------------

@pytest.mark.parametrize("load,expected", [
    (None, 40),
    (EngineLoad("vllm"), 40),  # nothing reported
    (EngineLoad("vllm", kv_cache_usage=0.5, waiting=4), 40),  # below both thresholds
    (EngineLoad("vllm", kv_cache_usage=1.0), 20),  # a full cache: min_factor
    (EngineLoad("vllm", kv_cache_usage=0.925), 30),  # halfway from kv_high to full
    (EngineLoad("vllm", waiting=14), 30),  # 10 beyond the allowance
    (EngineLoad("vllm", waiting=1000), 20),  # never below min_factor
])
def test_engine_signals_cap_the_limit(load, expected):
    limiter = FixedLimiter(40, EnginePressure(kv_high=0.85, queue_allowance=4, min_factor=0.5))
    limiter.observe_engine(load)
    assert limiter.limit == expected


def test_the_cap_lifts_when_the_reading_goes_away():
    limiter = aimd()
    limiter.observe_engine(EngineLoad("vllm", kv_cache_usage=1.0))
    assert limiter.limit == 5
    limiter.observe_engine(None)
    assert limiter.limit == 10


def test_the_engine_cap_respects_min():
    limiter = AimdLimiter(AimdSettings(bounds=LimitBounds(initial=3, min=3, max=10)))
    limiter.observe_engine(EngineLoad("vllm", kv_cache_usage=1.0, waiting=99))
    assert limiter.limit == 3


@pytest.mark.parametrize("make", [
    lambda: LimitBounds(initial=1, min=2, max=3),
    lambda: LimitBounds(initial=5, min=1, max=3),
    lambda: AimdSettings(backoff=1.0),
    lambda: GradientSettings(tolerance=0.5),
    lambda: EnginePressure(kv_high=1.0),
    lambda: EnginePressure(min_factor=0.0),
])
def test_settings_reject_nonsense(make):
    with pytest.raises(ValueError):
        make()


def test_endpoint_limits_make_one_limiter_per_endpoint_and_sum_a_pool():
    limits = EndpointLimits(lambda: FixedLimiter(4))
    assert limits.get("a") is limits.get("a")
    assert limits.total(["a", "b", "c"]) == 12
    assert limits.snapshot() == {"a": 4, "b": 4, "c": 4}


# --- properties --------------------------------------------------------------------------------

SAMPLES = st.lists(st.tuples(
    st.floats(),  # rtt, NaN and infinities included
    st.integers(0, 10_000),  # in flight
    st.booleans(),  # dropped
    st.floats(0.0, 5.0),  # time step
    st.one_of(st.none(), st.builds(EngineLoad, st.just("vllm"), st.none() | st.integers(0, 10_000),
                                   st.none() | st.integers(0, 10_000), st.none() | st.floats(0.0, 1.0))),
), max_size=200)
BOUNDS_ST = st.integers(1, 100).flatmap(
    lambda lo: st.integers(lo, 1000).flatmap(
        lambda hi: st.integers(lo, hi).map(lambda init: LimitBounds(initial=init, min=lo, max=hi))))


@settings(max_examples=200, deadline=None)
@given(BOUNDS_ST, SAMPLES, st.sampled_from(["aimd", "gradient"]))
def test_limits_stay_within_bounds(bounds, samples, kind):
    limiter = (AimdLimiter(AimdSettings(bounds=bounds)) if kind == "aimd"
               else GradientLimiter(GradientSettings(bounds=bounds)))
    now = 0.0
    assert bounds.min <= limiter.limit <= bounds.max
    for rtt, in_flight, dropped, step, engine in samples:
        now += step
        limiter.observe_engine(engine)
        result = limiter.update(LatencySample(rtt, in_flight, dropped, now))
        assert isinstance(result, int) and bounds.min <= result <= bounds.max
        assert result == limiter.limit


@given(st.lists(st.floats(0.001, 10.0), min_size=1, max_size=100))
def test_aimd_never_grows_on_drops(rtts):
    limiter = aimd(decrease_cooldown_s=0.0)
    previous = limiter.limit
    for rtt in rtts:
        assert busy(limiter, rtt, dropped=True) <= previous
        previous = limiter.limit
