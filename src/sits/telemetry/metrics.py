"""Prometheus metrics of one gateway, on its own registry (two gateways in a process share nothing).

Hot-path recording is a cached label-child lookup plus prometheus-client's observe; what the
gateway already tracks as state (in-flight, health, circuits, ejections) is read only when
scraped (`LiveStateCollector`). Label values come from the routing table and fixed enums, and
`BoundedLabels` caps each label at a fixed number of distinct values, so a registry that churns
through endpoints cannot grow the exposition without bound.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
INTER_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.1, 0.25, 0.5, 1.0, 2.5)
QUEUE_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
OVERFLOW_LABEL = "other"

# Fixed vocabularies: the only values these labels take.
DECISION_REASONS = frozenset({
    "scheduled", "only-endpoint", "no-endpoint-ready", "cache-hit", "fallback-semantic-cache",
    "fallback-static-template", "auto-tier", "auto-intent", "auto-quality-router",
})
FALLBACK_KINDS = frozenset({"fallback", "larger-context", "semantic-cache", "static-template"})
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


class GatewayMetrics:
    def __init__(self, max_values_per_label: int = 512) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=False)
        self._model = BoundedLabels(max_values_per_label)
        self._endpoint = BoundedLabels(max_values_per_label)
        me = ["model", "endpoint"]
        self.requests = Counter("sits_requests", "Requests answered, by model, endpoint and HTTP status.",
                                ["model", "endpoint", "status"], registry=registry)
        self.request_seconds = Histogram("sits_request_duration_seconds",
                                         "Time from request parsed to the last byte of the answer.",
                                         me, buckets=LATENCY_BUCKETS, registry=registry)
        self.ttft_seconds = Histogram("sits_time_to_first_token_seconds",
                                      "Time from request parsed to the first byte of the upstream answer.",
                                      me, buckets=LATENCY_BUCKETS, registry=registry)
        self.inter_token_seconds = Histogram("sits_inter_token_latency_seconds",
                                             "Gaps between stream chunks as relayed to the client.",
                                             me, buckets=INTER_TOKEN_BUCKETS, registry=registry)
        self.tokens = Counter("sits_tokens", "Tokens in (prompt) and out (completion), from upstream usage.",
                              ["model", "direction"], registry=registry)
        self.decisions = Counter("sits_routing_decisions", "Routing decisions, by the reason they were made.",
                                 ["model", "reason"], registry=registry)
        self.fallbacks = Counter("sits_fallbacks", "Requests answered by a later step of the fallback chain.",
                                 ["model", "kind"], registry=registry)
        self.retries = Counter("sits_retries", "Upstream attempts after the first one of a request.",
                               ["model"], registry=registry)
        self.attempts = Counter("sits_upstream_attempts", "Upstream attempts, by outcome (ok or error code).",
                                ["endpoint", "outcome"], registry=registry)
        self.cache = Counter("sits_cache_lookups", "Answer-cache lookups before going upstream, by result.",
                             ["result"], registry=registry)
        self.queue_wait = Histogram("sits_admission_queue_wait_seconds",
                                    "Time a request waited for an admission slot, by priority.",
                                    ["priority"], buckets=QUEUE_BUCKETS, registry=registry)
        self.admission_rejected = Counter("sits_admission_rejected", "Requests shed by admission, by priority.",
                                          ["priority"], registry=registry)
        self._served: dict[tuple[str, str], tuple[Histogram, Histogram, Histogram]] = {}

    # -- recording (hot path) ----------------------------------------------------------

    def served(self, model: str, endpoint: str, status: int, seconds: float, ttft_s: float | None) -> None:
        model, endpoint = self._model(model), self._endpoint(endpoint)
        self.requests.labels(model, endpoint, str(status)).inc()
        total, ttft, _ = self._children(model, endpoint)
        total.observe(seconds)
        if ttft_s is not None:
            ttft.observe(ttft_s)

    def inter_token(self, model: str, endpoint: str) -> Histogram:
        """The histogram child a stream relay observes its gaps on (looked up once per stream)."""
        return self._children(self._model(model), self._endpoint(endpoint))[2]

    def failed(self, model: str, status: int) -> None:
        """A request that got an error answer (no endpoint produced it)."""
        self.requests.labels(self._model(model), "none", str(status)).inc()

    def usage(self, model: str, prompt_tokens: int, completion_tokens: int) -> None:
        model = self._model(model)
        if prompt_tokens:
            self.tokens.labels(model, "input").inc(prompt_tokens)
        if completion_tokens:
            self.tokens.labels(model, "output").inc(completion_tokens)

    def decision(self, model: str, reason: str) -> None:
        self.decisions.labels(self._model(model), reason).inc()

    def fallback(self, model: str, kind: str) -> None:
        self.fallbacks.labels(self._model(model), kind).inc()

    def attempt(self, model: str, endpoint: str, outcome: str, retry: bool) -> None:
        self.attempts.labels(self._endpoint(endpoint), outcome).inc()
        if retry:
            self.retries.labels(self._model(model)).inc()

    def cache_lookup(self, result: str) -> None:
        self.cache.labels(result).inc()

    def admitted(self, priority: int, waited_s: float) -> None:
        self.queue_wait.labels(str(priority)).observe(waited_s)

    def shed(self, priority: int) -> None:
        self.admission_rejected.labels(str(priority)).inc()

    def _children(self, model: str, endpoint: str) -> tuple[Histogram, Histogram, Histogram]:
        key = (model, endpoint)
        children = self._served.get(key)
        if children is None:
            children = self._served[key] = (self.request_seconds.labels(model, endpoint),
                                            self.ttft_seconds.labels(model, endpoint),
                                            self.inter_token_seconds.labels(model, endpoint))
        return children
