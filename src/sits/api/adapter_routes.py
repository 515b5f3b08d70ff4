"""The adapter control API (admin key required): register, validate, activate, deactivate, list.

    POST   /v1/adapters                       register a PEFT directory (validated at once; 201 + report)
    GET    /v1/adapters                       every adapter with its report and where it is loaded
    GET    /v1/adapters/{name}                one adapter
    POST   /v1/adapters/{name}/validate       check the files again
    POST   /v1/adapters/{name}/activate       load on the base model's vLLM endpoints (422 if invalid)
    POST   /v1/adapters/{name}/deactivate     unload
    DELETE /v1/adapters/{name}                forget (must be inactive)

Clients then ask for `model: "<base>:<adapter>"`.
"""

from __future__ import annotations

from typing import Any

import orjson

from sits.api.auth import AdminGuard
from sits.api.http_types import HttpRequest, HttpResponse
from sits.api.body_schema import parse_body
from sits.control.adapters.registry import AdapterRecord, AdapterRegistry
from sits.control.adapters.schemas import AdapterActivation, AdapterRegistration
from sits.errors import NotFound

COLLECTION = "/v1/adapters"
PREFIX = "/v1/adapters/"


class AdapterRoutes:
    def __init__(self, registry: AdapterRegistry, guard: AdminGuard) -> None:
        self._registry = registry
        self._guard = guard

    async def register(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        await self._registry.sync()  # under --workers: first what the other workers changed
        record = await self._registry.register(parse_body(AdapterRegistration, request.body))
        return _json(201, record.describe())

    async def list_adapters(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        await self._registry.sync()
        return _json(200, {"object": "list", "data": [r.describe() for r in self._registry.records()]})

    async def adapter_resource(self, request: HttpRequest, request_id: str) -> HttpResponse:
        """/v1/adapters/{name}[/validate|/activate|/deactivate]."""
        self._guard.check(request)
        await self._registry.sync()
        name, _, action = request.path[len(PREFIX):].rstrip("/").partition("/")
        method = request.method
        if not action and method == "GET":
            return _json(200, self._registry.get(name).describe())
        if not action and method == "DELETE":
            await self._registry.remove(name)
            return _json(200, {"deleted": name})
        if method == "POST" and action == "validate":
            return _json(200, (await self._registry.validate(name)).describe())
        if method == "POST" and action in ("activate", "deactivate"):
            wanted = parse_body(AdapterActivation, request.body) if request.body else AdapterActivation()
            change = self._registry.activate if action == "activate" else self._registry.deactivate
            record, outcomes = await change(name, wanted.endpoints)
            return _json(200, _with_outcomes(record, outcomes))
        raise NotFound(f"no adapter route for {method} {request.path}")


def _with_outcomes(record: AdapterRecord, outcomes: dict[str, str]) -> dict[str, Any]:
    return {**record.describe(), "endpoints": outcomes}


def _json(status: int, payload: dict[str, Any]) -> HttpResponse:
    return HttpResponse(status, orjson.dumps(payload))
