"""The ChatCompletions gRPC service: the HTTP door's chat route, spoken over gRPC.

Both doors build the same RoutingRequest from the same validated body and call the same
`Director.run`, so routing, admission, fallback, the cache steps, metrics and tracing are shared.
The call's deadline bounds everything below it, and a call that ends early (deadline, client
cancel) closes the upstream exchange at once, which cancels the model server's work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import orjson
from google.protobuf.message import DecodeError

from sits.api.auth import DataPlaneKeys, bearer_token
from sits.api.grpc import chat_pb2 as pb
from sits.api.grpc import chat_pb2_grpc
from sits.api.grpc import lz4_messages
from sits.api.grpc.request_codec import request_body
from sits.api.grpc.response_codec import SseEvents, chunk_from_event, completion_from_body
from sits.api.grpc.status_codes import grpc_status
from sits.api.http_types import HttpRequest
from sits.api.schemas import ChatCompletionBody, parse_body
from sits.errors import InvalidRequest, SitsError, UpstreamError, UpstreamProtocolError, UpstreamTimeout
from sits.pipeline.admission_step import Admission
from sits.pipeline.cache_keys import cache_scope
from sits.pipeline.cached_response import CompletionAccumulator, completion_from_json, render_completion, render_sse
from sits.pipeline.canned_answer import CannedAnswer
from sits.pipeline.context import RoutingRequest
from sits.pipeline.director import Director
from sits.pipeline.exchange import Exchange
from sits.pipeline.fusion import render as workflow_render
from sits.pipeline.fusion.result import WorkflowResult

log = logging.getLogger("sits.api")

API = "/chat/completions"
HTTP_PATH = "/v1/chat/completions"
_READ_METADATA = frozenset({"authorization", "x-request-id", "x-sits-priority"})
_NO_DEADLINE_S = 1e8  # what grpc reports as time remaining when the client set no deadline


@dataclass(frozen=True, slots=True)
class _Call:
    routing: RoutingRequest
    body: bytes  # the JSON body the HTTP door would have received
    compression: int
    include_usage: bool


class ChatCompletionsService(chat_pb2_grpc.ChatCompletionsServicer):
    def __init__(self, director: Director, admission: Admission | None, keys: DataPlaneKeys,
                 request_id_of: Callable[[HttpRequest], str], max_message_bytes: int) -> None:
        """`request_id_of` is the HTTP door's, so request ids are unique across both doors."""
        self._director = director
        self._admission = admission
        self._keys = keys
        self._request_id_of = request_id_of
        self._max_message_bytes = max_message_bytes

    async def Create(self, request: pb.ChatCompletionRequest,
                     context: grpc.aio.ServicerContext) -> pb.ChatCompletionResponse:
        headers = _headers(context)
        request_id = self._request_id_of(headers)
        try:
            async with _CallDeadline(context):
                return await self._create(request, context, headers, request_id)
        except SitsError as exc:
            error = exc
            if context.done():
                raise
        except Exception:
            log.exception("unexpected error on gRPC Create (request %s)", request_id)
            error = SitsError("internal error; see the gateway log for request " + request_id)
        await _abort(context, error, request_id)
        raise AssertionError("unreachable: abort raises")

    async def CreateStream(self, request: pb.ChatCompletionRequest, context: grpc.aio.ServicerContext) -> None:
        headers = _headers(context)
        request_id = self._request_id_of(headers)
        try:
            async with _CallDeadline(context):
                await self._create_stream(request, context, headers, request_id)
            return
        except SitsError as exc:
            error = exc
            if context.done():
                return  # the client is gone: nobody to tell
        except Exception:
            log.exception("unexpected error on gRPC CreateStream (request %s)", request_id)
            error = SitsError("internal error; see the gateway log for request " + request_id)
        await _abort(context, error, request_id)

    # -- the two calls -----------------------------------------------------------------------------

    async def _create(self, request: pb.ChatCompletionRequest, context: grpc.aio.ServicerContext,
                      headers: HttpRequest, request_id: str) -> pb.ChatCompletionResponse:
        call = self._prepare(request, headers, request_id, stream=False)
        answer = await self._director.run(call.routing, call.body)
        if isinstance(answer, (CannedAnswer, WorkflowResult)):
            completion = completion_from_body(_ready_json(answer, request_id), "gateway")
            route = _ready_route(answer, request_id)
        else:
            try:
                payload = await answer.read()
            finally:
                answer.close()  # no-op once read; a cancelled read frees the upstream connection now
            completion = completion_from_body(payload, answer.endpoint.id)
            if answer.cache_key is not None:
                self._director.remember(answer, completion_from_json(API, payload))
            route = _exchange_route(answer, request_id)
        self._compress_with_gzip(context, call)
        if call.compression == pb.COMPRESSION_LZ4 and completion.ByteSize() >= lz4_messages.MIN_COMPRESSED_BYTES:
            return pb.ChatCompletionResponse(lz4_completion=lz4_messages.compress(completion.SerializeToString()),
                                             route=route)
        return pb.ChatCompletionResponse(completion=completion, route=route)

    async def _create_stream(self, request: pb.ChatCompletionRequest, context: grpc.aio.ServicerContext,
                             headers: HttpRequest, request_id: str) -> None:
        call = self._prepare(request, headers, request_id, stream=True)
        answer = await self._director.run(call.routing, call.body)
        self._compress_with_gzip(context, call)
        if isinstance(answer, (CannedAnswer, WorkflowResult)):  # complete already: one message
            events = SseEvents("gateway")
            payloads = [p for e in _ready_events(answer, request_id, call.include_usage)
                        for p in events.feed(e) if p != b"[DONE]"]
            await _write(context, call, [_chunk(p, "gateway") for p in payloads], _ready_route(answer, request_id))
            return
        try:
            await self._relay(answer, context, call, _exchange_route(answer, request_id))
        except SitsError as exc:
            log.warning("stream from %s failed: %s", answer.endpoint.id, exc.message)
            raise
        finally:
            answer.close()  # no-op after a complete stream; on cancel or deadline it cancels the upstream request

    async def _relay(self, exchange: Exchange, context: grpc.aio.ServicerContext, call: _Call, route: pb.Route) -> None:
        """Upstream SSE events as stream messages, as they come. A stream without `[DONE]` is an
        error status, so a client can never mistake a cut answer for a complete one."""
        source = exchange.endpoint.id
        events = SseEvents(source)
        accumulator = CompletionAccumulator(API) if exchange.cache_key is not None else None
        done = False
        first: pb.Route | None = route
        async for data in exchange.chunks():
            if accumulator is not None:
                accumulator.feed(data)
            chunks = []
            for payload in events.feed(data):
                if payload == b"[DONE]":
                    done = True
                elif payload:
                    chunks.append(_chunk(payload, source))
            if chunks:
                await _write(context, call, chunks, first)
                first = None
        if not done:
            raise UpstreamProtocolError(f"upstream {source} ended the stream without [DONE]")
        if first is not None:  # a stream of no events still says who answered
            await _write(context, call, [], first)
        if accumulator is not None:
            self._director.remember(exchange, accumulator.result())

    # -- pieces --------------------------------------------------------------------------------------

    def _prepare(self, request: pb.ChatCompletionRequest, headers: HttpRequest, request_id: str,
                 stream: bool) -> _Call:
        """Authenticate, unwrap LZ4, validate exactly as the HTTP door does."""
        if self._keys.enabled:
            self._keys.check(headers)
        if request.lz4_request:
            request = self._unwrap_lz4(request)
        json_body = request_body(request, stream)
        body = parse_body(ChatCompletionBody, json_body)
        token = bearer_token(headers) if self._director.caching or self._admission else None
        scope = cache_scope(None, token) if self._director.caching else "anonymous"
        priority = self._admission.priority_of(headers.headers.get("x-sits-priority"), token, body.model) \
            if self._admission is not None else 1
        routing = RoutingRequest(api=API, model=body.model, stream=stream, request_id=request_id,
                                 prompt_text=body.prompt_text(), cache_scope=scope, priority=priority)
        return _Call(routing, json_body, request.response_compression, request.include_usage)

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

    @staticmethod
    def _compress_with_gzip(context: grpc.aio.ServicerContext, call: _Call) -> None:
        if call.compression == pb.COMPRESSION_GZIP:
            context.set_compression(grpc.Compression.Gzip)


