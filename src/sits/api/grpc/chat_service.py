"""The ChatCompletions gRPC service: the HTTP door's chat route, spoken over gRPC.

Both doors build the same RoutingRequest from the same validated body, call the same `Director.run`
and record the request with the same observer, so routing, admission, fallback, the cache steps,
metrics, spans and the access log are shared. The call's deadline bounds everything below it, and a
call that ends early (deadline, client cancel) closes the upstream exchange at once, which cancels
the model server's work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from time import perf_counter
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from sits.api.auth import DataPlaneKeys
from sits.api.grpc import chat_pb2 as pb
from sits.api.grpc import chat_pb2_grpc, lz4_messages
from sits.api.grpc.answer_messages import chunk_of_event, completion_response, route_message, write_chunks
from sits.api.grpc.request_codec import request_body
from sits.api.grpc.response_codec import SseEvents, completion_from_body
from sits.api.grpc.status_codes import grpc_status, metadata_value
from sits.api.http_types import HttpRequest
from sits.api.request_observer import UNKNOWN_MODEL, Observation, RequestObserver
from sits.api.request_intake import RequestIntake
from sits.api.body_fields import asking_usage
from sits.api.schemas import CHAT_COMPLETION
from sits.api.tenant_gate import WARNING_HEADER, HttpTenantGate
from sits.telemetry.tracing import NO_TRACE
from sits.errors import InvalidRequest, SitsError, UpstreamProtocolError, UpstreamTimeout
from sits.pipeline.admission_step import Admission
from sits.pipeline.answer import Answer
from sits.pipeline.cached_response import CompletionAccumulator, completion_from_json
from sits.pipeline.context import RoutingRequest
from sits.pipeline.director import Director
from sits.pipeline.stream_resume import generated_text

log = logging.getLogger("sits.api")

API = "/chat/completions"
SERVICE = "/sits.v1.ChatCompletions/"
_READ_METADATA = frozenset({"authorization", "x-request-id", "x-sits-priority", "traceparent", "tracestate", "baggage"})
CLIENT_GONE = 499  # the status the HTTP door records for a client that left (nginx's convention)


@dataclass(frozen=True, slots=True)
class _Call:
    routing: RoutingRequest
    body: bytes  # the JSON body the HTTP door would have received
    compression: int
    include_usage: bool
    seen: Observation | None
    headers: HttpRequest  # the call's metadata, as the HTTP door's request
    fields: dict[str, Any]  # the validated body
    strip_usage: bool = False  # the gateway asked the upstream for the usage event, the client did not


class ChatCompletionsService(chat_pb2_grpc.ChatCompletionsServicer):
    def __init__(self, director: Director, admission: Admission | None, keys: DataPlaneKeys,
                 request_id_of: Callable[[HttpRequest], str], max_message_bytes: int,
                 observer: RequestObserver | None = None, tenants: HttpTenantGate | None = None) -> None:
        """`request_id_of` and `observer` are the HTTP door's: ids are unique across both doors, and
        both doors' requests land in the same metrics, spans, decision log and access log. `tenants`:
        the HTTP door's key gate (tenants on; needs `observer`, which carries the ticket to settlement)."""
        if tenants is not None and observer is None:
            raise ValueError("the key gate settles through the request observer: pass both")
        self._director = director
        self._tenants = tenants
        # The HTTP door's, so the doors cannot drift apart.
        self._intake = RequestIntake(director, admission, tenants.key_class if tenants is not None else None)
        self._keys = keys
        self._request_id_of = request_id_of
        self._max_message_bytes = max_message_bytes
        self._observer = observer

    async def Create(self, request: pb.ChatCompletionRequest,
                     context: grpc.aio.ServicerContext) -> pb.ChatCompletionResponse:
        headers = _headers(context, "Create")
        request_id = self._request_id_of(headers)
        deadline = _CallDeadline(context)
        call: _Call | None = None
        try:
            async with deadline:
                call = self._prepare(request, headers, request_id, stream=False)
                if self._tenants is not None:
                    await self._admit(call, context)
                return await self._create(call)
        except SitsError as exc:
            error = exc
        except asyncio.CancelledError:
            self._failed(call, SitsError("the client cancelled the call", http_status=CLIENT_GONE))
            raise
        except Exception:
            log.exception("unexpected error on gRPC Create (request %s)", request_id)
            error = SitsError("internal error; see the gateway log for request " + request_id)
        self._failed(call, error)
        await _abort(context, error, request_id)
        raise AssertionError("unreachable: abort raises")

    async def CreateStream(self, request: pb.ChatCompletionRequest, context: grpc.aio.ServicerContext) -> None:
        headers = _headers(context, "CreateStream")
        request_id = self._request_id_of(headers)
        deadline = _CallDeadline(context)
        call: _Call | None = None
        try:
            async with deadline:
                call = self._prepare(request, headers, request_id, stream=True)
                if self._tenants is not None:
                    await self._admit(call, context)
                    call = self._asking_usage(call)
                await self._create_stream(call, context, deadline)
            return
        except SitsError as exc:
            error = exc
        except asyncio.CancelledError:
            self._failed(call, SitsError("the client cancelled the call", http_status=CLIENT_GONE))
            raise
        except Exception:
            log.exception("unexpected error on gRPC CreateStream (request %s)", request_id)
            error = SitsError("internal error; see the gateway log for request " + request_id)
        self._failed(call, error)
        if not context.done():  # else the client is gone: nobody to tell
            await _abort(context, error, request_id)

    # -- the two calls -----------------------------------------------------------------------------

    async def _create(self, call: _Call) -> pb.ChatCompletionResponse:
        answer = await self._director.run(call.routing, call.body)
        try:
            payload = await answer.read()
        finally:
            answer.close()  # no-op once read; a cancelled read frees the upstream connection now
        completion = completion_from_body(payload, answer.source)
        if call.seen is not None:
            call.seen.served(answer.model, answer.source, answer.route, answer.attempts, answer.first_byte_at,
                             answer.usage(payload), prompt=call.routing.prompt_text, raw_usage=payload)
        if answer.cache_key is not None:
            self._director.remember(answer, completion_from_json(API, payload))
        return completion_response(completion, route_message(answer, call.routing.request_id), call.compression)

    async def _create_stream(self, call: _Call, context: grpc.aio.ServicerContext, deadline: _CallDeadline) -> None:
        answer = await self._director.run(call.routing, call.body)
        if call.compression == pb.COMPRESSION_GZIP:
            context.set_compression(grpc.Compression.Gzip)
        try:
            await self._relay(answer, context, call, deadline)
        finally:
            answer.close()  # no-op after a complete stream; on cancel or deadline it cancels the upstream request

    async def _relay(self, answer: Answer, context: grpc.aio.ServicerContext, call: _Call,
                     deadline: _CallDeadline) -> None:
        """The answer's SSE events as stream messages, as they come (an answer the gateway made comes
        whole: one message). A stream without `[DONE]` is an error status, so a client can never
        mistake a cut answer for a complete one."""
        source, seen = answer.source, call.seen
        events = SseEvents(source)
        accumulator = CompletionAccumulator(API) if answer.cache_key is not None else None
        gaps = seen.inter_token(answer.model, source) if seen is not None and answer.first_byte_at is not None \
            else None
        route: pb.Route | None = route_message(answer, call.routing.request_id)
        done, usage_event, previous = False, b"", 0.0
        status, error = CLIENT_GONE, "the client cancelled the stream"
        # A keyed stream's chunks, by reference: counted for the key's spend if no usage event comes.
        kept: list[bytes] | None = [] if seen is not None and seen.tenant is not None else None
        try:
            async for data in answer.chunks(call.include_usage):
                if accumulator is not None:
                    accumulator.feed(data)
                if kept is not None:
                    kept.append(data)
                if gaps is not None:
                    now = perf_counter()
                    if previous:
                        gaps.observe(now - previous)
                    previous = now
                chunks = []
                for payload in events.feed(data):
                    if payload == b"[DONE]":
                        done = True
                    elif payload:
                        chunk = chunk_of_event(payload, source)
                        if chunk.HasField("usage"):
                            usage_event = payload
                            if call.strip_usage and not chunk.choices:
                                continue  # asked for the key's spend, not by the client
                        chunks.append(chunk)
                if chunks:
                    await write_chunks(context, call.compression, chunks, route)
                    route = None  # the first message only
            if not done:
                raise UpstreamProtocolError(f"upstream {source} ended the stream without [DONE]")
            if route is not None:  # a stream of no events still says who answered
                await write_chunks(context, call.compression, [], route)
            status, error = 200, None
        except SitsError as exc:
            log.warning("stream from %s failed: %s", source, exc.message)
            status, error = exc.http_status, exc.message
            raise
        finally:
            if status == CLIENT_GONE and deadline.expired():
                status, error = UpstreamTimeout.http_status, "the call's deadline passed mid-stream"
            if seen is not None:
                if kept and not usage_event and seen.tenant is not None:
                    seen.tenant.generated = generated_text(kept)
                seen.served(answer.model, source, answer.route, answer.attempts, answer.first_byte_at,
                            answer.usage(usage_event), status=status, prompt=call.routing.prompt_text, error=error,
                            raw_usage=usage_event)
        if accumulator is not None:
            self._director.remember(answer, accumulator.result())

    # -- pieces --------------------------------------------------------------------------------------

    def _prepare(self, request: pb.ChatCompletionRequest, headers: HttpRequest, request_id: str,
                 stream: bool) -> _Call:
        """Authenticate, unwrap LZ4, validate exactly as the HTTP door does, begin the observation."""
        if self._tenants is not None:  # a tenant key from `authorization: Bearer ...` metadata
            self._tenants.authenticate_call(headers)
        elif self._keys.enabled:
            self._keys.check(headers)
        if request.lz4_request:
            request = self._unwrap_lz4(request)
        json_body = request_body(request, stream)
        body = CHAT_COMPLETION.parse(json_body)
        model: str = body["model"]
        priority, scope = self._intake.class_and_scope(headers, model)
        prompt = CHAT_COMPLETION.prompt_text(body)
        seen = self._observer.begin(headers, API, request_id, model, body) if self._observer else None
        routing = self._intake.routing(API, CHAT_COMPLETION, body, stream, headers, request_id, prompt, priority, scope,
                                       seen.trace if seen is not None else NO_TRACE)
        return _Call(routing, json_body, request.response_compression, request.include_usage, seen, headers, body)

    def _asking_usage(self, call: _Call) -> _Call:
        """A keyed stream whose client asked for no usage asks its upstream for it, as on HTTP: it is
        settled on that usage, and the usage-only message is not sent on (`_relay`)."""
        tenants = self._tenants
        if call.include_usage or call.seen is None or tenants is None \
                or not tenants.asks_stream_usage(call.seen, call.fields):
            return call
        return replace(call, body=asking_usage(call.body), strip_usage=True)

    async def _admit(self, call: _Call, context: grpc.aio.ServicerContext) -> None:
        """The key gate, as on HTTP: the model, the limits and the budget (a refusal is the HTTP door's
        403 or 429, as PERMISSION_DENIED or RESOURCE_EXHAUSTED with its message and headers as metadata)."""
        assert self._tenants is not None and call.seen is not None
        routing = call.routing
        await self._tenants.admit(call.seen, call.headers, routing.model, call.fields, routing.prompt_text,
                                  routing.max_tokens)
        warning = self._tenants.warning(call.headers)
        if warning is not None:  # a soft budget passed: said in the initial metadata
            await context.send_initial_metadata(((WARNING_HEADER.decode(), metadata_value(warning)),))

    def _unwrap_lz4(self, request: pb.ChatCompletionRequest) -> pb.ChatCompletionRequest:
        if len(request.ListFields()) != 1:
            raise InvalidRequest("'lz4_request' must be the only field set; put every other field inside it",
                                 param="lz4_request")
        data = lz4_messages.decompress(request.lz4_request, self._max_message_bytes, "lz4_request")
        try:
            inner = pb.ChatCompletionRequest.FromString(data)
        except DecodeError:
            raise InvalidRequest("'lz4_request' does not hold a serialized ChatCompletionRequest",
                                 param="lz4_request") from None
        if inner.lz4_request:
            raise InvalidRequest("'lz4_request' may not itself hold an lz4_request", param="lz4_request")
        return inner

    def _failed(self, call: _Call | None, error: SitsError) -> None:
        """Record a failed call as the HTTP door does: with its observation, or (bad input) by status only."""
        if call is not None and call.seen is not None:
            call.seen.failed(error, call.routing.prompt_text)
        elif call is None and self._observer is not None:
            self._observer.metrics.failed(UNKNOWN_MODEL, error.http_status)


