"""Adaptive per-endpoint concurrency limits: how many requests one endpoint should have in flight.

Each limiter is a pure state machine: it changes only when fed a `LatencySample` (which carries
its own `now`, so there is no hidden clock) or an engine reading. The admission gate reads
`limit`; the director feeds samples from exchange outcomes. Two algorithms, after Netflix's
concurrency-limits library:

- `AimdLimiter`: loss-based, like TCP. +`increase` per good sample, x`backoff` on a drop
  or a sample over the latency target, at most one decrease per cooldown.
- `GradientLimiter`: latency-based (gradient2). The limit follows long RTT / short RTT, so it
  shrinks as soon as queueing inside the engine shows up as latency, before anything fails.

Engine signals (queue depth, KV-cache use) cap the learned limit from outside rather than
changing it: a stale reading is dropped upstream, and the learned limit is still right afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from sits.state.engine_load import EngineLoad


class LatencySample(NamedTuple):
    """One finished (or failed) request on one endpoint.

    `rtt_s`: time to the upstream's first byte (the part of latency the engine's queue inflates);
    `in_flight`: requests in flight on that endpoint when it was sent, this one included;
    `dropped`: it timed out or the upstream refused it for load (429/503), so `rtt_s` says little.
    """

    rtt_s: float
    in_flight: int
    dropped: bool = False
    now: float = 0.0


@dataclass(frozen=True, slots=True)
class LimitBounds:
    initial: int = 16
    min: int = 1
    max: int = 512

    def __post_init__(self) -> None:
        if not 1 <= self.min <= self.initial <= self.max:
            raise ValueError(f"need 1 <= min <= initial <= max, got {self.min}, {self.initial}, {self.max}")

    def clamp(self, value: float) -> float:
        return min(float(self.max), max(float(self.min), value))


@dataclass(frozen=True, slots=True)
class EnginePressure:
    """How far an engine's own load signals cap the learned limit.

    KV-cache use above `kv_high` scales the limit down linearly, to `min_factor` at a full cache:
    admitting more would only make the engine preempt. Requests waiting inside the engine beyond
    `queue_allowance` are concurrency the engine cannot run now, so the limit loses that many.
    """

    kv_high: float = 0.85
    queue_allowance: int = 4
    min_factor: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.kv_high < 1.0:
            raise ValueError(f"kv_high must be in [0, 1), got {self.kv_high}")
        if self.queue_allowance < 0:
            raise ValueError(f"queue_allowance must be >= 0, got {self.queue_allowance}")
        if not 0.0 < self.min_factor <= 1.0:
            raise ValueError(f"min_factor must be in (0, 1], got {self.min_factor}")

    def factor(self, load: EngineLoad | None, limit: float) -> float:
        """A multiplier in [min_factor, 1] for `limit`; 1 when the engine reports nothing."""
        if load is None:
            return 1.0
        factor = 1.0
        kv = load.kv_cache_usage
        if kv is not None and kv > self.kv_high:
            over = (min(kv, 1.0) - self.kv_high) / (1.0 - self.kv_high)
            factor = 1.0 - over * (1.0 - self.min_factor)
        waiting = load.waiting
        if waiting is not None and waiting > self.queue_allowance and limit > 0:
            factor = min(factor, (limit - (waiting - self.queue_allowance)) / limit)
        return max(self.min_factor, factor)


class ConcurrencyLimiter(Protocol):
    """What the gate reads and the director feeds. `limit` is always within the bounds."""

    @property
    def limit(self) -> int: ...

    def update(self, sample: LatencySample) -> int:
        """Learn from one sample; returns the new limit."""
        ...

    def observe_engine(self, load: EngineLoad | None) -> None:
        """The endpoint engine's latest reading, or None once it is unknown or stale."""
        ...


