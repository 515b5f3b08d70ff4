"""Admission by priority: the gate a request passes before it may reach a backend.

Classes P0 (real-time), P1 (interactive), P2 (batch). The gate holds at most `limit()` requests
in flight (a callable, so an adaptive limiter drives it) and queues the rest FIFO per class:

- strict priority: a freed slot goes to the oldest P0, else the oldest P1, else the oldest P2;
- per-class slot shares reserve headroom, so a P0 arriving during a P2 flood usually finds a
  free slot instead of a queue (P2 may use 80% of the limit by default);
- bounded queues: each class has its own bound and all classes share `max_queued`; when the
  shared bound is full an arrival evicts the newest waiter of the lowest class below it
  (429 `shed`), else it is refused (429 `queue_full`);
- a waiter whose deadline passes is failed (503 `queue_timeout`) and never gets a slot;
- `Retry-After` on every refusal comes from the observed drain rate.

Everything is pure bookkeeping on the event loop thread; the clock is injected.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from sits.errors import Overloaded
from sits.pipeline.priority import CLASSES, Priority
from sits.state.admission_config import AdmissionConfig, AimdLimitConfig, FixedLimitConfig
from sits.state.concurrency_limit import (
    AimdLimiter,
    AimdSettings,
    ConcurrencyLimiter,
    EnginePressure,
    FixedLimiter,
    GradientLimiter,
    GradientSettings,
    LimitBounds,
)

@dataclass(frozen=True, slots=True)
class GatePolicy:
    """Per-class tuples are indexed by `Priority` (P0, P1, P2)."""

    queue_limits: tuple[int, int, int] = (64, 256, 1024)
    max_queued: int = 1024  # all classes together; a more urgent arrival displaces a less urgent waiter
    slot_share: tuple[float, float, float] = (1.0, 1.0, 0.8)  # of the limit each class may fill
    max_wait_s: tuple[float, float, float] = (5.0, 30.0, 120.0)  # queue deadline when the caller has none
    max_retry_after_s: int = 60

    def __post_init__(self) -> None:
        if any(n < 0 for n in self.queue_limits) or self.max_queued < 0:
            raise ValueError("queue limits must be >= 0")
        if not all(0.0 < s <= 1.0 for s in self.slot_share):
            raise ValueError("slot shares must be in (0, 1]")
        if list(self.slot_share) != sorted(self.slot_share, reverse=True):
            # Monotone shares keep priority strict: a class that may not start blocks every lower one.
            raise ValueError("slot shares must not increase from P0 to P2")
        if not all(w > 0 for w in self.max_wait_s) or self.max_retry_after_s < 1:
            raise ValueError("max_wait_s must be > 0 and max_retry_after_s >= 1")

    def allowed(self, priority: Priority, limit: int) -> int:
        """How many in flight a class may still start under; every class gets a slot of a limit >= 1."""
        share = self.slot_share[priority]
        if limit <= 0 or share >= 1.0:
            return max(0, limit)
        return max(1, math.floor(limit * share))

    def deadline(self, priority: Priority, now: float, requested: float | None = None) -> float:
        """The latest time a request of this class may leave the queue: its class's wait bound, or sooner."""
        bound = now + self.max_wait_s[priority]
        return bound if requested is None else min(bound, requested)


@dataclass(frozen=True, slots=True)
class ClassSnapshot:
    """Counters for one class since the gate was made; `queued` is the depth now."""

    priority: Priority
    queued: int
    admitted: int  # got a slot, at once or after waiting
    waited: int  # of those admitted, how many queued first
    rejected: int  # refused on arrival: queue full or no capacity (429/503)
    shed: int  # evicted from the queue by a more urgent arrival (429)
    expired: int  # deadline passed before a slot came (503), on arrival or while queued
    cancelled: int  # the caller went away while queued
    wait_total_s: float
    wait_max_s: float


@dataclass(frozen=True, slots=True)
class GateSnapshot:
    in_flight: int
    limit: int
    drain_per_s: float | None
    classes: tuple[ClassSnapshot, ...]  # P0, P1, P2


