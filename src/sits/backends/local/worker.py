"""One embedded model served as an OpenAI-compatible HTTP API on loopback.

Run as `python -m sits.backends.local.worker --model-path P --model-name N --port PORT`.
Each model lives in its own process so a crash, a leak or the GIL of one model
never touches the gateway or another model; the gateway sees an ordinary
OpenAI-compatible upstream. This process is its own HTTP edge, so it turns
SitsErrors into OpenAI error JSON itself.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import get_args

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from sits.backends.local.engine import GenerationEnd, LlamaEngine, TextDelta
from sits.backends.local.host_memory import available_bytes, memory_usage_ratio, resident_bytes
from sits.backends.local.model_files import PromptFormat
from sits.backends.local.openai_payloads import (
    SSE_DONE,
    Api,
    CompletionShape,
    error_payload,
    sse,
)
from sits.backends.local.protocol import (
    ChatCompletionBody,
    CompletionBody,
    GenerationJob,
    parse_body,
)
from sits.errors import (
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    SitsError,
)

log = logging.getLogger("sits.local.worker")

ENGINE_HEADER = ("x-sits-engine", "llama.cpp")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ENGINE_KEY = web.AppKey("engine", LlamaEngine)
MODEL_KEY = web.AppKey("model_name", str)


def build_app(engine: LlamaEngine, model_name: str) -> web.Application:
    app = web.Application(middlewares=[_openai_errors], client_max_size=8 * 1024 * 1024)
    app[ENGINE_KEY] = engine
    app[MODEL_KEY] = model_name
    app.on_response_prepare.append(_add_engine_header)
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/v1/models", _models)
    app.router.add_post("/v1/chat/completions", _chat_completions)
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/v1/embeddings", _embeddings)
    return app


def _json_error(error: SitsError) -> web.Response:
    return web.json_response(error_payload(error), status=error.http_status)


@web.middleware
async def _openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except SitsError as error:
        return _json_error(error)
    except web.HTTPMethodNotAllowed:
        return _json_error(MethodNotAllowed(f"{request.method} is not allowed on {request.path}"))
    except web.HTTPNotFound:
        return _json_error(NotFound(f"no route {request.method} {request.path}"))
    except web.HTTPRequestEntityTooLarge:
        return _json_error(PayloadTooLarge("request body too large"))
    except Exception:
        # never leak a trace to the client; the log keeps it
        log.exception("unhandled error on %s %s", request.method, request.path)
        return _json_error(SitsError("internal error in the local model worker"))


async def _add_engine_header(_request: web.Request, response: web.StreamResponse) -> None:
    response.headers[ENGINE_HEADER[0]] = ENGINE_HEADER[1]


async def _health(request: web.Request) -> web.Response:
    if request.app[ENGINE_KEY].loaded:
        return web.json_response({"status": "ok"})
    return web.json_response({"status": "loading"}, status=503)


async def _metrics(request: web.Request) -> web.Response:
    """The engine's load and memory pressure, in Prometheus text, for the gateway's engine scraper."""
    engine = request.app[ENGINE_KEY]
    registry = CollectorRegistry()
    Gauge("sits_local_requests_running", "Generations on the model", registry=registry).set(engine.running)
    Gauge("sits_local_requests_waiting", "Generations queued for the model", registry=registry).set(engine.waiting)
    ratio = memory_usage_ratio(resident_bytes(), available_bytes())
    if ratio is not None:
        Gauge("sits_local_memory_usage_ratio", "Resident memory / (resident + host available)",
              registry=registry).set(ratio)
    return web.Response(body=generate_latest(registry), content_type="text/plain", charset="utf-8")


async def _models(request: web.Request) -> web.Response:
    name = request.app[MODEL_KEY]
    card = {"id": name, "object": "model", "created": 0, "owned_by": "sits-local"}
    return web.json_response({"object": "list", "data": [card]})


async def _embeddings(request: web.Request) -> web.Response:
    raise InvalidRequest(
        f"model {request.app[MODEL_KEY]!r} does not serve embeddings",
        param="model",
        code="unsupported_endpoint",
    )


async def _chat_completions(request: web.Request) -> web.StreamResponse:
    body = parse_body(ChatCompletionBody, await request.read())
    return await _serve(request, "chat", body.job(), body.stream, body.include_usage)


async def _completions(request: web.Request) -> web.StreamResponse:
    body = parse_body(CompletionBody, await request.read())
    return await _serve(request, "text", body.job(), body.stream, body.include_usage)


async def _serve(
    request: web.Request, api: Api, job: GenerationJob, stream: bool, include_usage: bool
) -> web.StreamResponse:
    engine = request.app[ENGINE_KEY]
    if not engine.loaded:
        raise Overloaded("the model is still loading", code="model_loading")
    shape = CompletionShape(api=api, model=request.app[MODEL_KEY])
    if stream:
        return await _stream(request, engine, job, shape, include_usage)
    parts: list[str] = []
    async with aclosing(engine.generate(job)) as events:
        async for event in events:
            if isinstance(event, TextDelta):
                parts.append(event.text)
                if _client_gone(request):
                    # closing the iterator stops the model before the next token
                    return web.Response(status=499)
            else:
                payload = shape.complete(
                    "".join(parts), event.finish_reason, event.prompt_tokens, event.completion_tokens
                )
                return web.json_response(payload)
    raise SitsError("generation ended without a result")


async def _stream(
    request: web.Request,
    engine: LlamaEngine,
    job: GenerationJob,
    shape: CompletionShape,
    include_usage: bool,
) -> web.StreamResponse:
    async with aclosing(engine.generate(job)) as events:
        # Wait for the first event before sending headers, so that errors found
        # before generation (context too long) still get a proper status code.
        event = await anext(events)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        try:
            if shape.api == "chat":
                await response.write(sse(shape.chunk("", role=True, with_usage_field=include_usage)))
            while isinstance(event, TextDelta):
                await response.write(sse(shape.chunk(event.text, with_usage_field=include_usage)))
                if _client_gone(request):
                    return response
                event = await anext(events)
            assert isinstance(event, GenerationEnd)
            closing_text = None if shape.api == "chat" else ""
            await response.write(
                sse(shape.chunk(closing_text, finish_reason=event.finish_reason,
                                with_usage_field=include_usage))
            )
            if include_usage:
                await response.write(sse(shape.usage_chunk(event.prompt_tokens, event.completion_tokens)))
            await response.write(SSE_DONE)
        except ConnectionResetError:
            log.info("client went away mid-stream; generation stopped")
        except SitsError as error:
            # headers are out; the OpenAI convention is an error event in the stream
            await _try_write(response, sse(error_payload(error)))
    return response


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _try_write(response: web.StreamResponse, data: bytes) -> None:
    try:
        await response.write(data)
    except ConnectionResetError:
        pass


# -- process entry point ------------------------------------------------------


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sits.backends.local.worker")
    parser.add_argument("--model-path", required=True, type=Path)
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--port", required=True, type=int)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--prompt-format", default="chat-template", choices=get_args(PromptFormat))
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    """Listen at once (health says "loading"), load the model, serve until SIGTERM/SIGINT."""
    engine = LlamaEngine(
        args.model_path, prompt_format=args.prompt_format, n_ctx=args.n_ctx, n_threads=args.threads
    )
    runner = web.AppRunner(build_app(engine, args.model_name), access_log=None)
    await runner.setup()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    orphan_watch = asyncio.create_task(_stop_when_orphaned(stopping))
    try:
        await web.TCPSite(runner, args.host, args.port).start()
        await engine.load()
        log.info("serving %s on http://%s:%d/v1", args.model_name, args.host, args.port)
        await stopping.wait()
    finally:
        orphan_watch.cancel()
        await runner.cleanup()
        await engine.close()


async def _stop_when_orphaned(stopping: asyncio.Event) -> None:
    # A gateway killed with SIGKILL cannot stop its workers; they notice instead.
    parent = os.getppid()
    while os.getppid() == parent:
        await asyncio.sleep(1.0)
    log.warning("parent process %d is gone; stopping", parent)
    stopping.set()


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(args))
    except OSError as error:
        log.error("cannot serve %s on %s:%d: %s", args.model_name, args.host, args.port, error)
        return 1
    except Exception as error:  # noqa: BLE001 - the supervisor shows this stderr line
        log.error("worker for %s failed: %s: %s", args.model_name, type(error).__name__, error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
