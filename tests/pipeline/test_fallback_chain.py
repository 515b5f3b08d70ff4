"""The fallback chain on its own: plans tried best first, what moves on and what stops, the retry
budget, open circuits skipped, larger-context plans used only after a context error. The send step is
a function the test writes: the chain never calls back into the director."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sits.errors import UpstreamConnectError, UpstreamConnectionLost, UpstreamStatusError
from sits.pipeline.context import RoutingRequest
from sits.pipeline.fallback import AttemptsFailed, FallbackChain, FallbackPolicy, Plan
from sits.state.circuit_breaker import BreakerPolicy, CircuitBreakers
from sits.state.endpoint_health import HealthBoard
from sits.state.retry_budget import RetryBudget, RetryBudgetPolicy
from sits.state.routing_table import Endpoint, ModelEntry

REQUEST = RoutingRequest("/chat/completions", "a", False, "rid")


def model(name: str, replicas: int = 1) -> ModelEntry:
    return ModelEntry(name, tuple(Endpoint(f"{name}/ep-{i}", name, name, "http", "127.0.0.1", 1, "/v1")
                                  for i in range(replicas)))


class Sends:
    """Answers per endpoint id: an exception to raise, or anything else to return as the exchange."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers
        self.calls: list[str] = []

    async def __call__(self, endpoint: Endpoint, model_name: str, request: RoutingRequest, body: bytes) -> Any:
        self.calls.append(endpoint.id)
        answer = self.answers.get(endpoint.id, _Ok())
        if isinstance(answer, BaseException):
            raise answer
        return answer


class _Ok:
    attempts = ""


def chain(send: Sends, *, clock: float = 100.0, budget: RetryBudgetPolicy | None = None,
          breakers: CircuitBreakers | None = None, max_attempts: int = 4) -> FallbackChain:
    return FallbackChain(send, RetryBudget(budget or RetryBudgetPolicy()), breakers or CircuitBreakers(),
                         HealthBoard(), lambda: clock, FallbackPolicy(max_attempts=max_attempts))


def boom(status: int = 500) -> UpstreamStatusError:
    return UpstreamStatusError(f"HTTP {status}", upstream_status=status)


async def test_the_first_good_endpoint_answers_and_the_attempts_are_listed():
    send = Sends(**{"a/ep-0": boom(), "a/ep-1": _Ok()})
    a, b = model("a", 2), model("b")
    exchange = await chain(send).run(REQUEST, b"{}", [Plan(a, a.endpoints, "primary"), Plan(b, b.endpoints, "fallback")])
    assert send.calls == ["a/ep-0", "a/ep-1"]
    assert exchange.attempts == "a/ep-0:upstream_bad_status,a/ep-1:ok"


async def test_fallback_models_come_after_every_endpoint_of_the_model():
    send = Sends(**{"a/ep-0": boom(), "a/ep-1": boom(503)})
    a, b = model("a", 2), model("b")
    await chain(send).run(REQUEST, b"{}", [Plan(a, a.endpoints, "primary"), Plan(b, b.endpoints, "fallback")])
    assert send.calls == ["a/ep-0", "a/ep-1", "b/ep-0"]


async def test_a_client_error_stops_the_chain():
    send = Sends(**{"a/ep-0": boom(400)})
    a, b = model("a"), model("b")
    with pytest.raises(UpstreamStatusError) as info:
        await chain(send).run(REQUEST, b"{}", [Plan(a, a.endpoints, "primary"), Plan(b, b.endpoints, "fallback")])
    assert send.calls == ["a/ep-0"]
    assert ("x-sits-attempts", "a/ep-0:upstream_bad_status") in info.value.headers


async def test_larger_context_plans_only_after_a_context_error():
    too_long = UpstreamStatusError("HTTP 400", upstream_status=400,
                                   body=b'{"error": {"code": "context_length_exceeded"}}')
    a, big = model("a", 2), model("big")
    plans = [Plan(a, a.endpoints, "primary"), Plan(big, big.endpoints, "larger-context")]
    send = Sends(**{"a/ep-0": too_long})
    await chain(send).run(REQUEST, b"{}", plans)
    assert send.calls == ["a/ep-0", "big/ep-0"]  # the other replica has the same window: skipped
    failing = Sends(**{"a/ep-0": boom(), "a/ep-1": boom()})
    with pytest.raises(AttemptsFailed):
        await chain(failing).run(REQUEST, b"{}", plans)
    assert failing.calls == ["a/ep-0", "a/ep-1"]  # no context error: the larger model is never tried


