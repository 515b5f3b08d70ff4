"""The schedule stage: the endpoints of a model (or of `auto`'s tier) ranked best first.

The director schedules here and then sends; the endpoint picker behind Envoy (api/epp/) only picks. Both
get the same views (health and circuit state, live stats, engine load, the model's declared metadata)
and the same decision (prefix affinity, adapter and tokenizer hints); the picker adds an `allowed`
predicate that keeps only some endpoints (the proxy's subset hint).
"""

from __future__ import annotations

import logging
import random
import itertools
from collections.abc import Callable, Iterator
from operator import attrgetter

import orjson

from sits.errors import ContextTooLong, ModelNotCapable, SitsError
from sits.pipeline.admission_step import Admission
from sits.pipeline.context import RoutingRequest
from sits.pipeline.fallback import Plan, PlanKind
from sits.pipeline.scheduling_hints import SchedulingHints
from sits.scheduling.framework import Decision
from sits.scheduling.plugins.prefix_affinity_scorer import prefix_hash
from sits.scheduling.scheduler import Scheduler
from sits.scheduling.types import EndpointView, SchedulingRequest
from sits.state.circuit_breaker import CircuitBreakers
from sits.state.endpoint_health import HealthBoard
from sits.state.concurrency_limit import EndpointLimits
from sits.state.endpoint_stats import EndpointStats, StatsStore
from sits.state.routing_table import Endpoint, ModelEntry, RoutingTable
from sits.tuples import new_tuple
from sits.understanding.tier_rule import nearest_tiers

NO_ADAPTERS: frozenset[str] = frozenset()
DEFAULT_ENDPOINT_CAPACITY = 4  # requests an endpoint takes at once, for a tier's load, when nothing says
Allowed = Callable[[Endpoint], bool]
_HEALTHY = attrgetter("healthy")
log = logging.getLogger("sits.scheduling")


