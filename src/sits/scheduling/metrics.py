"""Per-plugin timings and decision counters the framework records.

Plain counters in memory: the telemetry layer reads `snapshot()` and exports them.
The timer is injected (e.g. `time.perf_counter_ns`) so scheduling reads no clock itself.

Timing is sampled: one decision in `timed_every` times every plugin it calls; the others read no
clock. `calls` and `total_ns` count the timed calls, so `total_ns / calls` is the mean cost per call;
decisions, empty results, clamped and broken scores are counted on every decision.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PluginTiming:
    name: str
    calls: int
    total_ns: int
    clamped: int  # calls whose scores had to be forced into [0, 1]
    broken: int  # calls that returned the wrong number of scores


# A timed decision costs two timer reads and a record per plugin more; timing one decision in 16
# keeps that a small share of the average decision (figures: bench/README.md, "measured").
DEFAULT_TIMED_EVERY = 16


class SchedulingMetrics:
    __slots__ = ("timer", "timed_every", "_tick", "_calls", "_ns", "_clamped", "_broken", "decisions", "empty")

    def __init__(self, timer: Callable[[], int], timed_every: int = DEFAULT_TIMED_EVERY) -> None:
        if timed_every < 1:
            raise ValueError("timed_every must be at least 1")
        self.timer = timer
        self.timed_every = timed_every
        self._tick = 0
        self._calls: dict[str, int] = {}
        self._ns: dict[str, int] = {}
        self._clamped: dict[str, int] = {}
        self._broken: dict[str, int] = {}
        self.decisions: dict[str, int] = {}  # by profile, every decision (empty ones too)
        self.empty: dict[tuple[str, str], int] = {}  # (profile, filter) that left no candidate

    def decision(self, profile: str) -> bool:
        """Count one decision of `profile`; True if it is to time its plugins (the first, then one in
        `timed_every`)."""
        self.decisions[profile] = self.decisions.get(profile, 0) + 1
        tick = self._tick
        self._tick = tick + 1 if tick + 1 < self.timed_every else 0
        return tick == 0

    def observe(self, plugin: str, ns: int) -> None:
        self._calls[plugin] = self._calls.get(plugin, 0) + 1
        self._ns[plugin] = self._ns.get(plugin, 0) + ns

    def clamped(self, plugin: str) -> None:
        self._clamped[plugin] = self._clamped.get(plugin, 0) + 1

    def broken(self, plugin: str) -> None:
        self._broken[plugin] = self._broken.get(plugin, 0) + 1

    def no_candidate(self, profile: str, filter_name: str) -> None:
        key = (profile, filter_name)
        self.empty[key] = self.empty.get(key, 0) + 1

    def snapshot(self) -> list[PluginTiming]:
        names = sorted(set(self._calls) | set(self._clamped) | set(self._broken))
        return [PluginTiming(n, self._calls.get(n, 0), self._ns.get(n, 0), self._clamped.get(n, 0),
                             self._broken.get(n, 0)) for n in names]


class NoSchedulingMetrics(SchedulingMetrics):
    """Scheduling without metrics (tests, `sits simulate`): nothing counted, no plugin timed."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(lambda: 0)

    def decision(self, profile: str) -> bool:
        return False

    def observe(self, plugin: str, ns: int) -> None:
        return None

    def clamped(self, plugin: str) -> None:
        return None

    def broken(self, plugin: str) -> None:
        return None

    def no_candidate(self, profile: str, filter_name: str) -> None:
        return None


NO_SCHEDULING_METRICS = NoSchedulingMetrics()
