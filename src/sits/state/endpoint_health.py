"""Endpoint lifecycle and health: active probe results plus passive outlier ejection.

Phases: pending -> ready (first probe passed; gets traffic) -> unhealthy (probe
failures) -> ready again on recovery; draining (removed from the table, in-flight
requests finish) -> removed. Ejection follows Envoy's outlier-detection defaults:
5 consecutive 5xx or connect failures eject for 30 s times the ejection count, at
most 300 s, and never the last available endpoint of a model. An ejected endpoint that also failed a
probe, or refused connections, and then passes one is back at once (Envoy's
successful_active_health_check_uneject_host): it went away and came back, as a restarted server does
(one restarted between two probes is seen only by the connections it refused), and waiting out the
ejection would only leave its siblings without a retry target. One that kept answering, badly, and
passing probes stays out for the whole ejection. An endpoint with no health check of its own (one from
the config file) that went away is probed for its model list until it answers (control/health_prober.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Phase = Literal["pending", "ready", "unhealthy", "draining", "removed"]


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    healthy_threshold: int = 1
    unhealthy_threshold: int = 3
    consecutive_errors_to_eject: int = 5
    base_ejection_s: float = 30.0
    max_ejection_s: float = 300.0


@dataclass(slots=True)
class EndpointHealth:
    phase: Phase = "pending"
    probe_successes: int = 0
    probe_failures: int = 0
    consecutive_errors: int = 0
    ejection_count: int = 0
    ejected_until: float = 0.0
    last_probe_at: float | None = None
    last_error: str | None = None
    went_away: bool = False  # refused a connection since its last passing probe

    def available(self, now: float) -> bool:
        return self.phase == "ready" and now >= self.ejected_until


class HealthBoard:
    """Health of every endpoint this gateway knows, by endpoint id."""

    def __init__(self, policy: HealthPolicy = HealthPolicy()) -> None:
        self.policy = policy
        self._by_id: dict[str, EndpointHealth] = {}

    def get(self, endpoint_id: str) -> EndpointHealth | None:
        return self._by_id.get(endpoint_id)

    def track(self, endpoint_id: str, probed: bool) -> EndpointHealth:
        """Start tracking an endpoint: pending until its first probe passes, ready at once if never probed."""
        health = self._by_id.get(endpoint_id)
        if health is None or health.phase in ("draining", "removed"):
            health = self._by_id[endpoint_id] = EndpointHealth(phase="pending" if probed else "ready")
        return health

    def available(self, endpoint_id: str, now: float) -> bool:
        health = self._by_id.get(endpoint_id)
        return health is None or health.available(now)

    def probe_result(self, endpoint_id: str, ok: bool, now: float, error: str | None = None) -> None:
        health = self._by_id.get(endpoint_id)
        if health is None or health.phase in ("draining", "removed"):
            return
        health.last_probe_at = now
        if ok:
            if (health.probe_failures or health.went_away) and health.ejected_until > now:
                health.ejected_until = now  # down, then up again: the ejection has done its job
            health.probe_failures = 0
            health.went_away = False
            health.probe_successes += 1
            health.last_error = None
            if health.phase != "ready" and health.probe_successes >= self.policy.healthy_threshold:
                health.phase = "ready"
        else:
            health.probe_successes = 0
            health.probe_failures += 1
            health.last_error = error
            if health.phase == "ready" and health.probe_failures >= self.policy.unhealthy_threshold:
                health.phase = "unhealthy"

    def went_away(self, endpoint_id: str) -> bool:
        """Refused or dropped connections since it last answered a probe: worth probing until it is back."""
        health = self._by_id.get(endpoint_id)
        return health is not None and health.went_away

    def answered(self, endpoint_id: str, now: float) -> None:
        """An endpoint with no health check of its own answered the recovery probe: it is back, and an
        ejection it earned by going away has done its job."""
        health = self._by_id.get(endpoint_id)
        if health is not None and health.went_away:
            health.went_away = False
            health.ejected_until = min(health.ejected_until, now)

    def request_succeeded(self, endpoint_id: str) -> None:
        health = self._by_id.get(endpoint_id)
        if health is not None:
            health.consecutive_errors = 0

    def request_failed(self, endpoint_id: str, now: float, siblings: Iterable[str], unreachable: bool = False) -> bool:
        """Passive detection from real traffic (a 5xx or, `unreachable`, a connect failure); True when this
        call ejected it."""
        health = self._by_id.get(endpoint_id)
        if health is None:
            return False
        health.consecutive_errors += 1
        health.went_away = health.went_away or unreachable
        if health.consecutive_errors < self.policy.consecutive_errors_to_eject or now < health.ejected_until:
            return False
        others_available = any(s != endpoint_id and self.available(s, now) for s in siblings)
        if not others_available:
            return False  # never eject the last endpoint a model can still use
        health.ejection_count += 1
        seconds = min(self.policy.base_ejection_s * health.ejection_count, self.policy.max_ejection_s)
        health.ejected_until = now + seconds
        health.consecutive_errors = 0
        return True

    def drain(self, endpoint_id: str) -> None:
        health = self._by_id.setdefault(endpoint_id, EndpointHealth())
        health.phase = "draining"

    def remove(self, endpoint_id: str) -> None:
        health = self._by_id.get(endpoint_id)
        if health is not None:
            health.phase = "removed"
            del self._by_id[endpoint_id]

    def draining(self) -> list[str]:
        return [i for i, h in self._by_id.items() if h.phase == "draining"]
