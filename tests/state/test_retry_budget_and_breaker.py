from __future__ import annotations

from sits.state.circuit_breaker import BreakerPolicy, CircuitBreakers
from sits.state.retry_budget import RetryBudget, RetryBudgetPolicy


def test_budget_allows_ratio_of_requests_plus_floor():
    budget = RetryBudget(RetryBudgetPolicy(ratio=0.2, min_retries=3, window_s=10))
    for _ in range(100):
        budget.note_request(now=5.0)
    granted = sum(budget.try_spend(now=5.5) for _ in range(50))
    assert granted == 20


def test_budget_floor_lets_a_quiet_gateway_retry():
    budget = RetryBudget(RetryBudgetPolicy(ratio=0.2, min_retries=3, window_s=10))
    budget.note_request(now=0.0)
    assert [budget.try_spend(now=0.1) for _ in range(4)] == [True, True, True, False]


def test_budget_window_slides():
    budget = RetryBudget(RetryBudgetPolicy(ratio=0.0, min_retries=1, window_s=10))
    assert budget.try_spend(now=0.0) and not budget.try_spend(now=5.0)
    assert budget.try_spend(now=10.5)  # the first retry left the window


def test_requests_leave_the_window_and_take_their_share_of_the_budget_with_them():
    budget = RetryBudget(RetryBudgetPolicy(ratio=1.0, min_retries=0, window_s=10))
    for t in (0.1, 0.2, 0.3, 0.4):  # one bucket for second 0 (the later ones take the same-second path)
        budget.note_request(now=t)
    assert sum(budget.try_spend(now=0.5) for _ in range(2)) == 2
    budget.note_request(now=1.5)
    budget.note_request(now=1.6)
    budget.note_request(now=10.2)  # second 0 leaves: its 4 requests and 2 retries with it
    assert sum(budget.try_spend(now=10.3) for _ in range(5)) == 3  # 3 requests left in the window, no retries


def test_breaker_cycle():
    breakers = CircuitBreakers(BreakerPolicy(failure_threshold=2, open_s=1.0))
    assert breakers.state("e", 0.0) == "closed"
    breakers.on_failure("e", 0.0)
    assert breakers.allows("e", 0.0)
    breakers.on_failure("e", 0.1)
    assert breakers.state("e", 0.2) == "open" and not breakers.allows("e", 0.5)
    assert breakers.state("e", 1.2) == "half-open" and breakers.allows("e", 1.2)
    breakers.on_attempt("e", 1.2)
    assert not breakers.allows("e", 1.3)  # one trial at a time
    breakers.on_failure("e", 1.4)
    assert breakers.state("e", 1.5) == "open"
    assert breakers.state("e", 2.5) == "half-open"
    breakers.on_attempt("e", 2.5)
    breakers.on_success("e")
    assert breakers.state("e", 2.6) == "closed" and breakers.allows("e", 2.6)
