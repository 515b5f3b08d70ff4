"""Relaying a chat stream translated into another surface's events (`/v1/responses`, `/v1/messages`),
or a Responses-API upstream's stream passed through as it came (`translate/responses_passthrough.py`).

Consumed like the chat relay (`api/chat_stream_relay.py`), whichever way the door supports:
`push(sink)`, where each upstream chunk is translated and written to the client's connection inside
the upstream connection's read callback (no task wakes up per event: the HTTP/1.1 door), or as an
async iterable (the HTTP/2 door; `api/pulled_relays.py`). Both see each chunk through `deliver` and end
through `end`.

A failure mid-stream ends the stream with the surface's own error event. `on_complete` (the response
store's write) runs once the stream ended well and before its last events reach the client, so a
client's next turn finds it; pushed, the events of the chunk that ended it are held until then.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Final, Protocol

import orjson

from sits.api import pulled_relays
from sits.api.http_types import ChunkSink
from sits.api.pulled_relay import PulledRelay, PulledSink
from sits.api.request_observer import Observation
from sits.errors import SitsError, UpstreamProtocolError
from sits.pipeline.answer import Answer
from sits.pipeline.cached_response import CompletionAccumulator
from sits.state.semantic_cache import CachedCompletion

CHAT_API: Final = "/chat/completions"
CLIENT_GONE = 499


class StreamTranslator(Protocol):
    @property
    def ended(self) -> bool:
        """The stream ended ([DONE] or an error event)."""

    @property
    def error(self) -> str | None:
        """The error it ended with."""

    @property
    def usage(self) -> dict[str, Any] | None:
        """The chat stream's usage as the translator read it (None when the stream had none): what the
        relay records, with no search of the chunks for it."""

    def feed(self, chunk: bytes) -> list[bytes]: ...

    def fail(self, message: str, code: str) -> list[bytes]: ...


class TranslatedStreamRelay(PulledRelay):
    __slots__ = ("_answer", "_seen", "_prompt", "_translator", "_remember", "_on_complete", "_accumulator",
                 "_sink", "_held", "_raw_usage", "_missing_end")

    def __init__(self, answer: Answer, seen: Observation, prompt: str, translator: StreamTranslator,
                 remember: Callable[[Answer, CachedCompletion | None], None],
                 on_complete: Callable[[], Awaitable[None]] | None = None, *,
                 chat: bool = True, raw_usage: Callable[[], bytes] | None = None,
                 missing_end: str = "[DONE]") -> None:
        """`chat`: the answer is a chat stream (kept for the cache steps when it may be); otherwise
        `raw_usage` gives the usage to record, as chat usage, once the stream ended, and `missing_end`
        names what a stream cut short never sent."""
        super().__init__()
        self._answer = answer
        self._seen = seen
        self._prompt = prompt
        self._translator = translator
        self._remember = remember  # a good answer kept for the cache steps (Director.remember)
        self._on_complete = on_complete
        self._accumulator = CompletionAccumulator(CHAT_API) if chat and answer.cache_key is not None else None
        self._raw_usage = raw_usage
        self._missing_end = missing_end
        self._sink: ChunkSink | None = None  # push() puts the client's connection here
        self._held: list[bytes] = []  # events waiting for `on_complete`, or for the stream's last write

    @property
    def answer(self) -> Answer:
        return self._answer

    def pull_into(self, sink: PulledSink) -> None:
        self._sink = sink

    def storing(self) -> bool:
        """Whether the stream just ended well with `on_complete` still to run."""
        translator = self._translator
        return self._on_complete is not None and translator.ended and translator.error is None

    def deliver(self, chunk: bytes) -> bool:
        """One chat chunk seen (the cache's copy), translated and sent on, or held while the stream's
        end waits for `on_complete`; True when the client's buffer is full. The one per-event path of both
        ways. A SitsError it raises (a chunk that does not translate) ends the stream (SseGuard.relay)."""
        if self._accumulator is not None:
            self._accumulator.feed(chunk)
        translator = self._translator
        events = translator.feed(chunk)
        if not events:
            return False
        if self._held or (translator.ended and self._on_complete is not None and translator.error is None):
            self._held += events  # sent once `on_complete` has run
            return False
        return self._sink.send(events[0] if len(events) == 1 else b"".join(events))  # type: ignore[union-attr]

    def body_ended(self) -> tuple[int, str | None]:
        """The upstream's body ended: (status, error) of the stream, its last events held. A last event
        without its blank line is read (some servers end so); UpstreamProtocolError when the chat stream
        never ended."""
        translator = self._translator
        events = translator.feed(b"\n\n") if not translator.ended else []
        if not translator.ended:
            raise UpstreamProtocolError(f"upstream {self._answer.source} ended the stream without {self._missing_end}")
        self._held += events
        error = translator.error
        return (200, None) if error is None else (502, error)

    def body_failed(self, exc: SitsError) -> tuple[int, str | None]:
        """(status, error) for a failure, the surface's closing events held; after a stream that ended
        well, what broke is no longer the answer."""
        translator = self._translator
        if translator.ended and translator.error is None:
            return 200, None
        self._held += translator.fail(exc.message, exc.code)
        return exc.http_status, exc.message

    def end(self, status: int, error: str | None) -> None:
        answer, seen = self._answer, self._seen
        if self._raw_usage is not None:
            last = self._raw_usage()
            counts = answer.usage(last)
        else:  # the translator read the chat stream's usage, if it had any: no chunk searched for it
            usage = self._translator.usage
            last = b""
            if usage is None:
                counts = answer.usage(last)
            else:
                parsed = {"usage": usage}
                if seen.tenant is not None:  # the key gate reads usage by kind from bytes (`Ticket.finish`)
                    last = orjson.dumps(parsed)
                counts = answer.usage(last, parsed)
        seen.served(answer.model, answer.source, answer.route, answer.attempts, answer.first_byte_at,
                    counts, status=status, prompt=self._prompt, error=error, raw_usage=last)
        answer.close(status == 200)
        if status == 200 and self._accumulator is not None:
            self._remember(answer, self._accumulator.result())

    async def complete(self) -> None:
        on_complete, self._on_complete = self._on_complete, None
        if on_complete is not None:
            await on_complete()  # stored before the client sees the end, so its next turn finds it

    async def push(self, sink: ChunkSink) -> None:
        self._sink = sink
        answer = self._answer
        sink.on_drained = answer.resume_reading
        status = CLIENT_GONE
        error: str | None = "client closed the stream"
        try:
            try:
                await answer.push(self.deliver, True)
                status, error = self.body_ended()
            except SitsError as exc:
                status, error = self.body_failed(exc)
            if self.storing():
                await self.complete()
            if self._held:
                sink.send(self.take_held())
        finally:
            sink.on_drained = None
            self.end(status, error)

    def holding(self) -> bool:
        return len(self._held) > 0

    def take_held(self) -> bytes:
        held, self._held = self._held, []
        return b"".join(held)

    def chunks(self) -> AsyncGenerator[bytes, None]:
        return pulled_relays.translated_chunks(self)
