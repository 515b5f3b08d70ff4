"""What every door (HTTP/1.1, HTTP/2, gRPC) derives from a validated body and the request's headers
before routing, so the doors cannot drift apart: the cache scope and admission class, then the
routing request with what scheduling needs to know."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sits.api.auth import bearer_token
from sits.api.http_types import HttpRequest
from sits.api.body_fields import max_tokens_of, sla_ms_of
from sits.api.body_schema import BodySchema
from sits.pipeline.admission_step import Admission
from sits.pipeline.cache_keys import cache_scope
from sits.pipeline.context import Passthrough, RoutingRequest
from sits.pipeline.director import Director
from sits.telemetry.tracing import Trace
from sits.tuples import new_tuple


class RequestIntake:
    def __init__(self, director: Director, admission: Admission | None,
                 key_class: Callable[[HttpRequest], int | None] | None = None) -> None:
        """`key_class`: the admission class of the request's tenant key (tenants on), else None."""
        self._answers = director.answers
        # The class rules (header, key, model) are static: read here, before the admission stage.
        self._rules = admission.rules if admission is not None else None
        self._key_class = key_class if admission is not None else None
        # The caller's key matters to admission only when some key has its own class.
        self._admission_reads_keys = self._rules is not None and bool(self._rules.by_key_sha256)

    def class_and_scope(self, request: HttpRequest, model: str) -> tuple[int, str]:
        """(admission class, cache scope); 422 naming `x-sits-priority` when that header is malformed."""
        caching = self._answers.enabled  # true once the cache is open (at startup): read per request
        token = bearer_token(request) if caching or self._admission_reads_keys else None
        scope = cache_scope(None, token) if caching else "anonymous"
        if self._rules is None:
            return 1, scope
        key_class = self._key_class(request) if self._key_class is not None else None
        priority = int(self._rules.resolve(request.headers.get("x-sits-priority"), token, model, key_class))
        return priority, scope

    @staticmethod
    def routing(api: str, schema: BodySchema[Any], body: Mapping[str, Any], stream: bool, request: HttpRequest,
                request_id: str, prompt_text: str, priority: int, scope: str,
                trace: Trace, passthrough: Passthrough | None = None, translated: bool = False) -> RoutingRequest:
        """The routing request; 422 naming `x-sits-sla-ms` when that header is malformed. `passthrough`:
        the client's Responses body, for endpoints that declare the Responses API; `translated`: the
        client speaks another surface than chat (`RoutingRequest.translated`)."""
        # Every field, in order, without the named tuple's own __new__ (sits/tuples.py): built on every request.
        return new_tuple(RoutingRequest, (api, body["model"], stream, request_id, prompt_text, priority, None, scope,
                                          trace, schema.needs(body), max_tokens_of(body), sla_ms_of(request.headers),
                                          passthrough, translated))
