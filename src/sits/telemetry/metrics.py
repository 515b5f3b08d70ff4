"""Prometheus metrics of one gateway, on its own registry (two gateways in a process share nothing).

Why not prometheus-client's Counter/Histogram on the hot path: `python bench/bench_telemetry.py`
measures one request's metrics several times dearer with its objects (label lookup, a lock per child)
than here, where recording is a dict update and a bisect (the event loop is the only writer, so no
lock), a large share of SITS' whole per-request budget (figures: bench/README.md, "measured").
prometheus-client renders the exposition from these tallies at scrape
time (`collect`). What the gateway already tracks as state (in-flight, health, circuits) is read
only when scraped (`LiveStateCollector`).

Label values come from the routing table and fixed enums, and `BoundedLabels` caps each label at a
fixed number of distinct values, so a registry that churns through endpoints cannot grow the
exposition without bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
INTER_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.1, 0.25, 0.5, 1.0, 2.5)
QUEUE_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
OVERFLOW_LABEL = "other"

# Fixed vocabularies: the only values these labels take.
DECISION_REASONS = frozenset({
    "scheduled", "only-endpoint", "no-endpoint-ready", "cache-hit", "fallback-semantic-cache",
    "fallback-static-template", "auto-tier", "auto-intent", "auto-quality-router",
})
FALLBACK_KINDS = frozenset({"fallback", "larger-context", "semantic-cache", "static-template", "resumed-stream"})
CACHE_RESULTS = frozenset({"exact-hit", "semantic-hit", "miss"})


class BoundedLabels:
    """The first `limit` distinct values of a label pass through; later ones become 'other'."""

    __slots__ = ("_seen", "_limit")

    def __init__(self, limit: int) -> None:
        self._seen: set[str] = set()
        self._limit = limit

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) >= self._limit:
            return OVERFLOW_LABEL
        self._seen.add(value)
        return value


class Count:
    """One series of a `Tally`, added to in place: a hot caller keeps it and adds to `value` without a
    dictionary lookup or a float stored back per request."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0


class Tally:
    """A labelled counter: label-value tuple -> its `Count`."""

    __slots__ = ("name", "help", "labels", "values")

    def __init__(self, name: str, help_text: str, labels: tuple[str, ...]) -> None:
        self.name, self.help, self.labels = name, help_text, labels
        self.values: dict[tuple[str, ...], Count] = {}

    def count(self, key: tuple[str, ...]) -> Count:
        """The series of `key` (made at its first use), for a caller to keep."""
        count = self.values.get(key)
        if count is None:
            count = self.values[key] = Count()
        return count

    def inc(self, key: tuple[str, ...], amount: float = 1.0) -> None:
        self.count(key).value += amount

    def value(self, key: tuple[str, ...]) -> float:
        count = self.values.get(key)
        return 0.0 if count is None else count.value

    def totals(self) -> list[tuple[tuple[str, ...], float]]:
        """Every series and its total now; one made (`count`) but never added to is not shown."""
        return [(key, count.value) for key, count in list(self.values.items()) if count.value]

    def family(self) -> CounterMetricFamily:
        family = CounterMetricFamily(self.name, self.help, labels=self.labels)
        for key, value in self.totals():
            family.add_metric(key, value)
        return family


