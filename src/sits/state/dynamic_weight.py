"""The dynamic endpoint weight, recomputed from live stats every refresh (200 ms by default).

    latency_penalty = max(0.1, 1 / log10(latency_ms + 1))
    qps_reward      = min(5.0, qps / 1e6 * 0.8)
    weight          = 0.6 * latency_penalty + 0.4 * qps_reward

with surge protection: when an endpoint's QPS jumps suddenly above its baseline, its
weight decays instead of rising, so a flash crowd is not fed more of the same traffic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def dynamic_weight(latency_ms: float, qps: float) -> float:
    """The formula above. Latency is floored at 1 ms: log10(1) = 0 would divide by zero.

    Note the QPS term is tiny below ~10^5 QPS (1,000 QPS adds 0.0003), so in practice the
    weight is driven by latency.
    """
    latency_penalty = max(0.1, 1.0 / math.log10(max(latency_ms, 1.0) + 1.0))
    qps_reward = min(5.0, max(qps, 0.0) / 1e6 * 0.8)
    return 0.6 * latency_penalty + 0.4 * qps_reward


@dataclass(frozen=True, slots=True)
class SurgeGuard:
    ratio: float = 2.0  # QPS above ratio x baseline is a surge
    min_baseline_qps: float = 5.0  # below this a jump is warm-up, not a surge
    decay: float = 0.5  # weight multiplier per refresh while surging
    floor: float = 0.01  # a surging endpoint keeps a trickle, so its recovery is seen
    baseline_alpha: float = 0.1  # how fast the baseline follows QPS: a lasting rise stops being a surge

    def next(self, prev_weight: float, latency_ms: float, qps: float, baseline_qps: float) -> tuple[float, float, bool]:
        """(new weight, new baseline QPS, surging) for one refresh."""
        surging = baseline_qps >= self.min_baseline_qps and qps > self.ratio * baseline_qps
        target = dynamic_weight(latency_ms, qps)
        weight = max(self.floor, min(target, prev_weight * self.decay)) if surging else target
        if baseline_qps <= 0.0:
            baseline = qps
        else:
            baseline = baseline_qps + self.baseline_alpha * (qps - baseline_qps)
        return weight, baseline, surging
