"""The director: one request's stages as a list of calls (understand, schedule, execute, observe).

Admission and the fallback chain plug in here as the resilience work lands;
scheduling stays a pure call over a snapshot taken once per request.
"""

from __future__ import annotations

import random
from collections.abc import Callable
import orjson

from sits.backends.openai_upstream import OpenAIUpstream
from sits.errors import ModelNotFound, Overloaded, UpstreamConnectError
from sits.pipeline.context import RoutingRequest
from sits.pipeline.exchange import Exchange
from sits.scheduling.framework import Profile
from sits.scheduling.types import EndpointView, SchedulingRequest
from sits.state.endpoint_stats import StatsStore
from sits.state.routing_table import Endpoint, ModelEntry, RoutingTable
from sits.understanding.tier_rule import choose_tier, nearest_tiers

AUTO_MODEL = "auto"


class Director:
    def __init__(
        self,
        table: Callable[[], RoutingTable],
        profile: Profile,
        backend: OpenAIUpstream,
        stats: StatsStore,
        clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        self._table = table
        self._profile = profile
        self._backend = backend
        self._stats = stats
        self._clock = clock
        self._rng = rng

    async def run(self, request: RoutingRequest, body: bytes) -> Exchange:
        """Route `body` (the client's JSON, forwarded unchanged but for `model`) and start the exchange."""
        table = self._table()
        model, why = self._resolve_model(table, request)
        decision = self._profile.run(
            SchedulingRequest(model.name, request.api, request.stream, len(request.prompt_text) // 4),
            self._views(model.endpoints),
            self._rng,
        )
        if not decision.candidates:
            raise Overloaded(f"model '{model.name}' has no endpoint available: {decision.reason}",
                             headers=(("retry-after", "1"),))
        by_id = {e.id: e for e in model.endpoints}
        route = f"profile={decision.profile}; pick={decision.reason}{why}"
        last_error: UpstreamConnectError | None = None
        # Connect errors are safe to retry on the next candidate: the upstream processed nothing.
        for view in decision.candidates[:3]:
            endpoint = by_id[view.id]
            try:
                return await self._send(endpoint, model.name, route, request, body)
            except UpstreamConnectError as exc:
                last_error = exc
        assert last_error is not None
        raise last_error

    async def _send(
        self, endpoint: Endpoint, model: str, route: str, request: RoutingRequest, body: bytes
    ) -> Exchange:
        if endpoint.upstream_model != request.model:
            body = _with_model(body, endpoint.upstream_model)
        stats = self._stats.get(endpoint.id)
        started = self._clock()
        stats.started()
        try:
            response = await self._backend.send(endpoint, request.api.encode(), body, request.request_id)
        except BaseException:
            stats.finished(self._clock() - started, ok=False)
            raise
        return Exchange(endpoint, model, route, response, stats, self._clock, started)

    def _resolve_model(self, table: RoutingTable, request: RoutingRequest) -> tuple[ModelEntry, str]:
        entry = table.resolve(request.model)
        if entry is not None:
            return entry, ""
        if request.model == AUTO_MODEL and table.models:
            choice = choose_tier(request.prompt_text)
            for tier in nearest_tiers(choice.tier):
                candidates = table.models_in_tier(tier)
                if candidates:
                    return candidates[0], f"; auto=tier {tier}: {choice.reason}"
            return next(iter(table.models.values())), "; auto=no tiers configured: first model"
        available = ", ".join(table.names()) or "(none)"
        raise ModelNotFound(
            f"The model '{request.model}' does not exist. Available models: {available}", param="model"
        )

    def _views(self, endpoints: tuple[Endpoint, ...]) -> list[EndpointView]:
        views = []
        for e in endpoints:
            s = self._stats.get(e.id)
            views.append(EndpointView(e.id, e.model, e.weight, True, s.in_flight, s.latency_ewma_s))
        return views


def _with_model(body: bytes, model: str) -> bytes:
    """The client's body with only `model` replaced; every other field passes through as sent."""
    payload = orjson.loads(body)
    payload["model"] = model
    return orjson.dumps(payload)
