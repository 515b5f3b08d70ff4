"""Answer messages of the gRPC door: Route (the x-sits-* headers), stream messages, and answers the
gateway makes itself (a cache hit, the static template, a fusion workflow) in the HTTP door's shape."""

from __future__ import annotations

import grpc
import orjson

from sits.api.grpc import chat_pb2 as pb
from sits.api.grpc import lz4_messages
from sits.api.grpc.response_codec import chunk_from_event
from sits.errors import UpstreamError, UpstreamProtocolError
from sits.pipeline.cached_response import render_completion, render_sse
from sits.pipeline.canned_answer import CannedAnswer
from sits.pipeline.exchange import Exchange
from sits.pipeline.fusion import render as workflow_render
from sits.pipeline.fusion.result import WorkflowResult

ReadyAnswer = CannedAnswer | WorkflowResult


def exchange_route(exchange: Exchange, request_id: str) -> pb.Route:
    return pb.Route(request_id=request_id, model=exchange.model, endpoint=exchange.endpoint.id, route=exchange.route,
                    attempts=exchange.attempts, intent=exchange.intent)


def ready_route(answer: ReadyAnswer, request_id: str) -> pb.Route:
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


def ready_json(answer: ReadyAnswer, request_id: str) -> bytes:
    """The HTTP door's JSON body for an answer the gateway made itself."""
    if isinstance(answer, CannedAnswer):
        return render_completion(answer.hit, request_id)
    return workflow_render.render_json(answer, request_id)


def ready_events(answer: ReadyAnswer, request_id: str, include_usage: bool) -> list[bytes]:
    """The HTTP door's SSE events for an answer the gateway made itself."""
    if isinstance(answer, CannedAnswer):
        return render_sse(answer.hit, request_id, include_usage=include_usage)
    return workflow_render.render_sse(answer, request_id, include_usage)


def ready_source(answer: ReadyAnswer) -> tuple[str, str, tuple[int, int] | None]:
    """(endpoint label, attempts, usage) for the request's observation, as the HTTP door records them."""
    if isinstance(answer, WorkflowResult):
        return "workflow", "", (answer.prompt_tokens, answer.completion_tokens)
    return ("static-template" if answer.hit.match == "static" else "cache"), answer.attempts, None


def chunk_of_event(payload: bytes, source: str) -> pb.ChatCompletionChunk:
    """One SSE `data:` payload as a chunk; an in-band error event becomes the error it reports."""
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


async def write_chunks(context: grpc.aio.ServicerContext, compression: int, chunks: list[pb.ChatCompletionChunk],
                       route: pb.Route | None) -> None:
    """One stream message; compressed as the call asked when it is big enough to gain from it."""
    message = pb.ChatCompletionStreamResponse(chunks=chunks, route=route)
    if compression == pb.COMPRESSION_NONE:
        await context.write(message)
        return
    small = message.ByteSize() < lz4_messages.MIN_COMPRESSED_BYTES
    if compression == pb.COMPRESSION_LZ4 and not small:
        packed = lz4_messages.compress(pb.ChatCompletionStreamResponse(chunks=chunks).SerializeToString())
        message = pb.ChatCompletionStreamResponse(lz4_chunks=packed, route=route)
    elif compression == pb.COMPRESSION_GZIP and small:
        context.disable_next_message_compression()  # gzip would make a small message larger
    await context.write(message)


def completion_response(completion: pb.ChatCompletion, route: pb.Route, compression: int) -> pb.ChatCompletionResponse:
    if compression == pb.COMPRESSION_LZ4 and completion.ByteSize() >= lz4_messages.MIN_COMPRESSED_BYTES:
        return pb.ChatCompletionResponse(lz4_completion=lz4_messages.compress(completion.SerializeToString()),
                                         route=route)
    return pb.ChatCompletionResponse(completion=completion, route=route)
