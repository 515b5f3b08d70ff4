"""An Envoy-style retry budget: retries may add at most `ratio` extra upstream calls.

Counted over a sliding window of one-second buckets, with a small floor so a
quiet gateway can still retry. When the budget is spent, a failure is not retried
upstream: the fallback chain moves on to the cache or the static answer, so retries
can never amplify an outage.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryBudgetPolicy:
    ratio: float = 0.2
    min_retries: int = 3  # per window, whatever the traffic
    window_s: int = 10


class RetryBudget:
    def __init__(self, policy: RetryBudgetPolicy = RetryBudgetPolicy()) -> None:
        self.policy = policy
        self._buckets: deque[list[int]] = deque()  # [second, requests, retries]
        self._requests = 0
        self._retries = 0

    def note_request(self, now: float) -> None:
        buckets = self._buckets
        if buckets and buckets[-1][0] == int(now):  # this second's bucket: nothing can have expired since
            buckets[-1][1] += 1
        else:
            self._bucket(now)[1] += 1
        self._requests += 1

    def try_spend(self, now: float) -> bool:
        """Take one retry from the budget if it has one."""
        bucket = self._bucket(now)
        allowed = max(self.policy.min_retries, int(self._requests * self.policy.ratio))
        if self._retries >= allowed:
            return False
        bucket[2] += 1
        self._retries += 1
        return True

    def _bucket(self, now: float) -> list[int]:
        second = int(now)
        buckets = self._buckets
        while buckets and buckets[0][0] <= second - self.policy.window_s:
            _, requests, retries = buckets.popleft()
            self._requests -= requests
            self._retries -= retries
        if not buckets or buckets[-1][0] != second:
            buckets.append([second, 0, 0])
        return buckets[-1]
