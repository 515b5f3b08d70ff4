"""`sits chat --grpc [HOST:PORT]`: one question through a gateway's gRPC door, the answer streamed."""

from __future__ import annotations

import sys

import grpc

from sits.api.grpc import chat_pb2 as pb
from sits.api.grpc import chat_pb2_grpc
from sits.api.grpc.client_codec import chunks_of, lz4_request

COMPRESSIONS = {"none": pb.COMPRESSION_NONE, "gzip": pb.COMPRESSION_GZIP, "lz4": pb.COMPRESSION_LZ4}


def chat_grpc(question: str, address: str, model: str, max_tokens: int, compression: str = "none") -> int:
    import uvloop

    return uvloop.run(_ask(question, address, model, max_tokens, compression))


async def _ask(question: str, address: str, model: str, max_tokens: int, compression: str) -> int:
    request = pb.ChatCompletionRequest(model=model, messages=[pb.ChatMessage(role="user", content=question)],
                                       max_tokens=max_tokens, response_compression=COMPRESSIONS[compression])
    if compression == "lz4":
        request = lz4_request(request)
    async with grpc.aio.insecure_channel(address) as channel:
        try:
            call = chat_pb2_grpc.ChatCompletionsStub(channel).CreateStream(
                request, compression=grpc.Compression.Gzip if compression == "gzip" else None)
            route = None
            async for message in call:
                if message.HasField("route"):
                    route = message.route
                for chunk in chunks_of(message):
                    for choice in chunk.choices:
                        sys.stdout.write(choice.delta.content)
                sys.stdout.flush()
        except grpc.aio.AioRpcError as exc:
            print(f"\nsits chat: gRPC {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
    if route is not None:
        print(f"\n[answered by {route.model}; {route.route}]", file=sys.stderr)
    return 0
