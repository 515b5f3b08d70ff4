"""The key gate at the doors (docs/limits-and-budgets.md): the dispatcher's `before` hook (on gRPC,
`authenticate_call` with the call's metadata) authenticates the bearer key, `admit` (awaited once in
the OpenAI routes and the gRPC service, the model known) checks the model, the limits and the budget,
and the request's `Observation` settles the ticket when it ends.

The key found by the hook travels to `admit` and to admission (the key's priority class) without a
second lookup, so the keyed hash is computed once per request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Final

from sits.api.auth import bearer_token
from sits.api.dispatch import Route
from sits.api.http_types import HttpRequest, HttpResponse, StreamingResponse
from sits.api.request_observer import Observation
from sits.errors import SitsError
from sits.pipeline.priority import priority_from
from sits.state.routing_table import RoutingTable
from sits.telemetry.tracing import RequestTrace
from sits.tenants.gate import TenantGate, Ticket
from sits.tenants.limit_plan import Denied, Reservation
from sits.tenants.records import KeyRecord, TeamRecord
from sits.tenants.redis_wire import RedisUnavailable
from sits.understanding.tokenizers.catalog import TokenizerCatalog

USER_HEADER: Final = "x-sits-user"
WARNING_HEADER: Final = b"x-sits-budget-warning"


class PromptTokens:
    """Prompt tokens for a reservation: the model's tokenizer when one is loaded, else chars / 4."""

    def __init__(self, tokenizers: TokenizerCatalog | None, table: Callable[[], RoutingTable]) -> None:
        self._tokenizers = tokenizers
        self._bridge = tokenizers.bridge if tokenizers is not None else None  # the catalog's, kept for its life
        self._table = table

    def __call__(self, model: str, text: str) -> int:
        if self._tokenizers is not None and self._bridge is not None and self._bridge.maps:
            entry = self._table().resolve(model)
            counter = self._tokenizers.counter_for(entry.name, entry.tokenizer_family) if entry else None
            if counter is not None:
                return counter.count(text)
        return len(text) // 4 + 1


