"""The control API: register, inspect, change and remove models while traffic flows.

Every answer carries the registry version (`registry_version` and an ETag); a change
may name the version it expects in `If-Match`, and gets 412 if another change won.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from sits.api.auth import AdminGuard
from sits.api.http_types import HttpRequest, HttpResponse
from sits.api.body_schema import parse_body
from sits.control.registration import EndpointRegistration, ModelRegistration, ModelUpdate
from sits.control.registry import Change, Registry
from sits.control.registry_records import ModelRecord
from sits.errors import InvalidRequest, NotFound
from sits.state.circuit_breaker import CircuitBreakers
from sits.state.endpoint_health import HealthBoard
from sits.state.endpoint_stats import StatsStore

PREFIX = "/v1/models/"


class ControlRoutes:
    def __init__(self, registry: Registry, guard: AdminGuard, health: HealthBoard, breakers: CircuitBreakers,
                 stats: StatsStore,
                 clock: Callable[[], float], discover: Callable[[str], Awaitable[list[str]]],
                 on_change: Callable[[], None]) -> None:
        self._on_change = on_change
        self._registry = registry
        self._guard = guard
        self._health = health
        self._breakers = breakers
        self._stats = stats
        self._clock = clock
        self._discover = discover

    async def register(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        reg = parse_body(ModelRegistration, request.body)
        change = await self._registry.register(reg, _if_match(request))
        return self._answer(201, change)

    async def list_registry(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        return self._json(200, {
            "object": "list", "registry_version": self._registry.version,
            "data": [self._describe(r) for r in self._registry.records()],
            "draining": [{"id": i, "in_flight": self._stats.get(i).in_flight} for i in self._health.draining()],
        })

    async def discover(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        body = orjson.loads(request.body or b"{}") if request.body else {}
        base_url = body.get("base_url") if isinstance(body, dict) else None
        if not isinstance(base_url, str):
            raise InvalidRequest("'base_url' (the server's OpenAI base URL) is required", param="base_url")
        models = await self._discover(base_url)
        return self._json(200, {"base_url": base_url, "models": models, "registry_version": self._registry.version})

    async def model_resource(self, request: HttpRequest, request_id: str) -> HttpResponse:
        """/v1/models/{name}[/endpoints[/{endpoint_id}]] for GET, PATCH, DELETE, POST."""
        self._guard.check(request)
        rest = request.path[len(PREFIX):]
        name, _, sub = rest.partition("/endpoints")
        if_match = _if_match(request)
        if not sub and not rest.endswith("/endpoints"):
            if request.method == "GET":
                return self._json(200, {**self._describe(self._registry.get(name)),
                                        "registry_version": self._registry.version})
            if request.method == "PATCH":
                change = await self._registry.update(name, parse_body(ModelUpdate, request.body), if_match)
                return self._answer(200, change)
            if request.method == "DELETE":
                change = await self._registry.remove(name, if_match)
                self._on_change()
                return self._json(200, {"deleted": name, "registry_version": change.version},
                                  etag=change.version)
        elif sub in ("", "/") and request.method == "POST":
            ep = parse_body(EndpointRegistration, request.body)
            return self._answer(201, await self._registry.add_endpoint(name, ep, if_match))
        elif sub.startswith("/") and len(sub) > 1 and request.method == "DELETE":
            change = await self._registry.remove_endpoint(name, sub[1:], if_match)
            return self._answer(200, change)
        raise NotFound(f"no control route for {request.method} {request.path}")

    def _answer(self, status: int, change: Change) -> HttpResponse:
        assert change.record is not None
        self._on_change()
        return self._json(status, {**self._describe(change.record), "registry_version": change.version},
                          etag=change.version)

    def _describe(self, record: ModelRecord) -> dict[str, Any]:
        now = self._clock()
        data = dataclasses.asdict(record)
        data.pop("next_endpoint_index", None)
        for ep in data["endpoints"]:
            ep.pop("timeouts", None)
            health = self._health.get(ep["id"])
            stats = self._stats.get(ep["id"])
            ep["state"] = "ready" if health is None else health.phase
            ep["circuit"] = self._breakers.state(ep["id"], now)
            ep["ejected_for_s"] = round(max(0.0, health.ejected_until - now), 3) if health else 0.0
            ep["last_probe_error"] = health.last_error if health else None
            ep["in_flight"] = stats.in_flight
            ep["requests"] = stats.requests
            ep["errors"] = stats.errors
            engine = stats.engine  # what the engine's /metrics said at the last scrape, as routing sees it
            ep["engine"] = None if engine is None else {
                "engine": engine.engine, "running": engine.running, "waiting": engine.waiting,
                "kv_cache_usage": engine.kv_cache_usage, "memory_usage": engine.memory_usage,
                "age_s": round(max(0.0, now - engine.observed_at), 3)}
        return data

    def _json(self, status: int, payload: dict[str, Any], etag: int | None = None) -> HttpResponse:
        version = self._registry.version if etag is None else etag
        return HttpResponse(status, orjson.dumps(payload), headers=[(b"etag", b'"%d"' % version)])


def _if_match(request: HttpRequest) -> int | None:
    value = request.headers.get("if-match")
    if value is None:
        return None
    text = value.strip().removeprefix("W/").strip('"')
    if not text.isdigit():
        raise InvalidRequest(f"If-Match must be a registry version number, got {value!r}", param="If-Match")
    return int(text)

