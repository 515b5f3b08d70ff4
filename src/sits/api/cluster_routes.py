"""The cluster API: switch aliases on every replica, read where switches and replicas stand,
and the replica-to-replica sync endpoint. Admin-guarded, like the control API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import unquote

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from sits.api.auth import AdminGuard
from sits.api.dispatch import Route
from sits.api.http_types import HttpRequest, HttpResponse
from sits.api.body_schema import parse_body
from sits.control.cluster_node import ClusterNode
from sits.control.registration import Name
from sits.errors import InvalidRequest, NotFound
from sits.state.replication.wire import WireError, decode, encode

ALIASES_PREFIX = "/v1/aliases/"
_SWITCH_SUFFIX = "/switch"
_ALIAS: TypeAdapter[str] = TypeAdapter(Name)


class SwitchRequest(BaseModel):
    """POST /v1/aliases/{alias}/switch."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    to: Name
    # Share of new requests sent to `to` while the rest stay on the current model; absent: all of them.
    canary_weight: Annotated[float, Field(gt=0, le=1)] | None = None


class ClusterRoutes:
    def __init__(self, node: ClusterNode, guard: AdminGuard,
                 limits: Callable[[], dict[str, Any]] | None = None) -> None:
        """`limits`: where tenant limits are counted now (shared in Redis, or this replica's share)."""
        self._node = node
        self._guard = guard
        self._limits = limits

    async def list_aliases(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        return _json(200, {"object": "list", "replica_id": self._node.replica.id,
                           "data": [v.to_json() for v in self._node.alias_views()]})

    async def alias_resource(self, request: HttpRequest, request_id: str) -> HttpResponse:
        """POST /v1/aliases/{alias}/switch."""
        self._guard.check(request)
        path = request.path.rstrip("/")
        if request.method != "POST" or not path.endswith(_SWITCH_SUFFIX):
            raise NotFound(f"no alias route for {request.method} {request.path}; use POST /v1/aliases/{{alias}}/switch")
        alias = unquote(path[len(ALIASES_PREFIX):-len(_SWITCH_SUFFIX)])
        if not alias or "/" in alias:
            raise InvalidRequest("the path must name one alias: /v1/aliases/{alias}/switch", param="alias")
        try:
            _ALIAS.validate_python(alias)  # the model-name rules
        except ValidationError:
            raise InvalidRequest(f"invalid alias name {alias!r}: letters, digits and ._:@/+- only, "
                                 "starting with a letter or digit, at most 128", param="alias") from None
        body = parse_body(SwitchRequest, request.body)
        view = await self._node.switch(alias, body.to, body.canary_weight)
        return _json(202, view.to_json())

    async def status(self, request: HttpRequest, request_id: str) -> HttpResponse:
        """GET /v1/cluster."""
        self._guard.check(request)
        described = self._node.describe()
        if self._limits is not None:
            described["limits"] = self._limits()
        return _json(200, described)

    async def sync(self, request: HttpRequest, request_id: str) -> HttpResponse:
        """POST /v1/cluster/sync: merge a peer's document (or delta); answer with ours, whole."""
        self._guard.check(request)
        try:
            _, doc = decode(request.body)
        except WireError as exc:
            raise InvalidRequest(str(exc), param="body") from None
        self._node.replica.receive(doc, "http")
        return HttpResponse(200, encode(self._node.replica.doc, self._node.replica.id))


def _json(status: int, payload: object) -> HttpResponse:
    return HttpResponse(status, orjson.dumps(payload))


def cluster_route_table(routes: ClusterRoutes) -> dict[tuple[str, str], Route]:
    """The exact-path routes, for the dispatcher."""
    return {
        ("GET", "/v1/aliases"): routes.list_aliases,
        ("GET", "/v1/cluster"): routes.status,
        ("POST", "/v1/cluster/sync"): routes.sync,
    }