class _EngineCapped:
    """The effective limit: the learned estimate under the engine's cap, as an int within bounds."""

    __slots__ = ("_bounds", "_pressure", "_engine", "_estimate", "_limit", "_limit_of")

    def __init__(self, bounds: LimitBounds, pressure: EnginePressure) -> None:
        self._bounds = bounds
        self._pressure = pressure
        self._engine: EngineLoad | None = None
        self._estimate = float(bounds.initial)
        self._limit = 0
        self._limit_of: tuple[float, EngineLoad | None] | None = None  # (estimate, engine) `_limit` was made from

    @property
    def estimate(self) -> float:
        """The learned limit before the engine cap."""
        return self._estimate

    @property
    def limit(self) -> int:
        # Read several times a request, changed by at most one sample: computed once per change.
        made_of = self._limit_of
        if made_of is None or made_of[0] != self._estimate or made_of[1] is not self._engine:
            capped = self._estimate * self._pressure.factor(self._engine, self._estimate)
            self._limit = int(self._bounds.clamp(math.floor(capped + 1e-9)))  # 29.999... from float noise is 30
            self._limit_of = (self._estimate, self._engine)
        return self._limit

    def observe_engine(self, load: EngineLoad | None) -> None:
        self._engine = load


class FixedLimiter(_EngineCapped):
    """A constant limit (still capped by engine signals); samples are ignored."""

    def __init__(self, limit: int, pressure: EnginePressure = EnginePressure()) -> None:
        super().__init__(LimitBounds(initial=limit, min=1, max=limit), pressure)

    def update(self, sample: LatencySample) -> int:
        return self.limit


@dataclass(frozen=True, slots=True)
class AimdSettings:
    bounds: LimitBounds = LimitBounds()
    latency_target_s: float = 2.0  # a sample slower than this counts as congestion
    increase: float = 1.0
    backoff: float = 0.9
    decrease_cooldown_s: float = 1.0  # a burst of failures from one overload backs off once, not N times

    def __post_init__(self) -> None:
        if self.latency_target_s <= 0 or self.increase <= 0 or self.decrease_cooldown_s < 0:
            raise ValueError("latency_target_s and increase must be > 0, decrease_cooldown_s >= 0")
        if not 0.0 < self.backoff < 1.0:
            raise ValueError(f"backoff must be in (0, 1), got {self.backoff}")


class AimdLimiter(_EngineCapped):
    def __init__(self, settings: AimdSettings = AimdSettings(), pressure: EnginePressure = EnginePressure()) -> None:
        super().__init__(settings.bounds, pressure)
        self._s = settings
        self._last_decrease: float | None = None

    def update(self, sample: LatencySample) -> int:
        s = self._s
        if sample.dropped or sample.rtt_s > s.latency_target_s:
            last = self._last_decrease
            if last is None or sample.now - last >= s.decrease_cooldown_s:
                self._last_decrease = sample.now
                self._estimate = s.bounds.clamp(self._estimate * s.backoff)
        elif sample.in_flight * 2 >= self._estimate:
            # Grow only when the limit is what holds traffic back: an idle endpoint proves nothing.
            self._estimate = s.bounds.clamp(self._estimate + s.increase)
        return self.limit


@dataclass(frozen=True, slots=True)
class GradientSettings:
    bounds: LimitBounds = LimitBounds()
    # short RTT may reach tolerance x long RTT before the limit shrinks; 1.2 / 2 keep the limit near the
    # engine's real concurrency, which is what lets P0 pass a P2 flood (bench/bench_admission.py)
    tolerance: float = 1.2
    smoothing: float = 0.2
    queue_allowance: int = 2  # headroom added each update, so the limit can probe upwards
    # RTTs below this never count as congestion: a fast upstream's sub-millisecond times are mostly the
    # gateway's own event loop under load, and shrinking the limit then only queues work in front of it.
    rtt_floor_s: float = 0.02
    long_window: int = 600  # samples in the long-RTT average
    warmup: int = 10  # samples averaged plainly before the long-RTT EWMA starts

    def __post_init__(self) -> None:
        if self.tolerance < 1.0:
            raise ValueError(f"tolerance must be >= 1, got {self.tolerance}")
        if not 0.0 < self.smoothing <= 1.0:
            raise ValueError(f"smoothing must be in (0, 1], got {self.smoothing}")
        if self.queue_allowance < 0 or self.long_window < 1 or self.warmup < 0:
            raise ValueError("queue_allowance and warmup must be >= 0, long_window >= 1")