def _headers(context: grpc.aio.ServicerContext, method: str) -> HttpRequest:
    """The call's metadata as the HTTP door's request value, so auth, ids, priority and trace context
    parse the same way; the path is the gRPC method's (what a span is named after)."""
    metadata = {m.key: m.value for m in context.invocation_metadata() or () if m.key in _READ_METADATA}
    return HttpRequest("POST", SERVICE + method, "", {k: v for k, v in metadata.items() if isinstance(v, str)}, b"")


class _CallDeadline:
    """The call's deadline as an asyncio timeout over the whole call: when it passes, the pending
    upstream work is cancelled and the call ends DEADLINE_EXCEEDED with the HTTP door's 504 message."""

    __slots__ = ("_timeout", "_seconds")

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._seconds = context.time_remaining()  # None: the client set no deadline
        self._timeout = asyncio.timeout(self._seconds)

    def expired(self) -> bool:
        return self._timeout.expired()

    async def __aenter__(self) -> None:
        await self._timeout.__aenter__()

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        try:
            await self._timeout.__aexit__(kind, exc, tb)
        except TimeoutError:
            raise UpstreamTimeout(f"the call's deadline of {self._seconds:.3g}s passed before the answer was "
                                  f"complete; the upstream request was cancelled") from None


async def _abort(context: grpc.aio.ServicerContext, error: SitsError, request_id: str) -> None:
    status = grpc_status(error)
    await context.abort(status.code, status.message, (*status.trailing_metadata, ("x-request-id", request_id)))