@dataclass(slots=True)
class _Tally:
    admitted: int = 0
    waited: int = 0
    rejected: int = 0
    shed: int = 0
    expired: int = 0
    cancelled: int = 0
    wait_total_s: float = 0.0
    wait_max_s: float = 0.0


class _Waiter:
    __slots__ = ("priority", "deadline", "enqueued_at", "future", "timer")

    def __init__(self, priority: Priority, deadline: float | None, enqueued_at: float,
                 future: asyncio.Future[float]) -> None:
        self.priority = priority
        self.deadline = deadline
        self.enqueued_at = enqueued_at
        self.future = future
        self.timer: asyncio.TimerHandle | None = None


class _DrainMeter:
    """Completions per second over the last `size` completions, measured up to now."""

    __slots__ = ("_times",)

    def __init__(self, size: int = 64) -> None:
        self._times: deque[float] = deque(maxlen=size)

    def record(self, now: float) -> None:
        self._times.append(now)

    def rate(self, now: float) -> float | None:
        times = self._times
        if len(times) < 2 or now <= times[0]:
            return None
        # Measured to now, not to the last completion: a gate that stopped draining reads as slow.
        return (len(times) - 1) / (now - times[0])


class Ticket:
    """A held slot. `release()` gives it back; calling it again does nothing."""

    __slots__ = ("priority", "waited_s", "_gate", "_held")

    def __init__(self, gate: PriorityGate, priority: Priority, waited_s: float) -> None:
        self.priority = priority
        self.waited_s = waited_s
        self._gate = gate
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._gate._release_slot()


