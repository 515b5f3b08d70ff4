"""The one request path for the surfaces translated to chat completions (`/v1/responses`,
`/v1/messages`): the translated body is validated as a chat body, goes through `RequestIntake` and
`Director.run`, and the `Answer` comes back translated, so routing, admission, fallback, the cache
steps, workflows, metrics and tracing apply unchanged."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple, Protocol

import orjson

from sits.api.http_types import HttpRequest
from sits.api.request_intake import RequestIntake
from sits.api.request_observer import UNKNOWN_MODEL, Observation, RequestObserver
from sits.api.schemas import CHAT_COMPLETION
from sits.api.tenant_gate import HttpTenantGate
from sits.errors import SitsError, UpstreamProtocolError
from sits.pipeline.admission_step import Admission
from sits.pipeline.answer import Answer
from sits.pipeline.cached_response import CompletionAccumulator, completion_from_json
from sits.pipeline.director import Director

CHAT_API = "/chat/completions"
CLIENT_GONE = 499


class StreamTranslator(Protocol):
    ended: bool  # the chat stream ended ([DONE] or an error event)
    error: str | None  # the error it ended with

    def feed(self, chunk: bytes) -> list[bytes]: ...

    def fail(self, message: str, code: str) -> list[bytes]: ...


class Started(NamedTuple):
    answer: Answer
    seen: Observation
    prompt: str


class SurfacePath:
    def __init__(self, director: Director, observer: RequestObserver, admission: Admission | None,
                 tenants: HttpTenantGate | None = None) -> None:
        self._director = director
        self._observer = observer
        self._tenants = tenants
        self._intake = RequestIntake(director, admission, tenants.key_class if tenants is not None else None)

    def bad_input(self, error: SitsError) -> None:
        """A request refused before routing: counted as the chat door counts it."""
        self._observer.metrics.failed(UNKNOWN_MODEL, error.http_status)

    async def run(self, request: HttpRequest, request_id: str, surface: str, chat: dict[str, Any],
                  stream: bool) -> Started:
        """Route the translated chat body; the answer, the request's observation and its prompt text."""
        raw = orjson.dumps(chat)
        try:
            body = CHAT_COMPLETION.parse(raw)
        except SitsError as exc:
            self.bad_input(exc)
            raise
        prompt = CHAT_COMPLETION.prompt_text(body)
        model: str = body["model"]
        priority, scope = self._intake.class_and_scope(request, model)
        seen = self._observer.begin(request, surface, request_id, model, body)
        if self._tenants is not None:  # keys, limits, budgets (docs/limits-and-budgets.md)
            await self._tenants.admit(seen, request, model, body, prompt)
        routing = self._intake.routing(CHAT_API, CHAT_COMPLETION, body, stream, request, request_id, prompt, priority,
                                       scope, seen.trace)
        try:
            answer = await self._director.run(routing, raw)
        except SitsError as exc:
            seen.failed(exc, prompt)
            raise
        return Started(answer, seen, prompt)

    async def read(self, started: Started) -> Any:
        """The whole answer as a parsed chat completion, recorded as the chat door records it."""
        answer, seen, prompt = started
        try:
            payload = await answer.read()
        except SitsError as exc:
            seen.failed(exc, prompt)
            raise
        seen.served(answer.model, answer.source, answer.route, answer.attempts, answer.first_byte_at,
                    answer.usage(payload), prompt=prompt, raw_usage=payload)
        if answer.cache_key is not None:
            self._director.remember(answer, completion_from_json(CHAT_API, payload))
        try:
            return orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise UpstreamProtocolError(f"upstream {answer.source} answered with a body that is not JSON") from None

    async def relay(self, started: Started, translator: StreamTranslator,
                    on_complete: Callable[[], Any] | None = None) -> AsyncIterator[bytes]:
        """The answer's chat SSE chunks translated as they come; a failure mid-stream ends the stream
        with the surface's own error event. `on_complete` (awaitable) runs once the stream ended well,
        before its last events are sent."""
        answer, seen, prompt = started
        accumulator = CompletionAccumulator(CHAT_API) if answer.cache_key is not None else None
        last = b""
        status, error = CLIENT_GONE, "client closed the stream"
        try:
            try:
                async for chunk in answer.chunks(True):
                    if accumulator is not None:
                        accumulator.feed(chunk)
                    if chunk.find(b'"usage":{') >= 0:  # find(): see openai_routes._relay_stream
                        last = chunk
                    events = translator.feed(chunk)
                    if translator.ended and translator.error is None and on_complete is not None:
                        await on_complete()  # stored before the client sees the end, so its next turn finds it
                        on_complete = None
                    if events:
                        yield b"".join(events)
                if not translator.ended:  # a last event without its blank line (some servers end so)
                    events = translator.feed(b"\n\n")
                    if translator.ended and translator.error is None and on_complete is not None:
                        await on_complete()
                    if events:
                        yield b"".join(events)
                if not translator.ended:
                    raise UpstreamProtocolError(f"upstream {answer.source} ended the stream without [DONE]")
                status, error = (200, None) if translator.error is None else (502, translator.error)
            except SitsError as exc:
                status, error = exc.http_status, exc.message
                events = translator.fail(exc.message, exc.code)
                if events:
                    yield b"".join(events)
        finally:
            seen.served(answer.model, answer.source, answer.route, answer.attempts, answer.first_byte_at,
                        answer.usage(last), status=status, prompt=prompt, error=error, raw_usage=last)
            answer.close(status == 200)
        if status == 200 and accumulator is not None:
            self._director.remember(answer, accumulator.result())
