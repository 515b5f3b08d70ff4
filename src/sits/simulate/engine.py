"""One simulation run: a strategy (routing policy) at one offered load.

Discrete events on a simulated clock: arrivals come from a pre-generated sorted array,
completions from a heap. Every arrival calls the real `Scheduler.schedule` over the
request's model pool, exactly as the director does; stats are the real `EndpointStats`,
refreshed every `stats_refresh_s` of simulated time.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sits.scheduling.policy import build_scheduler
from sits.scheduling.types import SchedulingRequest
from sits.simulate.cluster import FAILED_RESPONSE_S, build_cluster, schedule_incidents
from sits.simulate.scenario import Scenario
from sits.simulate.workload import generate
from sits.state.dynamic_weight import SurgeGuard

PROGRESS_EVERY = 8192


@dataclass(frozen=True, slots=True)
class RunResult:
    strategy: str
    load: float  # offered load, x nominal capacity
    offered_qps: float
    achieved_qps: float  # completions while requests were still arriving, per simulated second
    requests: int  # completed or failed
    failed: int
    mean_ms: float
    p50_ms: float
    p99_ms: float
    prefix_hit_rate: float
    wall_s: float
    truncated: bool  # stopped by the wall-clock bound before all requests ran

    def sustainable(self, slo_p99_ms: float) -> bool:
        return not self.truncated and self.p99_ms <= slo_p99_ms and self.failed <= 0.01 * max(self.requests, 1)


def simulate_run(
    scenario: Scenario,
    strategy: str,
    load: float,
    *,
    progress: Callable[[int], None] | None = None,
    max_wall_s: float = 600.0,
) -> RunResult:
    wall0 = time.perf_counter()
    level = int(round(load * 1000))
    cluster_rng = np.random.default_rng([scenario.seed, 0])
    endpoints, pools, capacity = build_cluster(scenario, cluster_rng)
    rate = load * capacity
    reqs = generate(scenario, rate, len(pools), np.random.default_rng([scenario.seed, 1, level]))
    schedule_incidents(scenario, endpoints, reqs.duration_s, np.random.default_rng([scenario.seed, 2, level]))
    scheduler = build_scheduler(scenario.strategies[strategy])
    rng = random.Random(scenario.seed)
    surge = SurgeGuard()
    speedup = scenario.workload.prefix_cache_speedup
    models = [f"m{p}" for p in range(len(pools))]
    pool_pos = {}
    for p, members in enumerate(pools):
        for j, i in enumerate(members):
            pool_pos[i] = (p, j)
    views = [[endpoints[i].view(0.0) for i in members] for members in pools]
    by_id = {e.id: e for e in endpoints}
    # One immutable SchedulingRequest per (pool, prefix), built on first use: the scheduler cannot
    # tell a shared one from a fresh one, and building one costs more than the lookup.
    requests: dict[tuple[int, int], SchedulingRequest] = {}

    heap: list[tuple[float, int, int, float]] = []  # (done at, seq, endpoint, sent at)
    push, pop = heapq.heappush, heapq.heappop
    z = reqs.service_z.tolist()  # Python floats: indexing a numpy array per request costs several times more
    z_len = len(z)
    z_next = 0
    seq = 0
    latencies: list[float] = []
    record = latencies.append
    failed = hits = shared = 0
    refresh_every = scenario.stats_refresh_s
    scrape_every = scenario.engine_scrape_s
    next_refresh = refresh_every
    next_scrape = scrape_every
    deadline = wall0 + max_wall_s
    truncated = False
    arrivals_end = reqs.arrival_s[-1]
    done_in_window = 0
    exp = math.exp

    def complete(t: float, index: int, sent: float) -> None:
        """One request finishes at `t`; the endpoint's queue head (if any) starts."""
        nonlocal seq, done_in_window
        e = endpoints[index]
        e.busy -= 1
        latency = t - sent
        e.stats.finished(latency, True)
        record(latency)
        if t <= arrivals_end:
            done_in_window += 1
        if e.queue:
            q_sent, q_service = e.queue.popleft()
            e.busy += 1
            seq += 1
            push(heap, (t + q_service, seq, index, q_sent))
        p, j = pool_pos[index]
        views[p][j] = e.view(t)

    def tick(now: float) -> None:
        nonlocal next_refresh, next_scrape
        elapsed = refresh_every * max(1, math.floor((now - next_refresh) / refresh_every) + 1)
        for e in endpoints:
            e.stats.refresh(elapsed, surge)
        next_refresh += elapsed
        if now >= next_scrape:
            for e in endpoints:  # what the engine's /metrics would say at this scrape
                e.scraped_waiting = len(e.queue)
                e.scraped_kv = min(1.0, e.busy / e.slots)
            next_scrape = now + scrape_every
        for e in endpoints:
            p, j = pool_pos[e.index]
            views[p][j] = e.view(now)

    schedule = scheduler.schedule
    arrivals, pool_of, prefix_of, hashes = reqs.arrival_s, reqs.pool, reqs.prefix, reqs.prefix_hashes
    for k in range(len(arrivals)):
        t = arrivals[k]
        while heap and heap[0][0] <= t:
            d_t, _, d_i, d_sent = pop(heap)
            complete(d_t, d_i, d_sent)
        if t >= next_refresh:
            tick(t)
        p = pool_of[k]
        px = prefix_of[k]
        request = requests.get((p, px))
        if request is None:
            request = requests[(p, px)] = SchedulingRequest(
                models[p], "/chat/completions", False, prefix_hash=None if px < 0 else hashes[px])
        decision = schedule(request, views[p], rng)
        sent_at = t
        served = False
        for view in decision.candidates:
            e = by_id[view.id]
            slow, failing = e.factor_at(sent_at) if e.windows else (1.0, False)
            e.stats.started()
            if failing:  # answers an error at once; the director fails over to the next candidate
                e.stats.finished(FAILED_RESPONSE_S, False)
                e.last_error_s = sent_at
                ep, ej = pool_pos[e.index]
                views[ep][ej] = e.view(sent_at)
                sent_at += FAILED_RESPONSE_S
                continue
            service = exp(e.mu + e.sigma * z[z_next]) * slow
            z_next += 1
            if z_next == z_len:
                z_next = 0
            if px >= 0:
                shared += 1
                if e.prefix_hit(px):
                    hits += 1
                    service *= speedup
            if e.busy < e.slots:
                e.busy += 1
                seq += 1
                push(heap, (sent_at + service, seq, e.index, t))
            else:
                e.queue.append((t, service))
            ep, ej = pool_pos[e.index]
            views[ep][ej] = e.view(sent_at)
            served = True
            break
        if not served:
            failed += 1
        if k % PROGRESS_EVERY == PROGRESS_EVERY - 1:
            if progress is not None:
                progress(PROGRESS_EVERY)
            if time.perf_counter() > deadline:
                truncated = True
                break
    while heap:
        d_t, _, d_i, d_sent = pop(heap)
        complete(d_t, d_i, d_sent)
    if progress is not None and not truncated:
        progress(len(arrivals) % PROGRESS_EVERY)
    done = len(latencies)
    lat = np.asarray(latencies) * 1000.0
    return RunResult(
        strategy=strategy, load=load, offered_qps=rate, achieved_qps=done_in_window / arrivals_end, requests=done + failed,
        failed=failed, mean_ms=float(lat.mean()) if done else math.inf,
        p50_ms=float(np.percentile(lat, 50)) if done else math.inf,
        p99_ms=float(np.percentile(lat, 99)) if done else math.inf,
        prefix_hit_rate=hits / shared if shared else 0.0, wall_s=time.perf_counter() - wall0, truncated=truncated,
    )
