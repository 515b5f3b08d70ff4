"""KV-cache migration between llama.cpp instances of one model (admin key required; docs/kv-cache.md).

    POST /v1/kv/migrate     {"from": endpoint id, "to": [endpoint ids]}  copy the source's hot slots
                            ("to" defaults to the model's other endpoints); answers the report
    GET  /v1/kv/migrations  the latest reports, automatic (drain) ones included
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import orjson
from pydantic import BaseModel, ConfigDict, Field

from sits.api.auth import AdminGuard
from sits.api.http_types import HttpRequest, HttpResponse
from sits.api.body_schema import parse_body
from sits.control.kv_migration import KvMigrator
from sits.errors import InvalidRequest, NotFound
from sits.state.routing_table import Endpoint, RoutingTable

MIGRATE = "/v1/kv/migrate"
MIGRATIONS = "/v1/kv/migrations"

EndpointId = Annotated[str, Field(min_length=1, max_length=256)]


class KvMigrate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)

    source: EndpointId = Field(alias="from")
    to: list[EndpointId] = []


class KvRoutes:
    def __init__(self, migrator: KvMigrator, table: Callable[[], RoutingTable], guard: AdminGuard) -> None:
        self._migrator = migrator
        self._table = table
        self._guard = guard

    async def migrate(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        body = parse_body(KvMigrate, request.body)
        endpoints = {e.id: e for m in self._table().models.values() for e in m.endpoints}
        source = endpoints.get(body.source)
        if source is None:
            raise NotFound(f"no endpoint '{body.source}'", param="from")
        targets: list[Endpoint] = []
        for ref in body.to or [e.id for e in self._table().models[source.model].endpoints if e.id != source.id]:
            target = endpoints.get(ref)
            if target is None:
                raise NotFound(f"no endpoint '{ref}'", param="to")
            if target.model != source.model:
                raise InvalidRequest(f"'{ref}' serves '{target.model}', not '{source.model}': a KV cache moves "
                                     "only between instances of the same model", param="to")
            targets.append(target)
        if not targets:
            raise InvalidRequest(f"'{source.model}' has no other endpoint to move caches to", param="to")
        report = await self._migrator.migrate(source, targets, "operator")
        return HttpResponse(200, orjson.dumps(report.to_json()))

    async def migrations(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        return HttpResponse(200, orjson.dumps({"migrations": [r.to_json() for r in self._migrator.reports]}))