class Buckets:
    """One histogram series: per-bucket counts (not cumulative) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # le semantics: value == bound counts in it. A compiled scan over the dozen bounds, from the low end
        # where most values fall, costs a fraction of a call to bisect (docs/hot-path.md).
        at = 0
        for bound in self.bounds:
            if value <= bound:
                break
            at += 1
        self.counts[at] += 1
        self.sum += value


class Distribution:
    """A labelled histogram: label-value tuple -> Buckets."""

    __slots__ = ("name", "help", "labels", "bounds", "series")

    def __init__(self, name: str, help_text: str, labels: tuple[str, ...], bounds: tuple[float, ...]) -> None:
        self.name, self.help, self.labels, self.bounds = name, help_text, labels, bounds
        self.series: dict[tuple[str, ...], Buckets] = {}

    def get(self, key: tuple[str, ...]) -> Buckets:
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = Buckets(self.bounds)
        return series

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.help, labels=self.labels)
        for key, series in list(self.series.items()):
            cumulative, running = [], 0
            for bound, count in zip((*self.bounds, float("inf")), list(series.counts)):
                running += count
                cumulative.append((_bound_label(bound), running))
            family.add_metric(key, cumulative, series.sum)
        return family


def _bound_label(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class _Series:
    """Everything one (model, endpoint) pair records per request, looked up once per request."""

    __slots__ = ("total", "ttft", "gaps", "by_status", "model", "endpoint", "tokens_in", "tokens_out", "_requests")

    def __init__(self, metrics: GatewayMetrics, model: str, endpoint: str) -> None:
        key = (model, endpoint)
        self.model, self.endpoint = model, endpoint
        self.total = metrics.request_seconds.get(key)
        self.ttft = metrics.ttft_seconds.get(key)
        self.gaps = metrics.inter_token_seconds.get(key)
        self._requests = metrics.requests
        self.by_status: dict[int, Count] = {}
        self.tokens_in, self.tokens_out = metrics.tokens.count((model, "input")), metrics.tokens.count((model, "output"))

    def status(self, status: int) -> Count:
        count = self.by_status.get(status)
        if count is None:
            count = self.by_status[status] = self._requests.count((self.model, self.endpoint, str(status)))
        return count


class GatewayMetrics:
    enabled = True

    def __init__(self, max_values_per_label: int = 512, idle_upstream: Callable[[], int] | None = None) -> None:
        """`idle_upstream`: the upstream connections pooled and idle now (read at scrape time)."""
        self.registry = CollectorRegistry(auto_describe=False)
        self._idle_upstream = idle_upstream
        self._model = BoundedLabels(max_values_per_label)
        self._endpoint = BoundedLabels(max_values_per_label)
        me = ("model", "endpoint")
        self.requests = Tally("sits_requests", "Requests answered, by model, endpoint and HTTP status.",
                              ("model", "endpoint", "status"))
        self.request_seconds = Distribution("sits_request_duration_seconds",
                                            "Time from request parsed to the last byte of the answer.", me,
                                            LATENCY_BUCKETS)
        self.ttft_seconds = Distribution("sits_time_to_first_token_seconds",
                                         "Time from request parsed to the first byte of the upstream answer.", me,
                                         LATENCY_BUCKETS)
        self.inter_token_seconds = Distribution("sits_inter_token_latency_seconds",
                                                "Gaps between stream chunks as relayed to the client.", me,
                                                INTER_TOKEN_BUCKETS)
        self.tokens = Tally("sits_tokens", "Tokens in (prompt) and out (completion), from upstream usage.",
                            ("model", "direction"))
        self.decisions = Tally("sits_routing_decisions", "Routing decisions, by the reason they were made.",
                               ("model", "reason"))
        self.fallbacks = Tally("sits_fallbacks", "Requests answered by a later step of the fallback chain.",
                               ("model", "kind"))
        self.retries = Tally("sits_retries", "Upstream attempts after the first one of a request.", ("model",))
        self.attempts = Tally("sits_upstream_attempts", "Upstream attempts, by outcome (ok or error code).",
                              ("endpoint", "outcome"))
        self.cache = Tally("sits_cache_lookups", "Answer-cache lookups before going upstream, by result.",
                           ("result",))
        self.queue_wait = Distribution("sits_admission_queue_wait_seconds",
                                       "Time a request waited for an admission slot, by priority.", ("priority",),
                                       QUEUE_BUCKETS)
        self._queue_wait_by_class: dict[int, Buckets] = {}  # priority -> its series, without a str() per request
        self.admission_rejected = Tally("sits_admission_rejected", "Requests shed by admission, by priority.",
                                        ("priority",))
        self._tallies = (self.requests, self.tokens, self.decisions, self.fallbacks, self.retries, self.attempts,
                         self.cache, self.admission_rejected)
        self._distributions = (self.request_seconds, self.ttft_seconds, self.inter_token_seconds, self.queue_wait)
        self._series: dict[tuple[str, str], _Series] = {}
        # raw model / endpoint name -> the series of each reason / outcome (each label bounded once)
        self._decisions: dict[str, dict[str, Count]] = {}
        self._attempts: dict[str, dict[str, Count]] = {}
        self.registry.register(self)
        # process_resident_memory_bytes, process_open_fds, CPU: what a leak shows first (bench/soak.py)
        ProcessCollector(registry=self.registry)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        for tally in self._tallies:
            yield tally.family()
        for distribution in self._distributions:
            yield distribution.family()
        try:  # read at scrape time, on the event loop that serves /metrics
            tasks = len(asyncio.all_tasks())
        except RuntimeError:  # collected outside a running loop (a test's direct read)
            return
        yield GaugeMetricFamily("sits_event_loop_tasks", "Tasks alive on the gateway's event loop (a leak grows it).",
                                value=tasks)
        if self._idle_upstream is not None:
            yield GaugeMetricFamily("sits_upstream_idle_connections", "Upstream keep-alive connections pooled and "
                                    "idle (open descriptors that are not a leak).", value=self._idle_upstream())

    def describe(self) -> list[object]:
        return []

    # -- recording (hot path) ----------------------------------------------------------

    def served(self, model: str, endpoint: str, status: int, seconds: float, ttft_s: float | None,
               usage: tuple[int, int] | None = None) -> None:
        """One answered request: count, duration, TTFT and tokens in a single lookup."""
        series = self._series.get((model, endpoint)) or self._new_series(model, endpoint)
        series.status(status).value += 1.0
        series.total.observe(seconds)
        if ttft_s is not None:
            series.ttft.observe(ttft_s)
        if usage is not None:
            if usage[0]:
                series.tokens_in.value += usage[0]
            if usage[1]:
                series.tokens_out.value += usage[1]

    def inter_token(self, model: str, endpoint: str) -> Buckets | None:
        """The series a stream relay observes its gaps on (looked up once per stream)."""
        return (self._series.get((model, endpoint)) or self._new_series(model, endpoint)).gaps

    def failed(self, model: str, status: int) -> None:
        """A request that got an error answer (no endpoint produced it)."""
        self.requests.inc((self._model(model), "none", str(status)))

    def decision(self, model: str, reason: str) -> None:
        by_reason = self._decisions.get(model)
        count = by_reason.get(reason) if by_reason is not None else None
        if count is None:
            count = self._kept(self._decisions, model, reason, self.decisions.count((self._model(model), reason)))
        count.value += 1.0

    def fallback(self, model: str, kind: str) -> None:
        self.fallbacks.inc((self._model(model), kind))

    def attempt(self, model: str, endpoint: str, outcome: str, retry: bool) -> None:
        by_outcome = self._attempts.get(endpoint)
        count = by_outcome.get(outcome) if by_outcome is not None else None
        if count is None:
            count = self._kept(self._attempts, endpoint, outcome, self.attempts.count((self._endpoint(endpoint), outcome)))
        count.value += 1.0
        if retry:
            self.retries.inc((self._model(model),))

    def cache_lookup(self, result: str) -> None:
        self.cache.inc((result,))

    def admitted(self, priority: int, waited_s: float) -> None:
        series = self._queue_wait_by_class.get(priority)
        if series is None:
            series = self._queue_wait_by_class[priority] = self.queue_wait.get((str(priority),))
        series.observe(waited_s)

    def shed(self, priority: int) -> None:
        self.admission_rejected.inc((str(priority),))

    @staticmethod
    def _kept(by_name: dict[str, dict[str, Count]], name: str, label: str, count: Count) -> Count:
        """`count` kept under the raw name and label (its label values bounded once), unless as many names
        as the bounded labels allow several times over have come through."""
        if len(by_name) < 4 * 512:
            by_name.setdefault(name, {})[label] = count
        return count

    def _new_series(self, model: str, endpoint: str) -> _Series:
        """First request of a pair: bound the label values once, then cache under the raw names."""
        series = _Series(self, self._model(model), self._endpoint(endpoint))
        if len(self._series) < 4 * 512:  # churned-through pairs map to "other" without growing this cache
            self._series[(model, endpoint)] = series
        return series


class NoMetrics(GatewayMetrics):
    """Metrics switched off (`telemetry.metrics: false`): every recording call does nothing, so callers
    hold a metrics object always and never test for None; nothing is registered or exported."""

    enabled = False

    def __init__(self) -> None:  # no registry, no series
        pass

    def served(self, model: str, endpoint: str, status: int, seconds: float, ttft_s: float | None,
               usage: tuple[int, int] | None = None) -> None:
        pass

    def inter_token(self, model: str, endpoint: str) -> Buckets | None:
        return None

    def failed(self, model: str, status: int) -> None:
        pass

    def decision(self, model: str, reason: str) -> None:
        pass

    def fallback(self, model: str, kind: str) -> None:
        pass

    def attempt(self, model: str, endpoint: str, outcome: str, retry: bool) -> None:
        pass

    def cache_lookup(self, result: str) -> None:
        pass

    def admitted(self, priority: int, waited_s: float) -> None:
        pass

    def shed(self, priority: int) -> None:
        pass


NO_METRICS = NoMetrics()  # the shared "off" instance (it holds nothing)
