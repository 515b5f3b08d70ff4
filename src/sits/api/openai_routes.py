"""The OpenAI data-plane endpoints: validate at the edge, hand to the director, relay the answer."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from sits.api.chat_stream_relay import ChatStreamRelay
from sits.api.http_types import HttpRequest, HttpResponse, StreamingResponse
from sits.api.request_observer import UNKNOWN_MODEL, RequestObserver
from sits.api.request_intake import RequestIntake
from sits.api.tenant_gate import HttpTenantGate
from sits.api.body_fields import asking_usage, include_usage
from sits.api.body_schema import BodySchema
from sits.api.schemas import CHAT_COMPLETION, COMPLETION, EMBEDDING
from sits.errors import SitsError
from sits.pipeline.admission_step import Admission
from sits.pipeline.cached_response import completion_from_json
from sits.pipeline.director import Director
from sits.pipeline.model_resolution import AUTO_MODEL
from sits.pipeline.stream_resume import CHAT_API
from sits.state.routing_table import RoutingTable

log = logging.getLogger("sits.api")

_SEEN_UNKNOWN_LIMIT = 256


class OpenAIRoutes:
    def __init__(self, director: Director, table: Callable[[], RoutingTable], created: int,
                 observer: RequestObserver, admission: Admission | None = None,
                 resume_streams: bool = False, tenants: HttpTenantGate | None = None) -> None:
        self._director = director
        self._resume_streams = resume_streams
        self._observer = observer
        self._tenants = tenants
        self._intake = RequestIntake(director, admission, tenants.key_class if tenants is not None else None)
        self._table = table
        self._created = created
        self._unknown_fields_seen: set[str] = set()

    def chat_completions(self, request: HttpRequest, request_id: str) -> Awaitable[HttpResponse | StreamingResponse]:
        return self._forward(request, request_id, "/chat/completions", CHAT_COMPLETION)

    def completions(self, request: HttpRequest, request_id: str) -> Awaitable[HttpResponse | StreamingResponse]:
        return self._forward(request, request_id, "/completions", COMPLETION)

    def embeddings(self, request: HttpRequest, request_id: str) -> Awaitable[HttpResponse | StreamingResponse]:
        return self._forward(request, request_id, "/embeddings", EMBEDDING)

    def _parse(self, schema: BodySchema[Any], request: HttpRequest) -> dict[str, Any]:
        try:
            return schema.parse(request.body)
        except SitsError as exc:
            self._observer.metrics.failed(UNKNOWN_MODEL, exc.http_status)
            raise

    async def list_models(self, request: HttpRequest, request_id: str) -> HttpResponse:
        table = self._table()
        data: list[dict[str, Any]] = [
            {"id": m.name, "object": "model", "created": self._created, "owned_by": m.owned_by, "tier": m.tier}
            for m in table.models.values()
        ]
        data += [
            {"id": alias, "object": "model", "created": self._created, "owned_by": "sits", "alias_of": target}
            for alias, target in table.aliases.items()
        ]
        if AUTO_MODEL not in table.models and AUTO_MODEL not in table.aliases and table.models:
            data.append({"id": AUTO_MODEL, "object": "model", "created": self._created, "owned_by": "sits",
                         "description": "SITS chooses the model per request"})
        data += [{"id": name, "object": "model", "created": self._created, "owned_by": "sits",
                  "description": description or "fusion workflow"} for name, description in self._director.workflows()]
        return HttpResponse(200, orjson.dumps({"object": "list", "data": data}))

    async def _forward(
        self, request: HttpRequest, request_id: str, api: str, schema: BodySchema[Any]
    ) -> HttpResponse | StreamingResponse:
        body = self._parse(schema, request)
        unknown = schema.unknown_fields(body)
        if unknown:
            self._note_unknown_fields(api, unknown)
        prompt_text = schema.prompt_text(body)
        model: str = body["model"]
        stream = body.get("stream") is True
        priority, scope = self._intake.class_and_scope(request, model)
        seen = self._observer.begin(request, api, request_id, model, body)
        routing = self._intake.routing(api, schema, body, stream, request, request_id, prompt_text, priority, scope,
                                       seen.trace)
        tenants = self._tenants
        if tenants is not None:  # keys, limits, budgets (docs/limits-and-budgets.md)
            ticket = tenants.begin(seen, request, model, body, prompt_text, routing.max_tokens)
            if ticket.pending is not None:  # its counters are being asked (Redis, shared by this loop turn)
                tenants.end(seen, request, prompt_text, ticket, await ticket.pending)
        raw, strip_usage = request.body, False
        if stream and api == CHAT_API and self._tenants is not None and self._tenants.asks_stream_usage(seen, body):
            # a keyed stream is settled on its usage: asked for here, taken out of what the client gets
            raw, strip_usage = asking_usage(raw), True
        try:
            answer = await self._director.run(routing, raw)
        except SitsError as exc:
            seen.failed(exc, prompt_text)
            raise
        headers = answer.headers()
        if stream:
            resume = (routing, raw) if self._resume_streams and api == CHAT_API else None
            relay = ChatStreamRelay(answer, self._director, seen, prompt_text, resume, include_usage(body),
                                    strip_usage)
            return StreamingResponse(200, relay, headers=headers, push=relay.push)
        try:
            payload = await answer.read()
        except SitsError as exc:
            seen.failed(exc, prompt_text)
            raise
        seen.served(answer.model, answer.source, answer.route, answer.attempts, answer.first_byte_at,
                    answer.usage(payload), prompt=prompt_text, raw_usage=payload)
        if answer.cache_key is not None:
            self._director.remember(answer, completion_from_json(api, payload))
        return HttpResponse(200, payload, content_type=answer.content_type, headers=headers)

    def _note_unknown_fields(self, api: str, extra: list[str]) -> None:
        """Unknown fields are forwarded unchanged; say so once per field name (bounded)."""
        for name in extra:
            key = f"{api}:{name}"
            if key not in self._unknown_fields_seen and len(self._unknown_fields_seen) < _SEEN_UNKNOWN_LIMIT:
                self._unknown_fields_seen.add(key)
                log.info("forwarding field unknown to SITS unchanged: %s in %s", name, api)
