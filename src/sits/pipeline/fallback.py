"""The fallback chain: a chain of responsibility over attempt plans.

Plans come best-first: the chosen model's endpoints, then configured fallback
models, then (after a context-window error only) models with a larger window.
Only retryable failures move on (connect errors, timeouts, 429, 5xx, in-band
error events, a stream that breaks before its first byte reached the client), and
every retry is paid from the retry budget so retries cannot amplify an outage.
The cache and static-answer steps that follow live in the director.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Generic, Literal, NamedTuple, Protocol, TypeVar

from sits.errors import (ContextTooLong, SitsError, UpstreamConnectError, UpstreamConnectionLost, UpstreamError,
                         UpstreamStatusError, UpstreamTimeout)
from sits.pipeline.context import RoutingRequest
from sits.scheduling.framework import Decision
from sits.state.circuit_breaker import CircuitBreakers
from sits.state.endpoint_health import HealthBoard
from sits.state.retry_budget import RetryBudget
from sits.state.routing_table import Endpoint, ModelEntry
from sits.telemetry.metrics import NO_METRICS, GatewayMetrics

PlanKind = Literal["primary", "tier", "fallback", "larger-context"]  # tier: another model `auto` may use


class Started(Protocol):
    """What the chain needs of a started attempt (pipeline/exchange.py: `Exchange`)."""

    attempts: str  # the endpoints tried, set on the one that answers

    async def prefetch_first_chunk(self, timeout_s: float) -> None: ...


E = TypeVar("E", bound=Started)
Send = Callable[[Endpoint, str, RoutingRequest, bytes], Awaitable[E]]

_CONTEXT_MARKERS = (b"context_length_exceeded", b"maximum context length", b"context window", b"too many tokens",
                    b"exceeds the context")


class Plan(NamedTuple):
    """A model and its endpoints best first, as scheduling ranked them (pipeline/pool_planner.py).
    A named tuple: one is built for every request."""

    model: ModelEntry
    endpoints: tuple[Endpoint, ...]  # best first; empty: none can take the request
    kind: PlanKind
    # Why scheduling ruled out every endpoint, as the client would see it (ContextTooLong: the prompt
    # exceeds every window, which moves on to larger-context models like an upstream context error).
    rejected: SitsError | None = None
    decision: Decision | None = None  # the decision that ranked them (None: no endpoint was ready)
    tier: str | None = None  # for `auto`: the tier the decision was made in

    @property
    def route(self) -> str:
        """The x-sits-route value of the decision."""
        if self.decision is None:
            return f"profile=none; pick=none; reason=no endpoint of {self.model.name} ready"
        header = self.decision.route_header()
        return header if self.tier is None else f"{header}; tier={self.tier}"


@dataclass(frozen=True, slots=True)
class FallbackPolicy:
    max_attempts: int = 4
    ttft_timeout_s: float = 30.0  # streaming: the first event must arrive within this
    request_timeout_s: float | None = None  # all attempts of one request together


class AttemptsFailed(Exception):
    """Every plan was tried or the budget ran out; `last` is the last upstream error (None: nothing tried)."""

    def __init__(self, last: SitsError | None, attempts: list[str], only_unavailable: bool) -> None:
        super().__init__(last.message if last else "no endpoint available")
        self.last = last
        self.attempts = attempts
        self.only_unavailable = only_unavailable  # nothing answered at all: no capacity rather than a bad answer


def is_context_error(error: SitsError) -> bool:
    return isinstance(error, UpstreamStatusError) and error.upstream_status in (400, 413, 422) and any(
        marker in error.body.lower() for marker in _CONTEXT_MARKERS)


class FallbackChain(Generic[E]):
    def __init__(self, send: Send[E], budget: RetryBudget, breakers: CircuitBreakers, health: HealthBoard,
                 clock: Callable[[], float], policy: FallbackPolicy = FallbackPolicy(),
                 metrics: GatewayMetrics = NO_METRICS) -> None:
        self._metrics = metrics
        self._send = send
        self._budget = budget
        self._breakers = breakers
        self._health = health
        self._clock = clock
        self.policy = policy

    async def run(self, request: RoutingRequest, body: bytes, plans: Iterable[Plan]) -> E:
        attempts: list[str] = []
        last: SitsError | None = None
        only_unavailable = True
        context_exceeded = False
        paid = False  # whether the next attempt is a retry the budget must pay for
        now = self._clock()
        self._budget.note_request(now)
        deadline = now + self.policy.request_timeout_s if self.policy.request_timeout_s else None
        metrics = self._metrics
        asked_for = ""
        for plan in plans:
            asked_for = asked_for or plan.model.name
            if plan.kind == "larger-context" and not context_exceeded:
                continue
            if plan.rejected is not None:
                last, only_unavailable = plan.rejected, False
                context_exceeded = context_exceeded or isinstance(plan.rejected, ContextTooLong)
                continue
            for endpoint in plan.endpoints:
                if len(attempts) >= self.policy.max_attempts:
                    raise AttemptsFailed(last, attempts, only_unavailable)
                now = self._clock()
                if not self._breakers.allows(endpoint.id, now):
                    continue
                if paid and not self._budget.try_spend(now):
                    attempts.append(f"{endpoint.id}:retry_budget_exhausted")
                    raise AttemptsFailed(last, attempts, only_unavailable)
                if deadline is not None and now >= deadline:
                    last = UpstreamTimeout(f"request deadline of {self.policy.request_timeout_s:g}s passed")
                    attempts.append(f"{endpoint.id}:request_deadline")
                    raise AttemptsFailed(last, attempts, False)
                self._breakers.on_attempt(endpoint.id, now)
                try:
                    if deadline is None:
                        exchange = await self._attempt(endpoint, plan.model.name, request, body)
                    else:
                        exchange = await self._attempt_before(deadline - now, endpoint, plan.model.name, request,
                                                              body)
                except UpstreamError as exc:
                    attempts.append(f"{endpoint.id}:{exc.code}")
                    metrics.attempt(asked_for, endpoint.id, exc.code or "error", retry=len(attempts) > 1)
                    last = exc
                    if is_context_error(exc):
                        self._breakers.on_no_verdict(endpoint.id)
                        context_exceeded = True
                        only_unavailable = False
                        break  # this model's window is too small: every replica would say the same
                    if not exc.retryable:
                        self._breakers.on_no_verdict(endpoint.id)
                        exc.headers = (*exc.headers, ("x-sits-attempts", ",".join(attempts)))
                        raise
                    self._note_failure(endpoint.id, exc, [e.id for e in plan.model.endpoints])
                    unreached = isinstance(exc, UpstreamConnectError)
                    only_unavailable = only_unavailable and unreached
                    # A refused connection cost the upstream nothing, so retrying it amplifies nothing.
                    paid = not unreached
                    continue
                except BaseException:  # not the endpoint's doing (the request was refused, or cancelled)
                    self._breakers.on_no_verdict(endpoint.id)
                    raise
                self._breakers.on_success(endpoint.id)
                self._health.request_succeeded(endpoint.id)
                attempts.append(f"{endpoint.id}:ok")
                metrics.attempt(asked_for, endpoint.id, "ok", retry=len(attempts) > 1)
                if plan.kind != "primary":
                    metrics.fallback(asked_for, plan.kind)
                exchange.attempts = ",".join(attempts)
                return exchange
        raise AttemptsFailed(last, attempts, only_unavailable)

    async def _attempt(self, endpoint: Endpoint, model: str, request: RoutingRequest, body: bytes) -> E:
        exchange = await self._send(endpoint, model, request, body)
        if request.stream:
            await exchange.prefetch_first_chunk(self.policy.ttft_timeout_s)
        return exchange

    async def _attempt_before(self, seconds: float, endpoint: Endpoint, model: str, request: RoutingRequest,
                              body: bytes) -> E:
        """An attempt bounded by what is left of the request's deadline (to the first byte)."""
        try:
            async with asyncio.timeout(seconds):
                return await self._attempt(endpoint, model, request, body)
        except TimeoutError:
            raise UpstreamTimeout(f"request deadline of {self.policy.request_timeout_s:g}s passed "
                                  f"while waiting for {endpoint.id}") from None

    def _note_failure(self, endpoint_id: str, error: UpstreamError, siblings: list[str]) -> None:
        if isinstance(error, UpstreamStatusError) and error.upstream_status == 429:
            self._breakers.on_no_verdict(endpoint_id)
            return  # busy, not broken
        now = self._clock()
        self._breakers.on_failure(endpoint_id, now)
        # Refused or dropped connections: the server went away, and its next passing probe readmits it.
        went_away = isinstance(error, UpstreamConnectError | UpstreamConnectionLost)
        self._health.request_failed(endpoint_id, now, siblings, went_away)
