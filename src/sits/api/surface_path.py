"""The one request path for the surfaces translated to chat completions (`/v1/responses`,
`/v1/messages`): the translated body, a valid chat body by construction, goes through `RequestIntake` and
`Director.run`, and the `Answer` comes back translated, so routing, admission, fallback, the cache
steps, workflows, metrics and tracing apply unchanged.

A `/v1/responses` request also carries its own body (`Passthrough`): an endpoint that declares
`api: responses` is sent that instead, and its answer is relayed as it came (`read_passthrough`,
`relay_passthrough`), read only for what the request observer and the response store need."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, cast

import orjson

from sits.api.http_types import HttpRequest
from sits.api.request_intake import RequestIntake
from sits.api.request_observer import UNKNOWN_MODEL, Observation, RequestObserver
from sits.api.schemas import CHAT_COMPLETION, ChatCompletionBody
from sits.api.tenant_gate import HttpTenantGate
from sits.api.translated_stream_relay import CHAT_API, StreamTranslator, TranslatedStreamRelay
from sits.errors import SitsError, UpstreamProtocolError
from sits.pipeline.admission_step import Admission
from sits.pipeline.answer import Answer
from sits.pipeline.cached_response import completion_from_json
from sits.pipeline.context import Passthrough
from sits.pipeline.director import Director
from sits.translate.responses_passthrough import PassthroughStream
from sits.translate.usage import chat_usage_from_responses
from sits.tuples import new_tuple


def passed_through(answer: Answer) -> bool:
    """Whether an endpoint that speaks the Responses API answered: it was sent the request's `Passthrough`
    body, and its answer is a Responses one (a cache hit, a workflow or any other endpoint answers in chat)."""
    endpoint = getattr(answer, "endpoint", None)  # an upstream exchange's
    return endpoint is not None and endpoint.api == "responses"


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
                  stream: bool, passthrough: Passthrough | None = None) -> Started:
        """Route the translated chat body (and `passthrough`, the surface's own body for endpoints that
        speak its API); the answer, the request's observation and its prompt text.

        `chat` is not validated again as a chat body: the translators check what each chat field needs
        and build the rest themselves, so what they return is a valid one (a property test holds them to
        it: tests/api/surfaces/test_translated_bodies.py)."""
        raw = orjson.dumps(chat)
        body = cast(ChatCompletionBody, chat)
        prompt = CHAT_COMPLETION.prompt_text(body)
        model: str = body["model"]
        priority, scope = self._intake.class_and_scope(request, model)
        seen = self._observer.begin(request, surface, request_id, model, body)
        routing = self._intake.routing(CHAT_API, CHAT_COMPLETION, body, stream, request, request_id, prompt, priority,
                                       scope, seen.trace, passthrough, True)
        tenants = self._tenants
        if tenants is not None:  # keys, limits, budgets (docs/limits-and-budgets.md)
            ticket = tenants.begin(seen, request, model, body, prompt, routing.max_tokens)
            if ticket.pending is not None:  # its counters are being asked (Redis, shared by this loop turn)
                tenants.end(seen, request, prompt, ticket, await ticket.pending)
        try:
            answer = await self._director.run(routing, raw)
        except SitsError as exc:
            seen.failed(exc, prompt)
            raise
        return new_tuple(Started, (answer, seen, prompt))

    async def read(self, started: Started) -> Any:
        """The whole answer as a parsed chat completion, recorded as the chat door records it."""
        answer, seen, prompt = started
        payload = await _body(started)
        try:
            completion = orjson.loads(payload)
        except orjson.JSONDecodeError:
            completion = None
        seen.served(answer.model, answer.source, answer.route, answer.attempts, answer.first_byte_at,
                    answer.usage(payload, completion), prompt=prompt, raw_usage=payload)
        if completion is None:
            raise UpstreamProtocolError(f"upstream {answer.source} answered with a body that is not JSON")
        if answer.cache_key is not None:
            self._director.remember(answer, completion_from_json(CHAT_API, payload))
        return completion

    def relay(self, started: Started, translator: StreamTranslator,
              on_complete: Callable[[], Awaitable[None]] | None = None) -> TranslatedStreamRelay:
        """The answer's chat SSE chunks translated as they come, pushed or pulled
        (`api/translated_stream_relay.py`); a failure mid-stream ends the stream with the surface's own
        error event. `on_complete` runs once the stream ended well, before its last events are sent."""
        answer, seen, prompt = started
        return TranslatedStreamRelay(answer, seen, prompt, translator, self._director.remember, on_complete)

    async def read_passthrough(self, started: Started) -> tuple[bytes, Any]:
        """A passed-through answer: its bytes as they came, and parsed (None when it is not JSON),
        recorded with its usage. Not kept for the cache steps, which hold chat completions."""
        answer, seen, prompt = started
        payload = await _body(started)
        try:
            parsed = orjson.loads(payload)
        except orjson.JSONDecodeError:
            parsed = None
        raw = _usage_event(parsed.get("usage") if isinstance(parsed, dict) else None)
        seen.served(answer.model, answer.source, answer.route, answer.attempts, answer.first_byte_at,
                    answer.usage(raw), prompt=prompt, raw_usage=raw)
        return payload, parsed

    def relay_passthrough(self, started: Started,
                          on_complete: Callable[[dict[str, Any]], Awaitable[None]] | None = None
                          ) -> TranslatedStreamRelay:
        """A passed-through stream, relayed as it comes, pushed or pulled like a translated one;
        `on_complete` gets the response it closes with (completed or incomplete) before the client sees
        that event. A stream that breaks, or ends without closing, ends with `response.failed`. Not kept
        for the cache steps, which hold chat completions."""
        answer, seen, prompt = started
        stream = PassthroughStream(answer.source)
        tap = stream.tap

        async def stored() -> None:
            if on_complete is not None and tap.response is not None:
                await on_complete(tap.response)

        def usage() -> bytes:
            return _usage_event(tap.response.get("usage") if tap.response is not None else None)

        return TranslatedStreamRelay(answer, seen, prompt, stream, self._director.remember,
                                     stored if on_complete is not None else None, chat=False, raw_usage=usage,
                                     missing_end="closing the response")


def _usage_event(usage: Any) -> bytes:
    """A Responses usage object as the chat usage the observer and the key gate read; empty if none."""
    return orjson.dumps({"usage": chat_usage_from_responses(usage)}) if isinstance(usage, dict) else b""


async def _body(started: Started) -> bytes:
    """The whole answer's bytes; a failure to read it is recorded as how the request ended."""
    answer, seen, prompt = started
    try:
        return await answer.read()
    except SitsError as exc:
        seen.failed(exc, prompt)
        raise
