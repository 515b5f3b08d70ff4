"""Per-endpoint circuit breakers: closed -> open -> half-open -> closed.

Closed: traffic flows; `failure_threshold` consecutive failures open the circuit.
Open: no traffic for `open_s`. Half-open: one trial request at a time; its success
closes the circuit, its failure opens it again. Complements outlier ejection (which
takes a replica out for tens of seconds): the breaker reacts within one request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

CircuitState = Literal["closed", "open", "half-open"]


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    failure_threshold: int = 5
    open_s: float = 5.0


@dataclass(slots=True)
class _Breaker:
    state: CircuitState = "closed"
    failures: int = 0
    opened_at: float = 0.0
    trial_in_flight: bool = False
    opened_count: int = 0


class CircuitBreakers:
    def __init__(self, policy: BreakerPolicy = BreakerPolicy()) -> None:
        self.policy = policy
        self._by_id: dict[str, _Breaker] = {}
        # Told when a circuit opens or closes because of this gateway's own traffic (replication hook).
        self.on_transition: Callable[[str, CircuitState], None] | None = None

    def state(self, endpoint_id: str, now: float) -> CircuitState:
        breaker = self._by_id.get(endpoint_id)
        if breaker is None:
            return "closed"
        if breaker.state == "open" and now - breaker.opened_at >= self.policy.open_s:
            breaker.state = "half-open"
            breaker.trial_in_flight = False
        return breaker.state

    def allows(self, endpoint_id: str, now: float) -> bool:
        if endpoint_id not in self._by_id:
            return True  # never failed: closed (the common case, without the state machine)
        state = self.state(endpoint_id, now)
        if state == "closed":
            return True
        return state == "half-open" and not self._by_id[endpoint_id].trial_in_flight

    def on_attempt(self, endpoint_id: str, now: float) -> None:
        if endpoint_id in self._by_id and self.state(endpoint_id, now) == "half-open":
            self._by_id[endpoint_id].trial_in_flight = True

    def on_no_verdict(self, endpoint_id: str) -> None:
        """The attempt ended saying nothing about the endpoint (a client error, a context-window error,
        a 429, a cancelled request): a half-open circuit's trial slot is free for the next request."""
        breaker = self._by_id.get(endpoint_id)
        if breaker is not None:
            breaker.trial_in_flight = False

    def on_success(self, endpoint_id: str) -> None:
        breaker = self._by_id.get(endpoint_id)
        if breaker is not None:
            was = breaker.state
            breaker.state, breaker.failures, breaker.trial_in_flight = "closed", 0, False
            if was != "closed" and self.on_transition is not None:
                self.on_transition(endpoint_id, "closed")

    def on_failure(self, endpoint_id: str, now: float) -> None:
        breaker = self._by_id.setdefault(endpoint_id, _Breaker())
        breaker.failures += 1
        if breaker.state == "half-open" or (breaker.state == "closed"
                                            and breaker.failures >= self.policy.failure_threshold):
            breaker.state, breaker.opened_at, breaker.trial_in_flight = "open", now, False
            breaker.opened_count += 1
            if self.on_transition is not None:
                self.on_transition(endpoint_id, "open")

    def trip(self, endpoint_id: str, now: float) -> None:
        """Open a closed circuit because another replica saw the endpoint fail (not announced again)."""
        breaker = self._by_id.setdefault(endpoint_id, _Breaker())
        if breaker.state == "closed":
            breaker.state, breaker.opened_at, breaker.trial_in_flight = "open", now, False
            breaker.opened_count += 1

    def reset(self, endpoint_id: str) -> None:
        """Close the circuit because another replica's trial request succeeded (not announced again)."""
        breaker = self._by_id.get(endpoint_id)
        if breaker is not None:
            breaker.state, breaker.failures, breaker.trial_in_flight = "closed", 0, False

    def opened_count(self, endpoint_id: str) -> int:
        """How many times the endpoint's circuit has opened (for metrics)."""
        breaker = self._by_id.get(endpoint_id)
        return breaker.opened_count if breaker is not None else 0

    def forget(self, endpoint_id: str) -> None:
        self._by_id.pop(endpoint_id, None)
