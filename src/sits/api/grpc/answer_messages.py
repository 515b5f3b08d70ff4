"""Answer messages of the gRPC door: Route (the x-sits-* headers) and stream messages."""

from __future__ import annotations

import grpc
import orjson

from sits.api.grpc import chat_pb2 as pb
from sits.api.grpc import lz4_messages
from sits.api.grpc.response_codec import chunk_from_event
from sits.errors import UpstreamError, UpstreamProtocolError
from sits.pipeline.answer import Answer

# x-sits-* headers beyond the ones every answer has, as Route fields
_ROUTE_FIELDS = {b"x-sits-endpoint": "endpoint", b"x-sits-cache": "cache", b"x-sits-fallback": "fallback",
                 b"x-sits-workflow": "workflow", b"x-sits-verifier": "verifier"}


def route_message(answer: Answer, request_id: str) -> pb.Route:
    """The answer's x-sits-* headers as the Route message (who answered, how, and why)."""
    route = pb.Route(request_id=request_id, model=answer.model, route=answer.route, attempts=answer.attempts,
                     intent=answer.intent)
    for name, value in answer.headers():
        field = _ROUTE_FIELDS.get(name)
        if field is not None:
            setattr(route, field, value.decode("latin-1"))
        elif name == b"x-sits-confidence":
            route.confidence = float(value)
    return route


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
