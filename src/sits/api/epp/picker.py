"""One request's pick: the body understood as the HTTP door understands it, the model resolved
(name, alias, `base:adapter`, `auto`), admission, then SITS's scheduler over the model's endpoints
(or the tier's, for `auto`), restricted to the proxy's subset hint when it sends one."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from sits.api.auth import DataPlaneKeys, bearer_token
from sits.api.epp.protocol import address, subset_filter
from sits.api.http_types import HttpRequest
from sits.api.request_intake import RequestIntake
from sits.api.body_schema import BodySchema
from sits.api.schemas import CHAT_COMPLETION, COMPLETION, EMBEDDING
from sits.errors import InvalidRequest, Overloaded, PayloadTooLarge, SitsError
from sits.pipeline.admission import Ticket
from sits.pipeline.admission_step import Admission
from sits.pipeline.context import RoutingRequest
from sits.pipeline.model_resolution import ModelResolver, Resolution
from sits.pipeline.fallback import Plan
from sits.pipeline.pool_planner import Allowed, PoolPlanner
from sits.pipeline.scheduling_hints import SchedulingHints
from sits.state.endpoint_stats import StatsStore
from sits.state.routing_table import Endpoint, ModelEntry, RoutingTable
from sits.telemetry.tracing import NO_TRACE
from sits.understanding.understander import RequestUnderstander

log = logging.getLogger("sits.epp")

_APIS: dict[str, tuple[str, BodySchema[Any]]] = {
    "/chat/completions": ("/chat/completions", CHAT_COMPLETION),
    "/completions": ("/completions", COMPLETION),
    "/embeddings": ("/embeddings", EMBEDDING),
}


@dataclass(slots=True)
class Pick:
    """Where the request goes: `endpoints` best first (same upstream model, so one body fits all),
    the body to send instead of the client's (None: unchanged), and the admission ticket held until
    the exchange ends."""

    model: str
    endpoints: tuple[Endpoint, ...]
    body: bytes | None
    route: str
    ticket: Ticket | None = None

    @property
    def destinations(self) -> str:
        return ",".join(address(e) for e in self.endpoints)


class EndpointPicker:
    def __init__(self, table: Callable[[], RoutingTable], planner: PoolPlanner, admission: Admission | None,
                 keys: DataPlaneKeys, stats: StatsStore, clock: Callable[[], float],
                 understander: Callable[[], RequestUnderstander | None], hints: SchedulingHints | None,
                 ready: Callable[[], tuple[bool, str]], max_body_bytes: int, fallbacks: int = 0) -> None:
        self._table = table
        self._planner = planner
        self._admission = admission
        self._keys = keys
        self.stats = stats
        self.clock = clock
        self._hints = hints
        self._ready = ready
        self.max_body_bytes = max_body_bytes
        self._destinations = 1 + fallbacks  # the pick, then fallbacks the proxy may retry in order
        self._resolver = ModelResolver(understander, None, hints, planner.tier_load)

    async def pick(self, headers: dict[str, str], body: bytes, subset: frozenset[str] | None,
                   request_id: str) -> Pick:
        """Raises SitsError: the proxy answers it to the client (ImmediateResponse)."""
        ready, why = self._ready()
        if not ready:
            raise Overloaded(f"the gateway is not ready ({why})", headers=(("retry-after", "1"),))
        path = headers.get(":path", "")
        request = HttpRequest(headers.get(":method", "POST"), path, "", headers, body)
        if self._keys.enabled:
            self._keys.check(request)
        if len(body) > self.max_body_bytes:
            raise PayloadTooLarge(f"request body exceeds {self.max_body_bytes} bytes", param="body")
        allowed = _allowed(subset)
        api = _api_of(path)
        table = self._table()
        if api is None:  # not an inference call (e.g. GET /v1/models): any ready endpoint of the pool
            return self._any(table, path.partition("?")[0], allowed)
        api_path, schema = api
        parsed = schema.parse(body)
        prompt_text = schema.prompt_text(parsed)
        model_name: str = parsed["model"]
        token = bearer_token(request) if self._admission is not None else None
        priority = int(self._admission.rules.resolve(headers.get("x-sits-priority"), token, model_name)) \
            if self._admission is not None else 1
        routing = RequestIntake.routing(api_path, schema, parsed, parsed.get("stream") is True, request, request_id,
                                        prompt_text, priority, "anonymous", NO_TRACE)
        resolver = self._resolver
        resolved = resolver.named(table, routing) or await resolver.resolve(table, routing)
        tier: str | None = None
        if isinstance(resolved, Resolution):
            if resolved.workflow is not None:
                raise InvalidRequest(f"'{model_name}' is a workflow: SITS runs workflows itself, so send it to SITS's "
                                     "HTTP door, not through the endpoint picker", param="model")
            tier = resolved.tier
            model = resolved.model
            why = resolved.why
        else:
            model, why = resolved, ""
        # As the director does: a named model is admitted, then scheduled; `auto`'s tier is scheduled
        # first (its best model is what admission gates), then admitted.
        picked: Plan | None = None
        if tier is not None:
            picked = self._schedule(table, None, tier, routing, allowed)
            if not picked.endpoints:
                raise picked.rejected or _none_ready(picked.model, subset)
            model = picked.model
        assert model is not None
        ticket = await self._admit(model.name, routing)
        try:
            if picked is None:
                picked = self._schedule(table, model, None, routing, allowed)
            if not picked.endpoints:
                raise picked.rejected or _none_ready(picked.model, subset)
            return self._answer(picked, routing, body, why, ticket)
        except BaseException:
            if ticket is not None:
                ticket.release()
            raise

    def _schedule(self, table: RoutingTable, model: ModelEntry | None, tier: str | None, routing: RoutingRequest,
                  allowed: Allowed | None) -> Plan:
        now = self.clock()
        self.stats.refresh(now)  # p95, QPS, dynamic weights: at most once per refresh interval
        if tier is not None:
            return self._planner.tier(table, tier, routing, now, allowed)
        assert model is not None
        return self._planner.model(model, routing, now, allowed)

    async def _admit(self, gate: str, routing: RoutingRequest) -> Ticket | None:
        admission = self._admission
        if admission is None:
            return None
        ticket = admission.try_admit(gate, routing.priority)
        return ticket if ticket is not None else await admission.admit(gate, routing.priority, self.clock())

    def _answer(self, picked: Plan, routing: RoutingRequest, body: bytes, why: str, ticket: Ticket | None) -> Pick:
        primary = picked.endpoints[0]
        endpoints = tuple(e for e in picked.endpoints if e.upstream_model == primary.upstream_model)
        endpoints = endpoints[:self._destinations]
        sent = body
        if primary.upstream_model != routing.model:
            payload = orjson.loads(body)
            payload["model"] = primary.upstream_model
            sent = orjson.dumps(payload)
        hints = self._hints
        if hints is not None and picked.model.name != routing.model:
            sent = hints.translated(routing.model, picked.model.name, routing.prompt_text, sent)  # another family?
        return Pick(picked.model.name, endpoints, sent if sent is not body else None, picked.route + why, ticket)

    def _any(self, table: RoutingTable, path: str, allowed: Allowed | None) -> Pick:
        """A request without a model to route by: the least loaded ready endpoint of any model."""
        now = self.clock()
        routing = RoutingRequest(path, "", False, "")
        best: Plan | None = None
        for model in table.models.values():
            picked = self._planner.model(model, routing, now, allowed)
            if picked.endpoints and (best is None or self._load(picked) < self._load(best)):
                best = picked
        if best is None:
            raise Overloaded("no endpoint of the pool is ready", headers=(("retry-after", "1"),))
        return Pick(best.model.name, best.endpoints[:1], None, best.route)

    def _load(self, picked: Plan) -> int:
        return self.stats.get(picked.endpoints[0].id).in_flight


def _api_of(path: str) -> tuple[str, BodySchema[Any]] | None:
    path = path.partition("?")[0].rstrip("/")
    for suffix, api in _APIS.items():
        if path.endswith(suffix) and not (suffix == "/completions" and path.endswith("/chat/completions")):
            return api
    return None


def _allowed(subset: frozenset[str] | None) -> Allowed | None:
    if subset is None:
        return None
    pairs, hosts = subset_filter(subset)
    return lambda e: (e.host, e.port) in pairs or e.host in hosts


def _none_ready(model: ModelEntry, subset: frozenset[str] | None) -> SitsError:
    within = " within the proxy's subset hint" if subset is not None else ""
    return Overloaded(f"no endpoint of model '{model.name}' is ready{within}", headers=(("retry-after", "1"),))
