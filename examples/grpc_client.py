"""A client of SITS's gRPC door (docs/grpc.md): one unary call, then the same question streamed.

    sits serve --backend m1=http://127.0.0.1:8000/v1 --grpc-port 50051
    python examples/grpc_client.py --address 127.0.0.1:50051 --model m1 "Why is the sky blue?"
    python examples/grpc_client.py --compression lz4 --prompt-file long_document.txt "Summarize it."

Shows the call metadata (API key, priority), a deadline, typed fields next to `extra_json`, LZ4 for
large prompts, the Route of the answer, and the error status of a failed call.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import grpc

from sits.api.grpc import chat_pb2 as pb
from sits.api.grpc import chat_pb2_grpc
from sits.api.grpc.client_codec import chunks_of, completion_of, lz4_request


async def main(args: argparse.Namespace) -> int:
    question = args.question
    if args.prompt_file:
        question = Path(args.prompt_file).read_text() + "\n\n" + question
    request = pb.ChatCompletionRequest(
        model=args.model, messages=[pb.ChatMessage(role="user", content=question)], max_tokens=args.max_tokens,
        temperature=0.2, extra_json='{"seed": 7}' if args.seed else "",
        response_compression=pb.COMPRESSION_LZ4 if args.compression == "lz4" else pb.COMPRESSION_NONE)
    sent = lz4_request(request) if args.compression == "lz4" else request
    metadata = [("x-sits-priority", args.priority)] + ([("authorization", f"Bearer {args.api_key}")]
                                                       if args.api_key else [])
    async with grpc.aio.insecure_channel(args.address) as channel:
        stub = chat_pb2_grpc.ChatCompletionsStub(channel)
        try:
            answer = await stub.Create(sent, timeout=args.timeout, metadata=metadata)
            completion = completion_of(answer)
            print(f"unary  [{answer.route.model} via {answer.route.endpoint or answer.route.route}; "
                  f"request {answer.route.request_id}; {completion.usage.total_tokens} tokens]")
            print(completion.choices[0].message.content)
            print("stream ", end="")
            async for message in stub.CreateStream(sent, timeout=args.timeout, metadata=metadata):
                for chunk in chunks_of(message):
                    for choice in chunk.choices:
                        print(choice.delta.content, end="", flush=True)
            print()
        except grpc.aio.AioRpcError as exc:
            details = dict(exc.trailing_metadata() or ())
            print(f"{exc.code().name}: {exc.details()} (code {details.get('sits-error-code', '?')}, "
                  f"request {details.get('x-request-id', '?')})", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("question")
    parser.add_argument("--address", default="127.0.0.1:50051")
    parser.add_argument("--model", default="auto")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--timeout", type=float, default=60.0, help="the call's deadline, seconds")
    parser.add_argument("--priority", default="interactive", help="realtime, interactive or batch")
    parser.add_argument("--api-key", help="when the gateway has data-plane keys")
    parser.add_argument("--compression", choices=("none", "lz4"), default="none")
    parser.add_argument("--prompt-file", help="a document to put in front of the question")
    parser.add_argument("--seed", action="store_true", help="send a field without a typed one, via extra_json")
    sys.exit(asyncio.run(main(parser.parse_args())))
