"""Vectorised generation of one run's requests: arrival times (with bursts), model pool, prompt prefix."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sits.simulate.scenario import Scenario


@dataclass(frozen=True, slots=True)
class Requests:
    arrival_s: list[float]
    pool: list[int]
    prefix: list[int]  # index into prefix_hashes, -1 for a unique prompt
    prefix_hashes: list[int]
    service_z: np.ndarray  # standard normal draws for lognormal service times, consumed in order
    duration_s: float  # nominal timeline length: requests / mean rate


def generate(scenario: Scenario, rate_qps: float, pools: int, rng: np.random.Generator) -> Requests:
    """All of a run's requests at once; identical for every strategy given the same rng seed."""
    w = scenario.workload
    n = w.requests_per_run
    duration = n / rate_qps
    # Bursts by time-warp: virtual time runs `factor` times faster inside a burst window, so a
    # Poisson process in virtual time has `factor` times the arrival rate there.
    real = [0.0]
    virtual = [0.0]
    for b in sorted((i for i in scenario.incidents if i.kind == "burst"), key=lambda i: i.start):
        start, end = b.start * duration, min(1.0, b.start + b.duration) * duration
        if start < real[-1]:
            continue  # overlapping bursts: the first one wins
        virtual.append(virtual[-1] + (start - real[-1]))
        real.append(start)
        virtual.append(virtual[-1] + (end - start) * b.factor)
        real.append(end)
    gaps = rng.exponential(1.0 / rate_qps, n)
    v = np.cumsum(gaps)
    tail = max(v[-1], virtual[-1]) + 1.0
    virtual.append(tail)
    real.append(real[-1] + (tail - virtual[-2]))
    arrivals = np.interp(v, np.array(virtual), np.array(real))
    pool = rng.integers(0, pools, n)
    shared = rng.random(n) < w.shared_prefix_share
    prefix = np.where(shared, (rng.zipf(w.prefix_zipf_s, n) - 1) % w.distinct_prefixes, -1)
    hashes = [int(h) for h in rng.integers(0, 2**63 - 1, w.distinct_prefixes, dtype=np.int64)]
    z = rng.standard_normal(n * 2 + 16)  # retries draw more than one service time per request
    return Requests(arrivals.tolist(), pool.tolist(), prefix.tolist(), hashes, z, duration)
