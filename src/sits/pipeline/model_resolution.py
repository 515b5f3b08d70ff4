"""The director's first stage: which model, tier or workflow a request's `model` names.

An explicit model or alias, a `base:adapter` variant, a `workflow:<name>`, or `auto`, decided by
request understanding (an intent route, the quality router, or the tier rule). The answer is a typed
value; the route header and the decision metric's label are rendered from it, never parsed back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from sits.errors import ModelNotFound
from sits.pipeline.context import RoutingRequest
from sits.pipeline.fusion.runner import WorkflowRunner
from sits.pipeline.scheduling_hints import SchedulingHints
from sits.state.routing_table import ModelEntry, RoutingTable
from sits.telemetry.tracing import end_span
from sits.understanding.tier_rule import choose_tier
from sits.understanding.understander import RequestUnderstander

AUTO_MODEL = "auto"


class RouteReason(StrEnum):
    """Why the request goes where it goes; the values are the decision metric's `reason` labels."""

    NAMED = "named"  # a model, an alias or an adapter variant (the metric then says how it was scheduled)
    WORKFLOW = "workflow"
    AUTO_INTENT = "auto-intent"
    AUTO_QUALITY_ROUTER = "auto-quality-router"
    AUTO_TIER = "auto-tier"


@dataclass(frozen=True, slots=True)
class Resolution:
    """Exactly one of `model`, `tier` (auto: the tier's models are scheduled together) or `workflow`."""

    reason: RouteReason
    model: ModelEntry | None = None
    tier: str | None = None
    workflow: str | None = None
    detail: str = ""  # auto's explanation, for x-sits-route
    intent: str = ""  # the x-sits-intent value

    @property
    def why(self) -> str:
        """The route header's suffix ("; auto=tier base: ...")."""
        if self.reason is RouteReason.AUTO_TIER:
            return f"; auto=tier {self.tier}: {self.detail}"
        if self.reason is RouteReason.AUTO_INTENT:
            return f"; auto=intent route {self.detail}"
        if self.reason is RouteReason.AUTO_QUALITY_ROUTER:
            return f"; auto=quality router: {self.detail}"
        return ""


class ModelResolver:
    def __init__(self, understander: Callable[[], RequestUnderstander | None],
                 workflows: WorkflowRunner | None, hints: SchedulingHints | None,
                 tier_load: Callable[[RoutingTable, str], float]) -> None:
        self._understander = understander  # built once its embedding model has loaded (None until then)
        self._workflows = workflows
        self._hints = hints
        self._tier_load = tier_load

    @staticmethod
    def named(table: RoutingTable, request: RoutingRequest) -> ModelEntry | None:
        """The common case, synchronously and with nothing allocated: a model or alias the client named."""
        name = request.model
        return table.models.get(name) or table.aliased(name)  # `resolve`, inline for a model's own name

    async def resolve(self, table: RoutingTable, request: RoutingRequest) -> ModelEntry | Resolution:
        """Everything else, once `named` found nothing: a workflow, an adapter variant (the model itself)
        or `auto`. Raises ModelNotFound, listing what exists."""
        name = request.model
        workflows = self._workflows
        if workflows is not None and (workflow := workflows.workflow_of(name)) is not None:
            return Resolution(RouteReason.WORKFLOW, workflow=workflow)
        if self._hints is not None and (entry := self._hints.resolve(table, name)) is not None:  # base:adapter
            return entry
        if name == AUTO_MODEL and table.models:
            span = request.trace.stage("classify")
            try:
                return await self._auto(table, request)
            finally:
                end_span(span)
        available = ", ".join(table.names()) or "(none)"
        raise ModelNotFound(f"The model '{name}' does not exist. Available models: {available}", param="model")

    async def _auto(self, table: RoutingTable, request: RoutingRequest) -> Resolution:
        """Intent routes, the quality router, or the tier rule."""
        understander = self._understander()
        if understander is None:
            choice = choose_tier(request.prompt_text)
            return Resolution(RouteReason.AUTO_TIER, tier=choice.tier, detail=choice.reason)
        u = await understander.understand(request.prompt_text, lambda tier: self._tier_load(table, tier),
                                          tuple(table.models))
        header = u.intent_header()
        if u.route is not None and self._workflows is not None and \
                (workflow := self._workflows.route_target(u.route, request)) is not None:
            return Resolution(RouteReason.AUTO_INTENT, workflow=workflow, detail=f"{u.intent} -> workflow:{workflow}",
                              intent=header)
        if u.route is not None and (routed := table.models.get(u.route.model or "")) is not None:
            return Resolution(RouteReason.AUTO_INTENT, model=routed, detail=f"{u.intent} -> {routed.name}",
                              intent=header)
        if u.router is not None and (chosen := table.models.get(u.router.model)) is not None:
            return Resolution(RouteReason.AUTO_QUALITY_ROUTER, model=chosen, detail=u.router.reason, intent=header)
        return Resolution(RouteReason.AUTO_TIER, tier=u.tier, detail=u.reason, intent=header)
