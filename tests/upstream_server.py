"""An OpenAI-compatible upstream for tests of the gateway's own behaviour (faults, timing).

Not a stand-in for a model: it returns canned completions and can misbehave on command.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

import orjson
from aiohttp import web


@dataclass
class UpstreamLog:
    requests: list[dict] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    cancelled: int = 0
    completed_streams: int = 0
    health_probes: int = 0


class FakeUpstream:
    """Modes (set `mode` at any time): ok, error500, flaky (error_rate of answers are 500s), slow_first_byte,
    cut_stream, hang, error_event (a stream that opens with an error event), stall_stream (headers, then
    nothing), context_error (400 context_length_exceeded), malformed_sse (a non-JSON data line
    before event `malformed_at`)."""

    def __init__(self, name: str = "upstream", stream_chunks: int = 5, chunk_delay: float = 0.0) -> None:
        self.name = name
        self.mode = "ok"
        self.embedding_triples = 1  # each embedding is [0.1, 0.2, 0.3] repeated this many times
        self.error_rate = 0.3
        self.malformed_at = 2  # malformed_sse: garbage goes out before this event
        self._rng = random.Random(1234)
        self.stream_chunks = stream_chunks
        self.chunk_delay = chunk_delay
        self.chunk_padding = 0  # extra characters in each streamed token (a long stream in few events)
        self.usage_split = False  # the usage event written in two parts, apart, and [DONE] after them
        self.log = UpstreamLog()
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._released = asyncio.Event()

    async def start(self, port: int = 0) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port, reuse_address=True)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        self._released.set()  # let hanging handlers finish so shutdown is prompt
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._released = asyncio.Event()

    def release(self) -> None:
        """Let every request held by mode "hang" or "slow_first_byte" go on."""
        self._released.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _health(self, request: web.Request) -> web.Response:
        self.log.health_probes += 1
        return web.json_response({"status": "ok"}, status=503 if self.mode == "unhealthy" else 200)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "served-a", "object": "model"},
                                                             {"id": "served-b", "object": "model"}]})

    async def _record(self, request: web.Request) -> dict:
        body = orjson.loads(await request.read())
        self.log.requests.append(body)
        self.log.headers.append({k.lower(): v for k, v in request.headers.items()})
        return body

    async def _misbehave(self) -> web.Response | None:
        if self.mode == "context_error":
            return web.json_response({"error": {"message": "This model's maximum context length is 4096 tokens",
                                                "type": "invalid_request_error", "code": "context_length_exceeded"}},
                                     status=400)
        if self.mode == "error500" or (self.mode == "flaky" and self._rng.random() < self.error_rate):
            return web.json_response({"error": {"message": "boom", "type": "server_error"}}, status=500)
        if self.mode in ("slow_first_byte", "hang"):
            try:
                await asyncio.wait_for(self._released.wait(), 5 if self.mode == "slow_first_byte" else 3600)
            except TimeoutError:
                pass
        return None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        if (bad := await self._misbehave()) is not None:
            return bad
        content = f"hello from {self.name}"
        if body.get("stream"):
            return await self._stream(request, body)
        return web.json_response({
            "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
        })

    async def _stream(self, request: web.Request, body: dict) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        if self.mode == "error_event":
            await response.write(b'data: {"error": {"message": "engine overloaded", "type": "server_error"}}\n\n')
            return response
        if self.mode == "stall_stream":
            await asyncio.wait_for(self._released.wait(), 3600)
            return response
        try:
            for i in range(self.stream_chunks):
                if self.mode == "malformed_sse" and i == self.malformed_at:
                    await response.write(b"data: <html>502 Bad Gateway</html>\n\n")
                if self.mode == "cut_stream" and i == self.stream_chunks // 2:
                    request.transport.close()  # type: ignore[union-attr]
                    return response
                chunk = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "delta": {"content": f"tok{i} " + "x" * self.chunk_padding},
                                      "finish_reason": None}]}
                await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
                if self.chunk_delay:
                    await asyncio.sleep(self.chunk_delay)
            finish = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                      "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            await response.write(b"data: " + orjson.dumps(finish) + b"\n\n")
            if (body.get("stream_options") or {}).get("include_usage"):
                usage = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                         "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": self.stream_chunks,
                                                  "total_tokens": 5 + self.stream_chunks}}
                event = b"data: " + orjson.dumps(usage) + b"\n\n"
                if self.usage_split:  # cut in two reads inside the usage object, [DONE] in a third
                    cut = event.index(b'"usage":{') + 15
                    await response.write(event[:cut])
                    await asyncio.sleep(0.02)
                    await response.write(event[cut:])
                    await asyncio.sleep(0.02)
                else:
                    await response.write(event)
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            self.log.completed_streams += 1
        except (asyncio.CancelledError, ConnectionResetError):
            self.log.cancelled += 1
            raise
        return response

    async def _completions(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        if (bad := await self._misbehave()) is not None:
            return bad
        return web.json_response({
            "id": "cmpl-test", "object": "text_completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "text": f"completion from {self.name}", "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
        })

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        return web.json_response({
            "object": "list", "model": body["model"],
            "data": [{"object": "embedding", "index": i, "embedding": [0.1, 0.2, 0.3] * self.embedding_triples}
                     for i in range(len(inputs))],
            "usage": {"prompt_tokens": 2, "total_tokens": 2},
        })