async def test_retries_are_paid_from_the_budget_but_refused_connections_are_free():
    budget = RetryBudgetPolicy(ratio=0.0, min_retries=1)
    a = model("a", 4)
    send = Sends(**{"a/ep-0": boom(), "a/ep-1": boom(), "a/ep-2": boom()})
    with pytest.raises(AttemptsFailed) as info:
        await chain(send, budget=budget).run(REQUEST, b"{}", [Plan(a, a.endpoints, "primary")])
    assert send.calls == ["a/ep-0", "a/ep-1"]  # one retry paid, the next one refused
    assert info.value.attempts[-1] == "a/ep-2:retry_budget_exhausted"
    refused = Sends(**{"a/ep-0": UpstreamConnectError("refused"), "a/ep-1": UpstreamConnectError("refused")})
    await chain(refused, budget=budget).run(REQUEST, b"{}", [Plan(a, a.endpoints, "primary")])
    assert refused.calls == ["a/ep-0", "a/ep-1", "a/ep-2"]


async def test_an_open_circuit_is_skipped_and_only_unreachable_is_no_capacity():
    breakers = CircuitBreakers(BreakerPolicy(failure_threshold=1, open_s=60.0))
    breakers.on_failure("a/ep-0", 100.0)
    a = model("a", 2)
    send = Sends(**{"a/ep-1": UpstreamConnectError("refused")})
    with pytest.raises(AttemptsFailed) as info:
        await chain(send, breakers=breakers).run(REQUEST, b"{}", [Plan(a, a.endpoints, "primary")])
    assert send.calls == ["a/ep-1"]
    assert info.value.only_unavailable  # nothing answered at all: the director says 503, not 502


async def test_attempts_stop_at_the_policy_bound():
    a = model("a", 6)
    send = Sends(**{f"a/ep-{i}": UpstreamConnectError("refused") for i in range(6)})
    with pytest.raises(AttemptsFailed):
        await chain(send, max_attempts=3).run(REQUEST, b"{}", [Plan(a, a.endpoints, "primary")])
    assert len(send.calls) == 3


async def test_a_plan_rejected_by_scheduling_moves_on_with_its_error():
    from sits.errors import ModelNotCapable

    a, b = model("a"), model("b")
    send = Sends()
    await chain(send).run(REQUEST, b"{}", [Plan(a, (), "primary", ModelNotCapable("no tools", param="model")),
                                           Plan(b, b.endpoints, "fallback")])
    assert send.calls == ["b/ep-0"]


@pytest.mark.parametrize("outcome", [boom(400), boom(429), asyncio.CancelledError()],
                         ids=["client-error", "busy", "cancelled"])
async def test_a_half_open_trial_that_ends_saying_nothing_of_the_endpoint_frees_the_trial_slot(outcome):
    """A trial answered 400, answered 429, or cancelled with the client: the circuit stays half-open, and
    the next request may try (it used to keep the slot taken, and the endpoint out, for good)."""
    breakers = CircuitBreakers(BreakerPolicy(failure_threshold=1, open_s=10.0))
    breakers.on_failure("a/ep-0", 80.0)  # open until 90: half-open at 100
    a = model("a")
    with pytest.raises((UpstreamStatusError, AttemptsFailed, asyncio.CancelledError)):
        await chain(Sends(**{"a/ep-0": outcome}), breakers=breakers).run(REQUEST, b"{}", [Plan(a, a.endpoints, "primary")])
    assert breakers.state("a/ep-0", 100.0) == "half-open"
    assert breakers.allows("a/ep-0", 100.0)


@pytest.mark.parametrize("gone", [UpstreamConnectError("refused"), UpstreamConnectionLost("closed under the exchange")],
                         ids=["refused", "dropped"])
async def test_an_endpoint_ejected_because_it_went_away_is_back_at_its_next_passing_probe(gone):
    """A server restarted between two probes: its connections were refused or dropped, it was ejected, and
    the first probe after it came back readmits it (a 5xx-ejected one waits out its ejection)."""
    health = HealthBoard()
    for endpoint in ("a/ep-0", "a/ep-1"):
        health.track(endpoint, probed=False)
    a = model("a", 2)
    fallback = FallbackChain(Sends(**{"a/ep-0": gone}), RetryBudget(RetryBudgetPolicy(min_retries=10)), CircuitBreakers(),
                             health, lambda: 100.0, FallbackPolicy())
    for _ in range(5):
        await fallback.run(REQUEST, b"{}", [Plan(a, a.endpoints, "primary")])
    assert not health.available("a/ep-0", 101.0)  # ejected
    health.probe_result("a/ep-0", True, now=102.0)
    assert health.available("a/ep-0", 102.0)