def _chunk(payload: bytes, source: str) -> pb.ChatCompletionChunk:
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise UpstreamProtocolError(f"upstream {source} sent an SSE event that is not JSON: "
                                    f"{payload[:80].decode('utf-8', 'replace')!r}") from None
    if not isinstance(event, dict):
        raise UpstreamProtocolError(f"upstream {source} sent an SSE event that is not a JSON object")
    if "error" in event:
        error = event["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise UpstreamError(f"upstream {source} streamed an error: {message}")
    return chunk_from_event(event)


async def _write(context: grpc.aio.ServicerContext, call: _Call, chunks: list[pb.ChatCompletionChunk],
                 route: pb.Route | None) -> None:
    """One stream message; compressed as the call asked when it is big enough to gain from it."""
    message = pb.ChatCompletionStreamResponse(chunks=chunks, route=route)
    if call.compression == pb.COMPRESSION_NONE:
        await context.write(message)
        return
    small = message.ByteSize() < lz4_messages.MIN_COMPRESSED_BYTES
    if call.compression == pb.COMPRESSION_LZ4 and not small:
        packed = lz4_messages.compress(pb.ChatCompletionStreamResponse(chunks=chunks).SerializeToString())
        message = pb.ChatCompletionStreamResponse(lz4_chunks=packed, route=route)
    elif call.compression == pb.COMPRESSION_GZIP and small:
        context.disable_next_message_compression()  # gzip would make a small message larger
    await context.write(message)


def _headers(context: grpc.aio.ServicerContext) -> HttpRequest:
    """The call's metadata as the HTTP door's request value, so auth, ids and priority parse the same way."""
    metadata = {m.key: m.value for m in context.invocation_metadata() or () if m.key in _READ_METADATA}
    return HttpRequest("POST", HTTP_PATH, "", {k: v for k, v in metadata.items() if isinstance(v, str)}, b"")


class _CallDeadline:
    """The call's deadline as an asyncio timeout over the whole call: when it passes, the pending
    upstream work is cancelled and the call ends DEADLINE_EXCEEDED with the HTTP door's 504 message."""

    __slots__ = ("_timeout", "_seconds")

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        remaining = context.time_remaining()
        self._seconds = remaining if remaining is not None and remaining < _NO_DEADLINE_S else None
        self._timeout = asyncio.timeout(self._seconds)

    async def __aenter__(self) -> None:
        await self._timeout.__aenter__()

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        try:
            await self._timeout.__aexit__(kind, exc, tb)
        except TimeoutError:
            raise UpstreamTimeout(f"the call's deadline of {self._seconds:.3g}s passed before the answer was "
                                  f"complete; the upstream request was cancelled") from None


def _exchange_route(exchange: Exchange, request_id: str) -> pb.Route:
    return pb.Route(request_id=request_id, model=exchange.model, endpoint=exchange.endpoint.id, route=exchange.route,
                    attempts=exchange.attempts, intent=exchange.intent)


def _ready_json(answer: CannedAnswer | WorkflowResult, request_id: str) -> bytes:
    """An answer the gateway made itself (cache, static template, fusion workflow) as the HTTP door's JSON."""
    if isinstance(answer, CannedAnswer):
        return render_completion(answer.hit, request_id)
    return workflow_render.render_json(answer, request_id)


def _ready_events(answer: CannedAnswer | WorkflowResult, request_id: str, include_usage: bool) -> list[bytes]:
    if isinstance(answer, CannedAnswer):
        return render_sse(answer.hit, request_id, include_usage=include_usage)
    return workflow_render.render_sse(answer, request_id, include_usage)


def _ready_route(answer: CannedAnswer | WorkflowResult, request_id: str) -> pb.Route:
    if isinstance(answer, WorkflowResult):
        return pb.Route(request_id=request_id, model=answer.model, route=answer.route(), intent=answer.intent,
                        workflow=answer.workflow, confidence=round(answer.confidence, 4),
                        verifier=answer.verifier_summary)
    route = pb.Route(request_id=request_id, model=answer.model, route=answer.route, attempts=answer.attempts,
                     intent=answer.intent)
    name, value = answer.header
    if name == b"x-sits-cache":
        route.cache = value.decode("latin-1")
    else:
        route.fallback = value.decode("latin-1")
    return route


async def _abort(context: grpc.aio.ServicerContext, error: SitsError, request_id: str) -> None:
    status = grpc_status(error)
    await context.abort(status.code, status.message, (*status.trailing_metadata, ("x-request-id", request_id)))
