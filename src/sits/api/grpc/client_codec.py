"""The client's half of LZ4 message compression: wrap a request, unwrap answers.

For Python clients of sits.v1.ChatCompletions (the CLI, examples/grpc_client.py, the bench);
clients in other languages do the same with their LZ4 frame library.
"""

from __future__ import annotations

import lz4.frame

from sits.api.grpc import chat_pb2 as pb


def lz4_request(request: pb.ChatCompletionRequest) -> pb.ChatCompletionRequest:
    """`request` carried as one LZ4 frame (worth it for large prompts)."""
    return pb.ChatCompletionRequest(lz4_request=lz4.frame.compress(request.SerializeToString()))


def completion_of(response: pb.ChatCompletionResponse) -> pb.ChatCompletion:
    if response.WhichOneof("body") == "lz4_completion":
        return pb.ChatCompletion.FromString(lz4.frame.decompress(response.lz4_completion))
    return response.completion


def chunks_of(response: pb.ChatCompletionStreamResponse) -> list[pb.ChatCompletionChunk]:
    """The chunks one stream message carries, in order."""
    if response.lz4_chunks:
        return list(pb.ChatCompletionStreamResponse.FromString(lz4.frame.decompress(response.lz4_chunks)).chunks)
    return list(response.chunks)
