"""Simulated endpoints: slots, FIFO queue, lognormal service times, incidents, a prefix cache.

Each endpoint's `EndpointView` is rebuilt only when its state changes (dispatch, completion,
a stats refresh or an engine scrape), so a decision costs what the policy costs, not O(cluster).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np

from sits.scheduling.types import EndpointView
from sits.simulate.scenario import Scenario
from sits.state.endpoint_stats import EndpointStats

PREFIX_CACHE_ENTRIES = 256  # prompt prefixes an engine keeps warm
FAILED_RESPONSE_S = 0.005  # a failing endpoint answers an error this fast
PASSIVE_EJECT_ERRORS = 3  # consecutive errors that make the gateway treat an endpoint as unhealthy
PASSIVE_EJECT_S = 5.0  # ... until this long after the last error, when a probe would let it back


@dataclass(slots=True)
class SimEndpoint:
    index: int
    id: str
    model: str
    slots: int
    mu: float  # lognormal location for this endpoint's service time (seconds)
    sigma: float
    weight: float
    stats: EndpointStats = field(default_factory=EndpointStats)
    busy: int = 0
    queue: deque[tuple[float, float]] = field(default_factory=deque)  # (arrival, service) waiting
    prefixes: OrderedDict[int, None] = field(default_factory=OrderedDict)
    windows: list[tuple[float, float, str, float]] = field(default_factory=list)  # (start, end, kind, factor)
    last_error_s: float = -1e18
    scraped_waiting: int = 0
    scraped_kv: float = 0.0

    def factor_at(self, now: float) -> tuple[float, bool]:
        """(service-time factor, failing) at `now`."""
        slow, failing = 1.0, False
        for start, end, kind, factor in self.windows:
            if start <= now < end:
                if kind == "failure":
                    failing = True
                else:
                    slow *= factor
        return slow, failing

    def view(self, now: float) -> EndpointView:
        s = self.stats
        healthy = s.consecutive_errors < PASSIVE_EJECT_ERRORS or now - self.last_error_s > PASSIVE_EJECT_S
        return EndpointView(
            self.id, self.model, self.weight, healthy, s.in_flight, s.latency_ewma_s, s.latency_p95_s,
            s.latency_peak_ewma_s, s.ttft_ewma_s, s.error_rate, s.qps, self.scraped_waiting, self.scraped_kv,
            None, s.dynamic_weight,
        )

    def prefix_hit(self, prefix: int) -> bool:
        cache = self.prefixes
        if prefix in cache:
            cache.move_to_end(prefix)
            return True
        cache[prefix] = None
        if len(cache) > PREFIX_CACHE_ENTRIES:
            cache.popitem(last=False)
        return False


def build_cluster(scenario: Scenario, rng: np.random.Generator) -> tuple[list[SimEndpoint], list[list[int]], float]:
    """(endpoints, endpoint indices per model pool, nominal capacity in requests/s)."""
    groups = [g for g in scenario.endpoints for _ in range(g.count)]
    order = rng.permutation(len(groups))  # mix groups across pools
    pools_n = max(1, len(groups) // scenario.replicas_per_model)
    endpoints: list[SimEndpoint] = []
    pools: list[list[int]] = [[] for _ in range(pools_n)]
    capacity = 0.0
    for i, gi in enumerate(order):
        g = groups[int(gi)]
        pool = i % pools_n
        mean_s = g.mean_service_ms / 1000.0
        mu = math.log(mean_s) - g.sigma**2 / 2  # so that the lognormal's mean is mean_s
        endpoints.append(SimEndpoint(i, f"{g.name}-{i}", f"m{pool}", g.slots, mu, g.sigma, g.weight))
        pools[pool].append(i)
        capacity += g.slots / mean_s
    return endpoints, pools, capacity


def schedule_incidents(scenario: Scenario, endpoints: list[SimEndpoint], duration_s: float,
                       rng: np.random.Generator) -> None:
    for incident in scenario.incidents:
        if incident.kind == "burst":
            continue
        hit = rng.choice(len(endpoints), size=max(1, round(incident.fraction * len(endpoints))), replace=False)
        start = incident.start * duration_s
        end = min(1.0, incident.start + incident.duration) * duration_s
        for i in hit:
            endpoints[int(i)].windows.append((start, end, incident.kind, incident.factor))
