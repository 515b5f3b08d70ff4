"""The director: one request's stages as a list of calls (understand, schedule, execute, observe).

Admission and the fallback chain plug in here as the resilience work lands;
scheduling stays a pure call over a snapshot taken once per request.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable, Iterator
from operator import attrgetter


from sits.errors import (
    Overloaded,
    SitsError,
)
from sits.pipeline.admission import Ticket
from sits.pipeline.admission_step import Admission
from sits.pipeline.answer import Answer
from sits.pipeline.cache_step import CacheStep
from sits.pipeline.canned_answer import CannedAnswer
from sits.pipeline.context import RoutingRequest
from sits.pipeline.exchange import Exchange
from sits.pipeline.fallback import AttemptsFailed, FallbackChain, FallbackPolicy, Plan
from sits.pipeline.model_resolution import ModelResolver, RouteReason
from sits.pipeline.pool_planner import PoolPlanner
from sits.pipeline.scheduling_hints import SchedulingHints
from sits.pipeline.stream_resume import CHAT_API, resume_body
from sits.pipeline.upstream_send import Upstream, UpstreamSend
from sits.pipeline.fusion.answer import WorkflowAnswer
from sits.pipeline.fusion.runner import WorkflowRunner
from sits.pipeline.fusion.step_call import StepDirector
from sits.scheduling.framework import ONLY_ENDPOINT, Decision
from sits.scheduling.scheduler import Scheduler
from sits.state.circuit_breaker import CircuitBreakers
from sits.state.endpoint_health import HealthBoard
from sits.state.endpoint_stats import StatsStore
from sits.state.retry_budget import RetryBudget
from sits.state.routing_table import ModelEntry, RoutingTable
from sits.state.semantic_cache import CachedCompletion
from sits.telemetry.metrics import NO_METRICS, GatewayMetrics
from sits.telemetry.tracing import end_span
from sits.understanding.understander import RequestUnderstander

_HEALTHY = attrgetter("healthy")
log = logging.getLogger("sits.scheduling")


class Director:

    def __init__(
        self,
        table: Callable[[], RoutingTable],
        scheduler: Scheduler,
        backend: Upstream,
        stats: StatsStore,
        health: HealthBoard,
        breakers: CircuitBreakers,
        budget: RetryBudget,
        fallback_policy: FallbackPolicy,
        answers: CacheStep,
        admission: Admission | None,
        understander: Callable[[], RequestUnderstander | None],  # built at startup, once its model has loaded
        clock: Callable[[], float],
        rng: random.Random,
        metrics: GatewayMetrics = NO_METRICS,
        hints: SchedulingHints | None = None,  # adapter variants, exact token counts, token-level translation
        # Fusion workflows (`model: workflow:<name>`): built with this director, which runs each of their steps.
        workflows: Callable[[StepDirector], WorkflowRunner] | None = None,
    ) -> None:
        self._metrics = metrics
        self._health = health
        self._answers = self.answers = answers  # the doors read whether it is open (a cache scope per key)
        self._admission = admission
        self._understander = understander
        self._breakers = breakers
        self._sender = UpstreamSend(backend, stats, admission, clock)
        self._chain: FallbackChain[Exchange] = FallbackChain(self._sender.send, budget, breakers, health, clock,
                                                             fallback_policy, metrics)
        self._table = table
        self._scheduler = scheduler
        self._backend = backend
        self._stats = stats
        self._clock = clock
        self._rng = rng
        self._hints = self._sender.hints = hints
        # endpoint views and a tier's load, built as the endpoint picker builds them (pipeline/pool_planner.py)
        self._planner = PoolPlanner(scheduler, stats, health, breakers, admission, rng, hints)
        self._workflows = workflows(self) if workflows is not None else None
        self._resolver = ModelResolver(self._understander, self._workflows, self._hints, self._planner.tier_load)

    async def run(self, request: RoutingRequest, body: bytes) -> Answer:
        """Route `body` (the client's JSON, forwarded unchanged but for `model`) and start the exchange,
        or answer from the cache / static template, or hand over to a fusion workflow: each an `Answer`."""
        table = self._table()
        metrics, trace = self._metrics, request.trace
        resolved = self._resolver.named(table, request) or await self._resolver.resolve(table, request)
        tier_rest: Iterator[Plan] | None = None  # auto: the tier's other models, then the nearest tiers'
        if isinstance(resolved, ModelEntry):  # the common case: the client named a model or alias
            model, why, intent, reason = resolved, "", "", RouteReason.NAMED
        else:
            why, intent, reason = resolved.why, resolved.intent, resolved.reason
            if resolved.workflow is not None:
                assert self._workflows is not None
                result = await self._workflows.run(resolved.workflow, request, body, intent)
                return WorkflowAnswer(result, request.request_id)
            if resolved.tier is not None:
                tier_route, tier_primary, tier_rest = self._planner.tier_plans(table, resolved.tier, request, self._clock())
                model = tier_primary.model
            else:
                assert resolved.model is not None
                model = resolved.model
        key = self._answers.key(request, body) if self._answers.enabled else None
        if key is not None:
            hit = await self._answers.before_upstream(key, opted_in=model.cache)
            metrics.cache_lookup("miss" if hit is None else f"{hit.match}-hit")
            if hit is not None:
                metrics.decision(model.name, "cache-hit")
                return CannedAnswer(hit, model.name, f"cache{why}", intent=intent, request_id=request.request_id)
        now = self._clock()
        ticket = self._admit_now(model.name, request) if self._admission else None
        if ticket is None and self._admission:
            ticket = await self._admit(model.name, request, now)
        try:
            self._stats.refresh(now)  # p95, QPS, dynamic weights: at most once per refresh interval
            span = trace.stage("schedule", {"sits.model": model.name}) if trace.recording else None
            if tier_rest is None:
                primary = self._planner.model(model, request, now)
                route, plans = primary.route, self._planner.fallbacks(table, primary, request, now)
                label = _scheduled_label(primary.decision) if reason is RouteReason.NAMED else reason.value
            else:
                route, label = tier_route, reason.value
                plans = itertools.chain((tier_primary,), tier_rest, self._planner.fallbacks(table, tier_primary, request, now, False))
            end_span(span, attributes={"sits.route": route})
            metrics.decision(model.name, label)
            try:
                exchange = await self._chain.run(request, body, plans)
            except AttemptsFailed as failed:
                span = trace.stage("fallback", {"sits.model": model.name}) if trace.recording else None
                hit = await self._answers.last_resort(key, request, model.name)
                end_span(span, attributes={"sits.fallback": "none" if hit is None else hit.match})
                if hit is None:
                    raise _final_error(model.name, failed) from None
                kind = "static-template" if hit.match == "static" else "semantic-cache"
                metrics.fallback(model.name, kind)
                metrics.decision(model.name, f"fallback-{kind}")
                if ticket is not None:
                    ticket.release()
                return CannedAnswer(hit, model.name, f"{route}{why}; fallback={kind}", ",".join(failed.attempts),
                                    intent, request.request_id)
        except BaseException:
            if ticket is not None:
                ticket.release()
            raise
        exchange.route = route + why if exchange.model == model.name else f"{route}{why}; fallback={exchange.model}"
        exchange.cache_key = key
        exchange.intent = intent
        exchange.on_finish = ticket.release if ticket is not None else None  # the slot is held until the body ends
        return exchange

    def _admit_now(self, model: str, request: RoutingRequest) -> Ticket | None:
        """A ticket without waiting, or None. Unrecorded requests only: a recorded one takes `_admit` for its span."""
        if request.trace.recording:
            return None
        assert self._admission is not None
        ticket = self._admission.try_admit(model, request.priority)
        if ticket is not None:
            self._metrics.admitted(request.priority, 0.0)
        return ticket

    async def _admit(self, model: str, request: RoutingRequest, now: float) -> Ticket:
        """An admission ticket (waiting in the priority queue if need be), timed for metrics and spans."""
        assert self._admission is not None
        trace, metrics = request.trace, self._metrics
        span = trace.stage("admit", {"sits.priority": request.priority}) if trace.recording else None
        try:
            ticket = await self._admission.admit(model, request.priority, now)
        except Overloaded as exc:
            end_span(span, exc.message)
            metrics.shed(request.priority)
            raise
        end_span(span)
        metrics.admitted(request.priority, self._clock() - now)
        return ticket

    def workflows(self) -> list[tuple[str, str]]:
        """(model name, description) of the configured workflows."""
        return self._workflows.catalogue() if self._workflows is not None else []

    def remember(self, answer: Answer, completion: CachedCompletion | None) -> None:
        """A complete, good answer: keep it for the cache steps."""
        self._answers.remember(answer.cache_key, completion)

    async def resume(self, request: RoutingRequest, body: bytes, broken: Answer, partial: str) -> Exchange | None:
        """Continue a chat stream that broke after `partial` reached the client: on another endpoint of
        the same model, then on its fallbacks, with the partial answer as an assistant prefix.
        None when nothing can continue it (the caller then ends the stream with the error)."""
        table = self._table()
        model = table.models.get(broken.model)
        if model is None or request.api != CHAT_API:
            return None
        counter = self._hints.counter(model) if self._hints is not None else None
        continued = resume_body(body, partial, model.name, counter)
        if continued is None:
            return None
        now = self._clock()
        primary = self._planner.model(model, request, now)
        others = Plan(model, tuple(e for e in primary.endpoints if e.id != broken.source), "primary")
        try:
            exchange = await self._chain.run(request, continued, self._planner.fallbacks(table, others, request, now))
        except AttemptsFailed:
            return None
        self._metrics.fallback(model.name, "resumed-stream")
        return exchange

def _scheduled_label(decision: Decision | None) -> str:
    """The decision metric's `reason` for a named model: how scheduling went."""
    if decision is None:
        return "no-endpoint-ready"
    return "only-endpoint" if decision.reason == ONLY_ENDPOINT else "scheduled"


def _final_error(model: str, failed: AttemptsFailed) -> SitsError:
    """Nothing answered: no capacity (503, Retry-After) if nothing could even be reached, else the last error."""
    attempts = ("x-sits-attempts", ",".join(failed.attempts)) if failed.attempts else None
    if failed.only_unavailable or failed.last is None:
        detail = f"; last: {failed.last.message}" if failed.last else ""
        error: SitsError = Overloaded(f"no endpoint of model '{model}' is available{detail}",
                                      headers=(("retry-after", "1"),))
    else:
        error = failed.last
    if attempts:
        error.headers = (*error.headers, attempts)
    return error
