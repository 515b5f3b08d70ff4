"""The tenant admin API (admin key), and spend reports (admin key, or a team's own key).

    POST   /v1/teams                  create a team                       GET /v1/teams      list (?organisation=)
    GET    /v1/teams/{id}             one team                            PATCH              change fields
    DELETE /v1/teams/{id}             remove (409 naming its keys while any is not revoked)
    POST   /v1/keys                   create a key: the secret is in this answer and nowhere else
    GET    /v1/keys                   list (?team=&limit=&cursor=)        GET /v1/keys/{id}  one key
    PATCH  /v1/keys/{id}              change limits, budget, models, priority, expiry, metadata
    POST   /v1/keys/{id}/rotate       a new secret; the old one works `overlap_s` longer
    POST   /v1/keys/{id}/revoke       every secret of the key stops working
    GET    /v1/spend                  ?group_by=key|team|model|day&from=&to=&team=&key=&limit=&cursor=

Every change is one transaction: a bad field is refused (4xx naming it) before anything is written. No
secret, hash or prompt is logged; a key's secret is in the creation or rotation answer only.
"""

from __future__ import annotations

import datetime as dt
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

import orjson

from sits.api.auth import AdminGuard, bearer_token
from sits.api.dispatch import Route
from sits.api.http_types import HttpRequest, HttpResponse
from sits.api.body_schema import parse_body
from sits.api.tenant_schemas import KeyCreate, KeyRevocation, KeyRotation, KeyUpdate, TeamCreate, TeamUpdate
from sits.errors import Forbidden, InvalidRequest, NotFound, Unauthorized, UnprocessableRequest
from sits.tenants import codec
from sits.tenants.directory import LiveKeyDirectory
from sits.tenants.key_lifecycle import IssuedKey, KeyLifecycle
from sits.tenants.periods import date_of, day_of_date
from sits.tenants.records import KeyRecord, TeamRecord
from sits.tenants.spend_store import SpendStore
from sits.tenants.store import KeyEntry, TeamEntry, TenantStore

TEAMS = "/v1/teams"
TEAMS_PREFIX = "/v1/teams/"
KEYS = "/v1/keys"
KEYS_PREFIX = "/v1/keys/"
SPEND = "/v1/spend"
MAX_PAGE = 1000
DEFAULT_PAGE = 100
RouteTables = tuple[dict[tuple[str, str], Route], dict[str, Route]]  # (exact routes, prefix routes)