class PriorityGate:
    """Bounded per-class queues in front of a concurrency limit; see the module docstring."""

    def __init__(
        self,
        limit: Callable[[], int],
        policy: GatePolicy = GatePolicy(),
        clock: Callable[[], float] = time.monotonic,
        name: str = "",
    ) -> None:
        self._limit = limit
        self._policy = policy
        self._clock = clock
        self._name = name
        self._in_flight = 0
        self._queues: tuple[deque[_Waiter], ...] = tuple(deque() for _ in CLASSES)
        self._tallies = tuple(_Tally() for _ in CLASSES)
        self._drain = _DrainMeter()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def queued(self, priority: Priority | None = None) -> int:
        if priority is None:
            return sum(len(q) for q in self._queues)
        return len(self._queues[priority])

    async def acquire(self, priority: Priority, deadline: float | None = None) -> Ticket:
        """A slot for a request of this class, waiting in its queue if need be.

        `deadline` is on the gate's clock: the latest time the request may still start.
        Raises `Overloaded`: 429 (`queue_full`, `shed`) or 503 (`no_capacity`, `queue_timeout`),
        each with a `retry-after` header. Cancelling the caller while queued leaves nothing held.
        """
        now = self._clock()
        tally = self._tallies[priority]
        if deadline is not None and deadline <= now:
            tally.expired += 1
            raise self._timed_out(priority, now)
        limit = self._limit()
        if limit <= 0:
            tally.rejected += 1
            raise Overloaded(f"{self._what()}has no capacity (concurrency limit is 0)", code="no_capacity",
                             http_status=503, headers=_retry_after(1))
        self._pump(now, limit)
        if self._may_start(priority, limit):
            self._in_flight += 1
            tally.admitted += 1
            return Ticket(self, priority, 0.0)
        self._make_room(priority, now)
        return await self._wait(priority, deadline, now)

    def try_acquire(self, priority: Priority) -> Ticket | None:
        """A slot at once if one is free and nobody waits, else None (then `acquire`, which queues).

        The common case without a coroutine: admission runs on every request, queueing on few."""
        if any(self._queues):
            return None
        limit = self._limit()
        if limit <= 0 or not self._may_start(priority, limit):
            return None
        self._in_flight += 1
        self._tallies[priority].admitted += 1
        return Ticket(self, priority, 0.0)

    def admit(self, priority: Priority, deadline: float | None = None) -> Admitted:
        """`acquire` and `release` around a block that uses the slot in full (`async with`)."""
        return Admitted(self, priority, deadline)

    def wake(self) -> None:
        """Hand out slots after the limit rose; releases and arrivals do this anyway."""
        self._pump(self._clock(), self._limit())

    def snapshot(self) -> GateSnapshot:
        now = self._clock()
        classes = tuple(
            ClassSnapshot(p, len(self._queues[p]), t.admitted, t.waited, t.rejected, t.shed, t.expired,
                          t.cancelled, t.wait_total_s, t.wait_max_s)
            for p, t in zip(CLASSES, self._tallies)
        )
        return GateSnapshot(self._in_flight, self._limit(), self._drain.rate(now), classes)

    # --- internals -------------------------------------------------------------------------

    def _may_start(self, priority: Priority, limit: int) -> bool:
        return self._in_flight < self._policy.allowed(priority, limit)

    def _make_room(self, priority: Priority, now: float) -> None:
        """Raise 429 unless a waiter of this class fits, evicting a less urgent one if that makes room."""
        policy = self._policy
        if len(self._queues[priority]) >= policy.queue_limits[priority]:
            self._tallies[priority].rejected += 1
            raise self._refused(priority, now, "queue_full",
                                f"{self._what()}queue for {priority.name} is full")
        if self.queued() < policy.max_queued:
            return
        for lower in reversed(CLASSES[priority + 1:]):  # the least urgent class goes first
            queue = self._queues[lower]
            if queue:
                victim = queue.pop()  # the newest: it has waited least
                self._tallies[lower].shed += 1
                self._fail(victim, self._refused(lower, now, "shed",
                                                 f"{self._what()}shed {lower.name} work for more urgent requests"))
                return
        self._tallies[priority].rejected += 1
        raise self._refused(priority, now, "queue_full", f"{self._what()}admission queue is full")

    async def _wait(self, priority: Priority, deadline: float | None, now: float) -> Ticket:
        loop = asyncio.get_running_loop()
        waiter = _Waiter(priority, deadline, now, loop.create_future())
        self._queues[priority].append(waiter)
        if deadline is not None:
            # The timer is what wakes a waiter nobody releases a slot for; `_pump` also checks deadlines.
            waiter.timer = loop.call_later(deadline - now, self._expire, waiter)
        try:
            started = await waiter.future
        except asyncio.CancelledError:
            future = waiter.future
            if future.done() and not future.cancelled() and future.exception() is None:
                self._release_slot()  # granted, but the caller left before it could use the slot
            elif self._discard(waiter):
                self._tallies[priority].cancelled += 1
            raise
        finally:
            if waiter.timer is not None:
                waiter.timer.cancel()
        waited = max(0.0, started - waiter.enqueued_at)
        tally = self._tallies[priority]
        tally.waited += 1
        tally.wait_total_s += waited
        tally.wait_max_s = max(tally.wait_max_s, waited)
        return Ticket(self, priority, waited)

    def _pump(self, now: float, limit: int) -> None:
        """Give free slots to waiters: P0 first, FIFO within a class; drop the expired on the way."""
        if not any(self._queues):
            return  # the common case: nobody waits
        for priority in CLASSES:
            queue = self._queues[priority]
            tally = self._tallies[priority]
            while queue and self._may_start(priority, limit):
                waiter = queue.popleft()
                if waiter.future.done():  # only a cancelled waiter is still queued when done
                    tally.cancelled += 1
                    continue
                if waiter.deadline is not None and waiter.deadline <= now:
                    tally.expired += 1
                    self._fail(waiter, self._timed_out(priority, now))
                    continue
                self._in_flight += 1
                tally.admitted += 1
                waiter.future.set_result(now)
            if queue:
                return  # this class may not start, so no less urgent class may either

    def _release_slot(self) -> None:
        now = self._clock()
        self._in_flight -= 1
        self._drain.record(now)
        if any(self._queues):  # the common case has nobody waiting: no need to read the limit
            self._pump(now, self._limit())

    def _expire(self, waiter: _Waiter) -> None:
        if self._discard(waiter):
            self._tallies[waiter.priority].expired += 1
            self._fail(waiter, self._timed_out(waiter.priority, self._clock()))

    def _discard(self, waiter: _Waiter) -> bool:
        try:
            self._queues[waiter.priority].remove(waiter)
        except ValueError:
            return False
        return True

    @staticmethod
    def _fail(waiter: _Waiter, error: Overloaded) -> None:
        if not waiter.future.done():
            waiter.future.set_exception(error)

    def _refused(self, priority: Priority, now: float, code: str, message: str) -> Overloaded:
        return Overloaded(message, code=code, http_status=429, headers=self._retry_after_for(priority, now))

    def _timed_out(self, priority: Priority, now: float) -> Overloaded:
        return Overloaded(f"{self._what()}{priority.name} request waited past its deadline for a slot",
                          code="queue_timeout", http_status=503, headers=self._retry_after_for(priority, now))

    def _retry_after_for(self, priority: Priority, now: float) -> tuple[tuple[str, str], ...]:
        """Seconds until the work now ahead of this class would drain at the observed rate."""
        ahead = sum(len(q) for q in self._queues[: priority + 1]) + 1
        rate = self._drain.rate(now)
        seconds = 1 if not rate else math.ceil(ahead / rate)
        return _retry_after(min(self._policy.max_retry_after_s, max(1, seconds)))

    def _what(self) -> str:
        return f"model '{self._name}' " if self._name else ""