class GradientLimiter(_EngineCapped):
    """Netflix gradient2: new = limit x clamp(tolerance x long/short, 0.5, 1) + queue, smoothed."""

    _MIN_RTT_S = 1e-6  # a zero RTT (clock granularity) must not divide by zero

    def __init__(self, settings: GradientSettings = GradientSettings(),
                 pressure: EnginePressure = EnginePressure()) -> None:
        super().__init__(settings.bounds, pressure)
        self._s = settings
        self._long_rtt = 0.0
        self._min_rtt = math.inf
        self._samples = 0

    @property
    def long_rtt_s(self) -> float:
        return self._long_rtt

    def update(self, sample: LatencySample) -> int:
        # Called for every upstream exchange: locals instead of repeated attribute reads.
        s = self._s
        rtt = sample.rtt_s
        if not rtt < math.inf:  # inf or NaN
            rtt = self._long_rtt * 2.0 if self._long_rtt > 0 else 1.0
        elif rtt < self._MIN_RTT_S:
            rtt = self._MIN_RTT_S
        samples = self._samples = self._samples + 1
        long_rtt = self._long_rtt
        if samples <= s.warmup or long_rtt == 0.0:
            long_rtt += (rtt - long_rtt) / min(samples, max(s.warmup, 1))
        else:
            long_rtt += (rtt - long_rtt) * 2.0 / (s.long_window + 1)
        if long_rtt / rtt > 2.0:
            # Latency fell for good (load left, a faster replica): let the long average catch up.
            long_rtt *= 0.95
        self._long_rtt = long_rtt
        # Under sustained overload the long average drifts up to the overloaded RTT and the limit
        # creeps up with it (a known gradient2 weakness). Anchor it to a slowly forgetting minimum.
        min_rtt = self._min_rtt * (1.0 + 0.1 / s.long_window)  # doubles in ~7 windows
        if rtt < min_rtt:
            min_rtt = rtt
        self._min_rtt = min_rtt
        estimate = self._estimate
        if sample.in_flight < estimate / 2 and not sample.dropped:
            return self.limit  # application-limited: the sample says nothing about a higher limit
        baseline = max(min(long_rtt, min_rtt * s.tolerance), s.rtt_floor_s)
        # A drop (timeout, upstream 429/503) is our addition to gradient2: the strongest "too much".
        gradient = 0.5 if sample.dropped else max(0.5, min(1.0, s.tolerance * baseline / rtt))
        target = estimate * gradient + s.queue_allowance
        self._estimate = s.bounds.clamp(estimate * (1.0 - s.smoothing) + target * s.smoothing)
        return self.limit


class EndpointLimits:
    """One limiter per endpoint id, made on first use; entries outlive routing-table swaps."""

    def __init__(self, make: Callable[[], ConcurrencyLimiter]) -> None:
        self._make = make
        self._by_endpoint: dict[str, ConcurrencyLimiter] = {}

    def get(self, endpoint_id: str) -> ConcurrencyLimiter:
        limiter = self._by_endpoint.get(endpoint_id)
        if limiter is None:
            limiter = self._by_endpoint[endpoint_id] = self._make()
        return limiter

    def total(self, endpoint_ids: Iterable[str]) -> int:
        """The pool's limit: what a gate in front of these endpoints may have in flight."""
        return sum(self.get(i).limit for i in endpoint_ids)

    def snapshot(self) -> dict[str, int]:
        return {i: lim.limit for i, lim in self._by_endpoint.items()}
