"""What one request is, as the pipeline sees it."""

from __future__ import annotations

from typing import NamedTuple

from sits.telemetry.tracing import NO_TRACE, Trace


class Passthrough(NamedTuple):
    """A `/v1/responses` request as the client sent it, for endpoints that declare `api: responses`
    (the send step sends `body` to their `/responses` instead of the chat body)."""

    body: bytes  # the Responses body (`previous_response_id` expanded when SITS stored that response)
    # A `previous_response_id` SITS does not know, kept in `body` for the upstream: only an endpoint that
    # speaks the Responses API may answer it (any other is refused with 404 naming the field).
    unknown_previous: str | None = None


class RoutingRequest(NamedTuple):
    """Frozen description of a request; built once at the HTTP edge (a named tuple: built on every
    request, and a frozen dataclass's __init__ costs several times a tuple's).

    `api` is the upstream path below the endpoint's base URL, e.g. "/chat/completions".
    """

    api: str
    model: str
    stream: bool
    request_id: str
    prompt_text: str = ""
    priority: int = 1  # admission class: 0 real-time, 1 interactive, 2 batch
    tenant: str | None = None
    cache_scope: str = "anonymous"  # whose cache entries this request may see
    trace: Trace = NO_TRACE  # this request's spans (NO_TRACE when tracing is off)
    # For the scheduling filters: what the request needs of a model, and the completion it asks for.
    needs: frozenset[str] = frozenset()  # "tools", "vision", "json"
    max_tokens: int = 0  # 0: the client did not say
    sla_ms: float | None = None  # the request's own latency bound (x-sits-sla-ms)
    passthrough: Passthrough | None = None  # a Responses request, for endpoints that speak that API
    # The client speaks another surface (Responses, Messages): its stream's events are read one by one, by
    # a translating reader or the pass-through tap, that refuses malformed SSE itself, so the exchange
    # leaves that check to it.
    translated: bool = False
