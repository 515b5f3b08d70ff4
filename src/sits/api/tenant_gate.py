"""The key gate at the doors (docs/limits-and-budgets.md): the dispatcher's `before` hook (on gRPC,
`authenticate_call` with the call's metadata) authenticates the bearer key, `admit` (awaited once in
the OpenAI routes and the gRPC service, the model known) checks the model, the limits and the budget,
and the request's `Observation` settles the ticket when it ends.

The key found by the hook travels to `admit` and to admission (the key's priority class) in a context
variable of the request's task, so the keyed hash is computed once per request.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from contextvars import ContextVar
from typing import Any

from sits.api.auth import bearer_token
from sits.api.dispatch import Route
from sits.api.http_types import HttpRequest, HttpResponse, StreamingResponse
from sits.api.request_observer import Observation
from sits.api.schemas import max_tokens_of
from sits.errors import SitsError
from sits.pipeline.admission import priority_from
from sits.state.routing_table import RoutingTable
from sits.tenants.gate import TenantGate
from sits.tenants.records import KeyRecord
from sits.understanding.tokenizers.catalog import TokenizerCatalog

USER_HEADER = "x-sits-user"
WARNING_HEADER = b"x-sits-budget-warning"


class _Caller:
    """The request being served and the key it presented (one per data-plane request)."""

    __slots__ = ("request", "key", "warning")

    def __init__(self, request: HttpRequest, key: KeyRecord) -> None:
        self.request = request
        self.key = key
        self.warning: str | None = None


_caller: ContextVar[_Caller | None] = ContextVar("sits_tenant_caller", default=None)


class PromptTokens:
    """Prompt tokens for a reservation: the model's tokenizer when one is loaded, else chars / 4."""

    def __init__(self, tokenizers: TokenizerCatalog | None, table: Callable[[], RoutingTable]) -> None:
        self._tokenizers = tokenizers
        self._table = table

    def counter(self, model: str, text: str) -> Callable[[], int]:
        def count() -> int:
            if self._tokenizers is not None and self._tokenizers.bridge.maps:
                entry = self._table().resolve(model)
                counter = self._tokenizers.counter_for(entry.name, entry.tokenizer_family) if entry else None
                if counter is not None:
                    return counter.count(text)
            return len(text) // 4 + 1
        return count


class HttpTenantGate:
    def __init__(self, gate: TenantGate, prompt_tokens: PromptTokens, paths: Collection[str]) -> None:
        self.gate = gate
        self._prompt_tokens = prompt_tokens
        self._paths = paths

    def before(self, request: HttpRequest, path: str) -> None:
        """The dispatcher's hook: 401 for a data-plane request without a usable key."""
        if path in self._paths:
            _caller.set(_Caller(request, self.gate.authenticate(bearer_token(request))))

    def authenticate_call(self, request: HttpRequest) -> None:
        """For a door without the dispatcher's hook (gRPC, its metadata as `request`): 401 without a
        usable key; the key then feeds the admission class and `admit`, as on HTTP."""
        _caller.set(_Caller(request, self.gate.authenticate(bearer_token(request))))

    def warning(self, request: HttpRequest) -> str | None:
        """The soft-budget warning of the request's ticket, once admitted (the gRPC door's metadata)."""
        caller = _caller.get()
        return caller.warning if caller is not None and caller.request is request else None

    def key_class(self, request: HttpRequest) -> int | None:
        """The admission class of the request's key, when the key names one."""
        caller = _caller.get()
        if caller is None or caller.request is not request or caller.key.priority is None:
            return None
        cls = priority_from(caller.key.priority)
        return int(cls) if cls is not None else None

    async def admit(self, seen: Observation, request: HttpRequest, model: str, body: Mapping[str, Any],
                    prompt_text: str) -> None:
        """Check the model, the limits and the budget; the ticket rides on `seen` until it finishes."""
        caller = _caller.get()
        try:
            if caller is None or caller.request is not request:  # a door that skipped the hook
                caller = _Caller(request, self.gate.authenticate(bearer_token(request)))
            user = body.get("user")
            if not isinstance(user, str):
                user = request.headers.get(USER_HEADER)
            max_tokens = max_tokens_of(body)
            ticket = await self.gate.admit(caller.key, model, user, seen.request_id,
                                           self._prompt_tokens.counter(model, prompt_text), max_tokens or None)
        except SitsError as exc:
            seen.failed(exc, prompt_text)
            raise
        seen.tenant = ticket
        caller.warning = ticket.warning
        if seen.trace.recording:  # the key's public id and team on the request's span, never the key
            seen.trace.root.set_attributes(ticket.span_attributes())

    def wrap(self, route: Route) -> Route:
        """`route` with the soft-budget warning header on its answer."""
        async def gated(request: HttpRequest, request_id: str) -> HttpResponse | StreamingResponse:
            response = await route(request, request_id)
            caller = _caller.get()
            if caller is not None and caller.request is request and caller.warning is not None:
                response.headers.append((WARNING_HEADER, caller.warning.encode("latin-1", "replace")))
            return response
        return gated
