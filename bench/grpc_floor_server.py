"""grpc-python's floor for the bench: sits.v1.ChatCompletions answered from memory, no SITS behind it.

The same answer the bench upstream gives (a completion; 8 chunks in one stream message), from a
grpc.aio server on uvloop like the gateway's. What a call costs here is what grpc-python itself
costs; the rest of the gRPC door's cost is SITS's. Prints "PORT <n>" once listening (127.0.0.1).
"""

from __future__ import annotations

import grpc
import uvloop

from sits.api.grpc import chat_pb2 as pb
from sits.api.grpc import chat_pb2_grpc

TOKENS = ["", "Hello", " from", " the", " bench", " upstream", ".", ""]
ANSWER = pb.ChatCompletionResponse(completion=pb.ChatCompletion(
    id="chatcmpl-bench", created=1700000000, model="bench-model",
    choices=[pb.Choice(message=pb.AssistantMessage(role="assistant", content="Hello from the bench upstream."),
                       finish_reason="stop")],
    usage=pb.Usage(prompt_tokens=9, completion_tokens=7, total_tokens=16)))
STREAM = pb.ChatCompletionStreamResponse(chunks=[
    pb.ChatCompletionChunk(id="chatcmpl-bench", created=1700000000, model="bench-model",
                           choices=[pb.ChunkChoice(delta=pb.Delta(content=t), finish_reason="stop" if i == 7 else "")])
    for i, t in enumerate(TOKENS)])


class FloorService(chat_pb2_grpc.ChatCompletionsServicer):
    async def Create(self, request: pb.ChatCompletionRequest, context: grpc.aio.ServicerContext) -> pb.ChatCompletionResponse:
        return ANSWER

    async def CreateStream(self, request: pb.ChatCompletionRequest, context: grpc.aio.ServicerContext) -> None:
        await context.write(STREAM)


async def serve() -> None:
    server = grpc.aio.server()
    chat_pb2_grpc.add_ChatCompletionsServicer_to_server(FloorService(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"PORT {port}", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    uvloop.run(serve())
