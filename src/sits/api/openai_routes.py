"""The OpenAI data-plane endpoints: validate at the edge, hand to the director, relay the answer."""

from __future__ import annotations

import logging
from time import perf_counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

from sits.api.http_types import HttpRequest, HttpResponse, StreamingResponse
from sits.api.request_observer import UNKNOWN_MODEL, Observation, RequestObserver
from sits.api.request_intake import RequestIntake
from sits.api.tenant_gate import HttpTenantGate
from sits.api.schemas import CHAT_COMPLETION, COMPLETION, EMBEDDING, BodySchema, include_usage
from sits.errors import SitsError, UpstreamProtocolError
from sits.pipeline.admission_step import Admission
from sits.pipeline.answer import Answer
from sits.pipeline.cached_response import CompletionAccumulator, completion_from_json
from sits.pipeline.context import RoutingRequest
from sits.pipeline.director import Director
from sits.pipeline.model_resolution import AUTO_MODEL
from sits.pipeline.stream_resume import CHAT_API, partial_answer
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
        if self._tenants is not None:  # keys, limits, budgets (docs/limits-and-budgets.md)
            await self._tenants.admit(seen, request, model, body, prompt_text)
        routing = self._intake.routing(api, schema, body, stream, request, request_id, prompt_text, priority, scope,
                                       seen.trace)
        try:
            answer = await self._director.run(routing, request.body)
        except SitsError as exc:
            seen.failed(exc, prompt_text)
            raise
        headers = answer.headers()
        if stream:
            resume = (routing, request.body) if self._resume_streams and api == CHAT_API else None
            return StreamingResponse(200, self._relay_stream(answer, api, seen, prompt_text, resume,
                                                             include_usage(body)), headers=headers)
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


    async def _relay_stream(self, answer: Answer, api: str, seen: Observation,
                            prompt: str = "", resume: tuple[RoutingRequest, bytes] | None = None,
                            include_usage: bool = False) -> AsyncIterator[bytes]:
        """Relay the answer's SSE bytes as they come. A stream that breaks is resumed on another endpoint
        or fallback model when `resume` is given (the client's request and body) and one can go on
        from the partial answer; otherwise it gets an SSE error event and ends without `[DONE]`, so a
        client can never mistake a cut answer for a complete one."""
        tail = b""
        last = b""  # the last chunk before [DONE]: where include_usage puts the usage event
        accumulator = CompletionAccumulator(api) if answer.cache_key is not None else None
        # chunk gaps of upstream streams only (an answer the gateway made comes whole)
        gaps = seen.inter_token(answer.model, answer.source) if answer.first_byte_at is not None else None
        sent: list[bytes] | None = [] if resume is not None else None  # references only: parsed if it breaks
        previous = 0.0
        status = 499  # until the stream ends one way or the other: the client went away
        try:
            while True:
                try:
                    async for chunk in answer.chunks(include_usage):
                        tail = (tail + chunk)[-16:] if len(chunk) < 16 else chunk[-16:]
                        if accumulator is not None:
                            accumulator.feed(chunk)
                        if sent is not None:
                            sent.append(chunk)
                        if gaps is not None:
                            now = perf_counter()
                            if previous:
                                gaps.observe(now - previous)
                            previous = now
                        # find(), not `in`: on 3.11 `bytes in bytes` first tries the operand as an int
                        # and formats a TypeError it then drops, on every event (figures: bench/README.md,
                        # "measured")
                        if chunk.find(b'"usage":{') >= 0:
                            last = chunk
                        yield chunk
                    if tail.find(b"[DONE]") < 0:
                        raise UpstreamProtocolError(f"upstream {answer.source} ended the stream without [DONE]")
                    status = 200
                    break
                except SitsError as exc:
                    resumed = None
                    if resume is not None and sent is not None:
                        resumed = await self._director.resume(resume[0], resume[1], answer, partial_answer(sent))
                    if resumed is None:
                        status = exc.http_status
                        seen.served(answer.model, answer.source, answer.route, answer.attempts,
                                    answer.first_byte_at, None, status=status, prompt=prompt, error=exc.message)
                        yield _error_event(answer, exc)
                        return
                    log.warning("stream from %s broke (%s); resumed on %s", answer.source, exc.message,
                                resumed.source)
                    # An SSE comment: clients skip it, a person reading the wire sees the splice.
                    yield f": sits resumed the answer on {resumed.source} after {exc.code}\n\n".encode()
                    answer, accumulator = resumed, None  # a spliced answer is never cached
        finally:
            seen.served(answer.model, answer.source, answer.route, answer.attempts,
                        answer.first_byte_at, answer.usage(last), status=status, prompt=prompt,
                        error=None if status == 200 else "client closed the stream", raw_usage=last)
        if accumulator is not None:
            self._director.remember(answer, accumulator.result())


def _error_event(answer: Answer, exc: SitsError) -> bytes:
    log.warning("stream from %s failed: %s", answer.source, exc.message)
    event = {"error": {"message": exc.message, "type": exc.error_type, "param": None, "code": exc.code}}
    return b"data: " + orjson.dumps(event) + b"\n\n"