class PoolPlanner:
    def __init__(self, scheduler: Scheduler, stats: StatsStore, health: HealthBoard, breakers: CircuitBreakers,
                 admission: Admission | None, rng: random.Random,
                 hints: SchedulingHints | None = None) -> None:
        self._scheduler = scheduler
        self._stats = stats
        self._health = health
        self._breakers = breakers
        self._admission = admission
        self._rng = rng
        self._hints = hints
        # Models with one endpoint that no request can turn away (`Scheduler.lone`): by the entry's id, the
        # entry itself (ids are reused once an entry is gone) and its plan by kind; None: scheduled per request.
        self._lone: dict[int, tuple[ModelEntry, dict[str, Plan] | None]] = {}

    def views(self, model: ModelEntry, now: float, allowed: Allowed | None = None) -> list[EndpointView]:
        """Each (allowed) endpoint's live signals, plus its model's declared metadata."""
        context_window, features, tier = model.context_window, model.features, model.tier
        sla_ms, price = model.latency_p95_ms, (model.cost_per_1k_input or 0.0) + (model.cost_per_1k_output or 0.0)
        available, allows = self._health.available, self._breakers.allows
        limits = self._admission.limits if self._admission is not None else None
        views = []
        for e in model.endpoints:
            if allowed is not None and not allowed(e):
                continue
            s = self._observed(e.id, limits)
            engine = s.engine
            # Every field, in order, without the named tuple's own __new__ (sits/tuples.py): one per endpoint
            # per request.
            views.append(new_tuple(EndpointView, (
                e.id, e.model, e.weight, available(e.id, now) and allows(e.id, now), s.in_flight, s.latency_ewma_s,
                s.latency_p95_s, s.latency_peak_ewma_s, s.ttft_ewma_s, s.error_rate, s.qps,
                (engine.waiting or 0) if engine else 0, engine.kv_cache_usage if engine else None,
                engine.memory_usage if engine else None,
                s.dynamic_weight, features, context_window, tier, price, sla_ms,
            )))
        return views

    def _observed(self, endpoint_id: str, limits: EndpointLimits | None) -> EndpointStats:
        """An endpoint's live stats, its engine's reading (queue, KV-cache pressure) passed to its admission
        limit, which it caps."""
        stats = self._stats.get(endpoint_id)
        if limits is not None and stats.engine is not None:
            limits.get(endpoint_id).observe_engine(stats.engine)
        return stats

    def model(self, model: ModelEntry, request: RoutingRequest, now: float, allowed: Allowed | None = None,
              kind: PlanKind = "primary") -> Plan:
        """The model's (allowed) endpoints best first."""
        if allowed is None:
            lone = self._lone.get(id(model))
            if lone is None or lone[0] is not model:
                lone = self._decide_lone(model, now)
            plans = lone[1]
            if plans is not None:
                return self._lone_plan(model, plans, kind, now)
        views = self.views(model, now, allowed)
        if not any(map(_HEALTHY, views)):
            return Plan(model, (), kind)
        # The prefix hash only ranks endpoints against each other: one endpoint needs none. Every field, in
        # order, without the named tuple's own __new__ (sits/tuples.py).
        wanted = new_tuple(SchedulingRequest, (
            model.name, request.api, request.stream, len(request.prompt_text) // 4, request.max_tokens, request.needs,
            request.sla_ms, None, prefix_hash(request.prompt_text) if len(views) > 1 else None, NO_ADAPTERS, None))
        hints = self._hints
        if hints is not None:
            wanted = hints.hinted(model, request.prompt_text, wanted)
        decision = self._scheduler.schedule(wanted, views, self._rng)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("route %s %s", request.request_id, orjson.dumps(decision.explain()).decode())
        candidates = decision.candidates
        if not candidates:
            return Plan(model, (), kind, rejection(model, wanted, decision), decision)
        if len(model.endpoints) == 1:  # views were built from these endpoints: the one candidate is it
            return new_tuple(Plan, (model, model.endpoints, kind, None, decision, None))
        by_id = {e.id: e for e in model.endpoints}
        return new_tuple(Plan, (model, tuple(by_id[v.id] for v in candidates), kind, None, decision, None))

    def _decide_lone(self, model: ModelEntry, now: float) -> tuple[ModelEntry, dict[str, Plan] | None]:
        """Whether `model` is a pool of one that no request can change the decision for (once per entry: a
        routing table's change makes new entries); kept either way."""
        decision = self._scheduler.lone(self.views(model, now)[0]) if len(model.endpoints) == 1 else None
        plans: dict[str, Plan] | None = None
        if decision is not None:
            plans = {kind: Plan(model, model.endpoints, kind, None, decision)
                     for kind in ("primary", "tier", "fallback", "larger-context")}
        if len(self._lone) > 10_000:
            self._lone.clear()
        lone = self._lone[id(model)] = (model, plans)
        return lone

    def _lone_plan(self, model: ModelEntry, plans: dict[str, Plan], kind: PlanKind, now: float) -> Plan:
        """The decided plan of a pool of one, if its endpoint can be sent to now (its health and breaker,
        as the views say); what the views do per request besides (an engine's load capping its admission
        limit, the decision counted) is done here too."""
        endpoint = model.endpoints[0]
        self._observed(endpoint.id, self._admission.limits if self._admission is not None else None)
        if not (self._health.available(endpoint.id, now) and self._breakers.allows(endpoint.id, now)):
            return Plan(model, (), kind)
        plan = plans[kind]
        self._scheduler.metrics.decision(plan.decision.profile)  # type: ignore[union-attr]
        return plan

    def tier_ranking(self, table: RoutingTable, tier: str, request: RoutingRequest, now: float,
                     allowed: Allowed | None = None, first_kind: PlanKind = "primary") -> list[Plan]:
        """`auto` within one tier: one decision over every (allowed) endpoint of every model of the tier
        (the same filters and scorers as any request), each model once in the order of its best endpoint;
        empty when none of them can take the request. The first plan is `first_kind`, the others "tier"."""
        models = table.models_in_tier(tier)
        views = [v for m in models for v in self.views(m, now, allowed)]
        if not views:
            return []
        # model "": the pool spans models (the model-match filter keeps every endpoint); no prefix
        # affinity: another model's cache holds nothing of this prompt
        wanted = SchedulingRequest("", request.api, request.stream, len(request.prompt_text) // 4,
                                   request.max_tokens, request.needs, request.sla_ms)
        decision = self._scheduler.schedule(wanted, views, self._rng)
        if not decision.candidates:
            return []
        by_id = {e.id: e for m in models for e in m.endpoints}
        by_model: dict[str, dict[Endpoint, None]] = {}
        for view in _ranked(decision):  # the picked few, then every other survivor: each model gets a turn
            by_model.setdefault(view.model, {})[by_id[view.id]] = None
        return [Plan(table.models[name], tuple(endpoints), first_kind if k == 0 else "tier", None, decision, tier)
                for k, (name, endpoints) in enumerate(by_model.items())]

    def tier(self, table: RoutingTable, tier: str, request: RoutingRequest, now: float,
             allowed: Allowed | None = None) -> Plan:
        """`auto`'s pick: the best model of the tier, else of the nearest tiers in turn; when no tier can
        take the request, the needed tier's first model answers why (e.g. a feature no model has)."""
        for candidate_tier in nearest_tiers(tier):
            ranked = self.tier_ranking(table, candidate_tier, request, now, allowed)
            if ranked:
                return ranked[0]
        return self.no_tier_can(table, tier, request, now, allowed)

    def no_tier_can(self, table: RoutingTable, tier: str, request: RoutingRequest, now: float,
                    allowed: Allowed | None = None) -> Plan:
        """No tier's models can take the request: the needed tier's first model says why."""
        fallback = table.models_in_tier(tier) or list(table.models.values())
        return self.model(fallback[0], request, now, allowed)

    def tier_load(self, table: RoutingTable, tier: str) -> float:
        """A tier's own in-flight fraction in [0, 1], as the director counts it (the tier rule's input)."""
        busy = capacity = 0
        limits = self._admission.limits if self._admission is not None else None
        for model in table.models_in_tier(tier):
            ids = [e.id for e in model.endpoints]
            busy += sum(self._stats.get(i).in_flight for i in ids)
            room = limits.total(ids) if limits is not None else DEFAULT_ENDPOINT_CAPACITY * len(ids)
            capacity += min(room, model.max_concurrency) if model.max_concurrency else room
        return min(1.0, busy / capacity) if capacity else 1.0

    def fallbacks(self, table: RoutingTable, primary: Plan, request: RoutingRequest, now: float,
               with_primary: bool = True) -> Iterator[Plan]:
        """Best first: the chosen model, its configured fallbacks, then (used only after a
        context-window error) models with a larger window, smallest sufficient first."""
        if with_primary:
            yield primary
        model = primary.model
        for name in model.fallbacks:
            fallback = table.models.get(name)
            if fallback is not None:
                yield self.model(fallback, request, now, kind="fallback")
        window = model.context_window or 0
        larger = sorted((m for m in table.models.values() if m.context_window and m.context_window > window
                         and m.name != model.name), key=lambda m: m.context_window or 0)
        for bigger in larger:
            yield self.model(bigger, request, now, kind="larger-context")

    def tier_plans(self, table: RoutingTable, tier: str, request: RoutingRequest,
                    now: float) -> tuple[str, Plan, Iterator[Plan]]:
        """`auto`'s models, best first (pool_planner.PoolPlanner.tier_ranking: each model of the tier in the
        order of its best endpoint); a tier with no usable model falls through to the nearest tiers, which
        also follow the tier's models (lazily) when those all fail. The x-sits-route value, the first plan,
        the rest."""
        tiers = nearest_tiers(tier)
        for i, candidate_tier in enumerate(tiers):
            ranked = self.tier_ranking(table, candidate_tier, request, now)
            if ranked:
                first, *others = ranked
                return first.route, first, itertools.chain(others, self._later_tiers(table, tiers[i + 1:], request, now))
        first = self.no_tier_can(table, tier, request, now)
        return first.route, first, iter(())

    def _later_tiers(self, table: RoutingTable, tiers: list[str], request: RoutingRequest,
                     now: float) -> Iterator[Plan]:
        for tier in tiers:
            yield from self.tier_ranking(table, tier, request, now, first_kind="tier")


def _ranked(decision: Decision) -> list[EndpointView]:
    """The picked candidates, then every other survivor of the filters by total score."""
    ranked = list(decision.candidates)
    if decision.totals:
        order = sorted(range(len(decision.scored)), key=decision.totals.__getitem__, reverse=True)
        ranked += [decision.scored[j] for j in order]
    return ranked


def rejection(model: ModelEntry, wanted: SchedulingRequest, decision: Decision) -> SitsError | None:
    """When no endpoint is left because of the request itself (a window too small, a missing
    feature), the client's error; None when the endpoints are the reason."""
    if decision.rejected_by == "capability-filter":
        declared = model.features or frozenset()
        missing = ", ".join(sorted(wanted.needs - declared))
        return ModelNotCapable(f"The model '{model.name}' does not support {missing} (its features: "
                               f"{', '.join(sorted(declared)) or 'none'}).", param="model")
    if decision.rejected_by == "context-window-filter":
        return ContextTooLong(f"This model's maximum context length is {model.context_window} tokens; the messages "
                              f"need about {wanted.prompt_tokens_estimate + wanted.max_tokens} tokens. Please "
                              "reduce the length of the messages.", param="messages")
    return None