def _retry_after(seconds: int) -> tuple[tuple[str, str], ...]:
    return (("retry-after", str(seconds)),)


class Admitted:
    """`async with gate.admit(priority)`: a slot held for the block. A class rather than an
    `asynccontextmanager` generator: the module is compiled (docs/hot-path.md)."""

    def __init__(self, gate: PriorityGate, priority: Priority, deadline: float | None) -> None:
        self._gate = gate
        self._priority = priority
        self._deadline = deadline
        self._ticket: Ticket | None = None

    async def __aenter__(self) -> Ticket:
        self._ticket = await self._gate.acquire(self._priority, self._deadline)
        return self._ticket

    async def __aexit__(self, *exc_info: object) -> None:
        if self._ticket is not None:
            self._ticket.release()


class PriorityGates:
    """One gate per model (its endpoint pool), made on first use with that pool's limit."""

    def __init__(self, limit_for: Callable[[str], Callable[[], int]], policy: GatePolicy = GatePolicy(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._limit_for = limit_for
        self._policy = policy
        self._clock = clock
        self._gates: dict[str, PriorityGate] = {}

    @property
    def policy(self) -> GatePolicy:
        return self._policy

    def get(self, model: str) -> PriorityGate:
        gate = self._gates.get(model)
        if gate is None:
            gate = self._gates[model] = PriorityGate(self._limit_for(model), self._policy, self._clock, model)
        return gate

    def snapshot(self) -> dict[str, GateSnapshot]:
        return {name: gate.snapshot() for name, gate in self._gates.items()}


def gate_policy(config: AdmissionConfig) -> GatePolicy:
    q, s, w = config.queue_size, config.slot_share, config.max_wait_s
    return GatePolicy((q.P0, q.P1, q.P2), config.max_queued, (s.P0, s.P1, s.P2), (w.P0, w.P1, w.P2),
                      config.max_retry_after_s)


def limiter_factory(config: AdmissionConfig) -> Callable[[], ConcurrencyLimiter]:
    """Makes one endpoint's limiter; pass it to `EndpointLimits`."""
    e = config.engine_pressure
    pressure = EnginePressure(e.kv_high, e.queue_allowance, e.min_factor)
    lim = config.limiter
    if isinstance(lim, FixedLimitConfig):
        return lambda: FixedLimiter(lim.limit, pressure)
    bounds = LimitBounds(lim.initial, lim.min, lim.max)
    if isinstance(lim, AimdLimitConfig):
        aimd = AimdSettings(bounds, lim.latency_target_s, lim.increase, lim.backoff, lim.decrease_cooldown_s)
        return lambda: AimdLimiter(aimd, pressure)
    gradient = GradientSettings(bounds=bounds, tolerance=lim.tolerance, smoothing=lim.smoothing,
                                queue_allowance=lim.queue_allowance, long_window=lim.long_window,
                                warmup=lim.warmup, rtt_floor_s=lim.rtt_floor_s)
    return lambda: GradientLimiter(gradient, pressure)