class TenantRoutes:
    def __init__(self, store: TenantStore, lifecycle: KeyLifecycle, spend: SpendStore, directory: LiveKeyDirectory,
                 guard: AdminGuard, default_overlap_s: float, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._keys = lifecycle
        self._spend = spend
        self._directory = directory
        self._guard = guard
        self._default_overlap_s = default_overlap_s
        self._clock = clock

    def route_table(self) -> RouteTables:
        """(exact routes, prefix routes) for app.py's dispatcher."""
        return ({("POST", TEAMS): self.create_team, ("GET", TEAMS): self.list_teams,
                 ("POST", KEYS): self.create_key, ("GET", KEYS): self.list_keys, ("GET", SPEND): self.spend},
                {TEAMS_PREFIX: self.team_resource, KEYS_PREFIX: self.key_resource})

    # -- teams ------------------------------------------------------------------

    async def create_team(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        body = parse_body(TeamCreate, request.body)
        team = TeamRecord(team_id=body.team_id or "team_" + secrets.token_hex(6), name=body.name,
                          organisation=body.organisation, limits=body.limits.record(),
                          budget=body.budget.record() if body.budget else None, metadata=codec.pairs_of(body.metadata))
        entry = await self._store.create_team(team, self._clock())
        await self._directory.catch_up()
        return _json(201, team_json(entry))

    async def list_teams(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        query = _query(request, {"organisation", "limit", "cursor"})
        limit = _limit(query)
        found = await self._store.teams(organisation=query.get("organisation"), after=query.get("cursor"),
                                        limit=limit + 1)
        page = found[:limit]
        return _json(200, {"object": "list", "data": [team_json(t) for t in page],
                           "next_cursor": page[-1].record.team_id if len(found) > limit else None})

    async def team_resource(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        team_id, action = _id_and_action(request.path, TEAMS_PREFIX, "team")
        if action:
            raise NotFound(f"no team route for {request.method} {request.path}")
        if request.method == "GET":
            return _json(200, team_json(await self._store.team(team_id)))
        if request.method == "PATCH":
            changes = parse_body(TeamUpdate, request.body).changes()
            entry = await self._store.update_team(team_id, changes, self._clock())
            await self._directory.catch_up()
            return _json(200, team_json(entry))
        if request.method == "DELETE":
            await self._store.delete_team(team_id)
            await self._directory.catch_up()
            return _json(200, {"deleted": team_id})
        raise NotFound(f"no team route for {request.method} {request.path}")

    # -- keys -------------------------------------------------------------------

    async def create_key(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        body = parse_body(KeyCreate, request.body)
        now = self._clock()
        if body.expires_at is not None and body.expires_in_s is not None:
            raise UnprocessableRequest("give expires_at or expires_in_s, not both", param="expires_in_s")
        expires_at = now + body.expires_in_s if body.expires_in_s is not None else body.expires_at
        _check_future(expires_at, now)
        key = KeyRecord(key_id="", name=body.name, team_id=body.team_id, key_hash=b"",
                        allowed_models=tuple(body.allowed_models), priority=body.priority, limits=body.limits.record(),
                        model_limits=tuple((p, limits.record()) for p, limits in body.model_limits.items()),
                        budget=body.budget.record() if body.budget else None, expires_at=expires_at,
                        metadata=codec.pairs_of(body.metadata))
        issued = await self._keys.create(key)
        await self._directory.catch_up()
        return _json(201, _issued_json(issued, now))

    async def list_keys(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        query = _query(request, {"team", "limit", "cursor"})
        limit = _limit(query)
        found = await self._store.keys(team_id=query.get("team"), after=query.get("cursor"), limit=limit + 1)
        page = found[:limit]
        now = self._clock()
        return _json(200, {"object": "list", "data": [key_json(k, now) for k in page],
                           "next_cursor": page[-1].record.key_id if len(found) > limit else None})

    async def key_resource(self, request: HttpRequest, request_id: str) -> HttpResponse:
        """/v1/keys/{id} (GET, PATCH) and /v1/keys/{id}/rotate|revoke (POST)."""
        self._guard.check(request)
        key_id, action = _id_and_action(request.path, KEYS_PREFIX, "key")
        method, now = request.method, self._clock()
        if not action and method == "GET":
            return _json(200, key_json(await self._store.key(key_id), now))
        if not action and method == "PATCH":
            changes = parse_body(KeyUpdate, request.body).changes()
            _check_future(changes.get("expires_at"), now)
            entry = await self._store.update_key(key_id, changes, now)
            await self._directory.catch_up()
            return _json(200, key_json(entry, now))
        if action == "rotate" and method == "POST":
            body = parse_body(KeyRotation, request.body) if request.body else KeyRotation()
            overlap = self._default_overlap_s if body.overlap_s is None else body.overlap_s
            issued = await self._keys.rotate(key_id, overlap)
            await self._directory.catch_up()
            return _json(200, _issued_json(issued, now))
        if action == "revoke" and method == "POST":
            if request.body:
                parse_body(KeyRevocation, request.body)
            entry = await self._keys.revoke(key_id)
            await self._directory.catch_up()
            return _json(200, key_json(entry, now))
        raise NotFound(f"no key route for {method} {request.path}")

    # -- spend ------------------------------------------------------------------

    async def spend(self, request: HttpRequest, request_id: str) -> HttpResponse:
        """Spend totals from the roll-ups. A team's own key (not the admin key) sees its team only."""
        own_team = self._caller_team(request)
        query = _query(request, {"group_by", "from", "to", "team", "key", "limit", "cursor"})
        group_by = query.get("group_by", "key")
        if group_by not in ("key", "team", "model", "day"):
            raise InvalidRequest("'group_by' must be key, team, model or day", param="group_by")
        from_day, to_day = _day(query, "from"), _day(query, "to")
        if from_day is not None and to_day is not None and from_day > to_day:
            raise InvalidRequest("'from' is after 'to'", param="from")
        team = query.get("team")
        if own_team is not None:
            if team is not None and team != own_team:
                raise Forbidden("a team's key can read only its own team's spend", param="team")
            team = own_team
        page = await self._spend.report(group_by, from_day=from_day, to_day=to_day, team_id=team,  # type: ignore[arg-type]
                                        key_id=query.get("key"), limit=_limit(query), cursor=query.get("cursor"))
        if group_by == "day":
            for row in page.rows:
                row["day"] = date_of(row["day"]).isoformat()
        return _json(200, {"object": "list", "group_by": group_by, "data": page.rows, "next_cursor": page.next_cursor})

    def _caller_team(self, request: HttpRequest) -> str | None:
        """None for the admin key; the key's team for a usable data-plane key; 401 otherwise."""
        if self._guard.is_admin(request):
            return None
        token = bearer_token(request)
        if token is None:
            raise Unauthorized("spend reports need 'Authorization: Bearer <admin key or team key>'")
        key = self._directory.by_hash(self._keys.hash(token))
        if key is None or not key.usable_at(self._clock()):
            raise Unauthorized("invalid, revoked or expired key")
        return key.team_id


# -- shapes ---------------------------------------------------------------------


def team_json(entry: TeamEntry) -> dict[str, Any]:
    t = entry.record
    return {"object": "team", "team_id": t.team_id, "name": t.name, "organisation": t.organisation,
            "limits": codec.limits_dict(t.limits), "budget": codec.budget_dict(t.budget), "metadata": dict(t.metadata),
            "created_at": entry.created_at, "updated_at": entry.updated_at}


def key_json(entry: KeyEntry, now: float) -> dict[str, Any]:
    k = entry.record
    status = "revoked" if k.revoked_at is not None else \
        "expired" if k.expires_at is not None and k.expires_at <= now else "active"
    return {"object": "key", "key_id": k.key_id, "name": k.name, "team_id": k.team_id, "status": status,
            "allowed_models": list(k.allowed_models), "priority": k.priority, "limits": codec.limits_dict(k.limits),
            "model_limits": codec.model_limits_dict(k.model_limits), "budget": codec.budget_dict(k.budget),
            "expires_at": k.expires_at, "revoked_at": k.revoked_at, "metadata": dict(k.metadata),
            "previous_secrets_valid_until": [v for v in entry.previous_valid_until if v > now],
            "created_at": entry.created_at, "updated_at": entry.updated_at}


def _issued_json(issued: IssuedKey, now: float) -> dict[str, Any]:
    return {**key_json(issued.entry, now), "key": issued.secret}


def _json(status: int, payload: Mapping[str, Any]) -> HttpResponse:
    return HttpResponse(status, orjson.dumps(payload), headers=[(b"cache-control", b"no-store")])


# -- inputs ---------------------------------------------------------------------


def _query(request: HttpRequest, allowed: set[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in parse_qsl(request.query or "", keep_blank_values=True):
        if name not in allowed:
            raise InvalidRequest(f"unknown query parameter '{name}'; use {', '.join(sorted(allowed))}", param=name)
        if name in out:
            raise InvalidRequest(f"query parameter '{name}' given twice", param=name)
        if not value:
            raise InvalidRequest(f"query parameter '{name}' is empty", param=name)
        out[name] = value
    return out


def _limit(query: Mapping[str, str]) -> int:
    text = query.get("limit")
    if text is None:
        return DEFAULT_PAGE
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise InvalidRequest(f"'limit' must be a whole number from 1 to {MAX_PAGE}", param="limit")
    return int(text)


def _day(query: Mapping[str, str], name: str) -> int | None:
    text = query.get(name)
    if text is None:
        return None
    try:
        return day_of_date(dt.date.fromisoformat(text))
    except ValueError:
        raise InvalidRequest(f"'{name}' must be a date, YYYY-MM-DD (UTC)", param=name) from None


def _id_and_action(path: str, prefix: str, what: str) -> tuple[str, str]:
    ident, _, action = path[len(prefix):].rstrip("/").partition("/")
    if not ident:
        raise NotFound(f"no {what} id in {path}", param=f"{what}_id")
    return ident, action


def _check_future(expires_at: float | None, now: float) -> None:
    if expires_at is not None and expires_at <= now:
        raise UnprocessableRequest("'expires_at' is in the past", param="expires_at")