class HttpTenantGate:
    """The hook, `key_class` and `admit` run one after another with no await between them (the request's
    body is parsed in between), so the key the hook found is simply kept here with its request: a
    request that does not find itself here (another door's, or after an await) is authenticated again."""

    def __init__(self, gate: TenantGate, prompt_tokens: PromptTokens, paths: Collection[str],
                 ask_stream_usage: bool = True) -> None:
        self.gate = gate
        self.ask_stream_usage = ask_stream_usage  # a keyed stream asks its upstream for the usage event
        self._prompt_tokens = prompt_tokens
        self._paths = paths
        self._request: HttpRequest | None = None  # the request the hook last authenticated, its key and team
        self._key: KeyRecord | None = None
        self._team: TeamRecord | None = None
        self._warns = False  # whether the last key (of its team) can pass a soft budget: told when either changes
        self._warns_for: tuple[KeyRecord | None, TeamRecord | None] = (None, None)
        self._warnings: dict[int, str] = {}  # id(request) -> soft-budget warning, until its answer takes it

    def before(self, request: HttpRequest, path: str) -> None:
        """The dispatcher's hook: 401 for a data-plane request without a usable key."""
        if path in self._paths:
            key = self._key = self.gate.authenticate(_bearer(request))
            team = self._team = self.gate.team_of(key)
            self._request = request
            known_key, known_team = self._warns_for
            if key is not known_key or team is not known_team:  # records are replaced, not changed, on reload
                self._warns, self._warns_for = self.gate.may_warn(key, team), (key, team)

    def authenticate_call(self, request: HttpRequest) -> None:
        """For a door without the dispatcher's hook (gRPC, its metadata as `request`): 401 without a
        usable key; the key then feeds the admission class and `admit`, as on HTTP."""
        key = self._key = self.gate.authenticate(_bearer(request))
        self._team = self.gate.team_of(key)
        self._request = request

    def asks_stream_usage(self, seen: Observation, body: Mapping[str, Any]) -> bool:
        """Whether a chat stream's upstream is asked for the usage event (the door then takes it out of
        what the client gets): a keyed stream, settled on it, whose client set no `stream_options`;
        never with `limits.ask_stream_usage` off."""
        return self.ask_stream_usage and seen.tenant is not None and "stream_options" not in body

    def warning(self, request: HttpRequest) -> str | None:
        """The soft-budget warning of the request's ticket, once admitted (taken: asked once per request)."""
        return self._warnings.pop(id(request), None) if self._warnings else None

    def key_class(self, request: HttpRequest) -> int | None:
        """The admission class of the request's key, when the key names one."""
        key = self._key
        if self._request is not request or key is None or key.priority is None:
            return None
        cls = priority_from(key.priority)
        return int(cls) if cls is not None else None

    async def admit(self, seen: Observation, request: HttpRequest, model: str, body: Mapping[str, Any],
                    prompt_text: str, max_tokens: int) -> None:
        """Check the model, the limits and the budget; the ticket rides on `seen` until it finishes.
        `max_tokens`: the completion the client asked for (0: none), as `RoutingRequest.max_tokens`."""
        ticket = self.begin(seen, request, model, body, prompt_text, max_tokens)
        if ticket.pending is not None:
            self.end(seen, request, prompt_text, ticket, await ticket.pending)

    def begin(self, seen: Observation, request: HttpRequest, model: str, body: Mapping[str, Any],
              prompt_text: str, max_tokens: int) -> Ticket:
        """`admit` without its await, for a route that awaits in its own coroutine (one frame fewer on the
        way back from Redis): a ticket admitted already, or one whose `pending` the route awaits and hands
        to `end`."""
        gate = self.gate
        try:
            key = self._key if self._request is request else None
            if key is None:  # a door that skipped the hook
                key = gate.authenticate(bearer_token(request))
                team = gate.team_of(key)
            else:
                team = self._team
            user = body.get("user")
            if not isinstance(user, str):
                user = request.headers.get(USER_HEADER)
            ticket = gate.begin(key, team, model, user, seen.request_id, prompt_text, max_tokens or None)
        except SitsError as exc:
            seen.failed(exc, prompt_text)
            raise
        if ticket.pending is None:
            self._admitted(seen, request, ticket)
        return ticket

    def end(self, seen: Observation, request: HttpRequest, prompt_text: str, ticket: Ticket,
            outcome: Reservation | Denied | RedisUnavailable) -> None:
        """The second half: what the limiter answered for `ticket` (`begin`)."""
        try:
            self.gate.end(ticket, outcome)
        except SitsError as exc:
            seen.failed(exc, prompt_text)
            raise
        self._admitted(seen, request, ticket)

    def _admitted(self, seen: Observation, request: HttpRequest, ticket: Ticket) -> None:
        seen.tenant = ticket
        if ticket.warning is not None:
            if len(self._warnings) > 10_000:  # answers that never came to take theirs
                self._warnings.clear()
            self._warnings[id(request)] = ticket.warning
        trace = seen.trace
        if isinstance(trace, RequestTrace) and trace.recording:  # the key's id and team on the span, never the key
            trace.root.set_attributes(ticket.span_attributes())

    def wrap(self, route: Route) -> Route:
        """`route` with the soft-budget warning header on its answer. Only a key or team with a soft
        budget can earn one: other requests get the route's own coroutine, no wrapper around it."""
        def gated(request: HttpRequest, request_id: str) -> Awaitable[HttpResponse | StreamingResponse]:
            key = self._key
            if self._request is request and key is not None and not self._warns:
                return route(request, request_id)
            return warned(request, request_id)

        async def warned(request: HttpRequest, request_id: str) -> HttpResponse | StreamingResponse:
            response = await route(request, request_id)
            warning = self.warning(request)
            if warning is not None:
                response.headers.append((WARNING_HEADER, warning.encode("latin-1", "replace")))
            return response
        return gated


def _bearer(request: HttpRequest) -> str | None:
    """`bearer_token`, with the usual form (`Bearer <token>`, nothing to strip) read in one step."""
    value = request.headers.get("authorization")
    if value is not None and value.startswith("Bearer ") and len(value) > 7 and value[7] > " " and value[-1] > " ":
        return value[7:]
    return bearer_token(request)
