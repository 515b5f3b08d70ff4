"""Relaying a chat (or text) completion stream to the client: the answer's SSE bytes as they come.

Two ways to consume one relay, whichever the door supports: `push(sink)`, where each chunk goes from
the upstream connection's read callback straight into the client's connection (no task wakes up per
event: what the HTTP/1.1 door uses), and `chunks()`, an async iterator (the HTTP/2 door;
`api/pulled_relays.py`). Both see each chunk through `deliver` and end through `end`, so what is
recorded cannot differ between them.

A stream that breaks is resumed on another endpoint or fallback model when `resume` is given (the
client's request and body) and one can go on from the partial answer; otherwise it gets an SSE error
event and ends without `[DONE]`, so a client can never mistake a cut answer for a complete one.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from time import perf_counter
from typing import Final

import orjson

from sits.api.http_types import ChunkSink
from sits.api import pulled_relays
from sits.api.pulled_relay import PulledRelay, PulledSink
from sits.api.request_observer import Observation
from sits.errors import SitsError, UpstreamProtocolError
from sits.pipeline.answer import Answer
from sits.pipeline.cached_response import CompletionAccumulator
from sits.pipeline.context import RoutingRequest
from sits.pipeline.director import Director
from sits.pipeline.stream_resume import generated_text, partial_answer
from sits.telemetry.metrics import Buckets
from sits.translate.sse import DONE_EVENT

log = logging.getLogger("sits.api")

_EMPTY_CHOICES: Final = b'"choices":[],'


class ChatStreamRelay(PulledRelay):
    __slots__ = ("_answer", "_director", "_seen", "_prompt", "_resume", "_include_usage", "_tail", "_before", "_earlier",
                 "_last", "_accumulator", "_gaps", "_sent", "_previous", "_sink", "_strip_usage")

    def __init__(self, answer: Answer, director: Director, seen: Observation, prompt: str,
                 resume: tuple[RoutingRequest, bytes] | None, include_usage: bool, strip_usage: bool = False) -> None:
        """`strip_usage`: the gateway asked the upstream for the usage event (a keyed stream, settled on
        it) and the client did not: the usage-only event is kept for settlement but not sent on."""
        super().__init__()
        self._answer = answer
        self._director = director
        self._seen = seen
        self._prompt = prompt
        self._resume = resume
        self._include_usage = include_usage
        self._tail = self._before = self._earlier = b""  # the stream's last three chunks: `[DONE]`, the usage
        self._last = b""  # the usage event and what follows it (`_usage`), once the stream ended
        self._accumulator = CompletionAccumulator(seen.api) if answer.cache_key is not None else None
        self._gaps: Buckets | None = self._gaps_of(answer)
        # References only: parsed if the stream breaks (resume), or if it reports no usage (a key's spend).
        self._sent: list[bytes] | None = [] if resume is not None or seen.tenant is not None else None
        self._previous = 0.0
        self._sink: ChunkSink = _PULLED  # push() puts the client's connection here, chunks() a PulledSink
        self._strip_usage = strip_usage

    def _gaps_of(self, answer: Answer) -> Buckets | None:
        """The histogram of chunk gaps: upstream streams only (an answer the gateway made comes whole)."""
        return self._seen.inter_token(answer.model, answer.source) if answer.first_byte_at is not None else None

    def deliver(self, chunk: bytes) -> bool:
        """See one chunk (usage, the tail, the gap since the last one, the cache and resume copies) and
        send it on; True when the client's buffer is full. The one per-event path of both ways."""
        if self._strip_usage:  # the usage event comes out of what the client gets: looked for in each chunk
            # rfind(), not `in`: on 3.11 `bytes in bytes` first tries the operand as an int and formats a
            # TypeError it then drops (bench/README.md, "measured")
            at = chunk.rfind(b'"usage":{')
            if at >= 0:
                self._last = chunk[at:]  # the usage and what follows it: all that is read of it, and soon
                chunk = without_usage_event(chunk, at)
        # The stream's last three chunks, by reference: the [DONE] check (which may straddle the last two)
        # and, at the end, the usage (`_usage`).
        self._earlier, self._before, self._tail = self._before, self._tail, chunk
        if self._accumulator is not None:
            self._accumulator.feed(chunk)
        if self._sent is not None:
            self._sent.append(chunk)
        gaps = self._gaps
        if gaps is not None:
            now = perf_counter()
            if self._previous:
                gaps.observe(now - self._previous)
            self._previous = now
        return self._sink.send(chunk)

    def check_complete(self) -> None:
        if self._tail[-14:] == DONE_EVENT:
            return  # the usual end: the last chunk ends with the whole [DONE] event
        if (self._before[-16:] + self._tail[-16:]).find(b"[DONE]") < 0:
            raise UpstreamProtocolError(f"upstream {self._answer.source} ended the stream without [DONE]")

    async def broke(self, exc: SitsError) -> bytes:
        """After a failure: the bytes to send on (an SSE comment marking the splice, and `_answer` now the
        resumed answer), or b"" when the stream cannot go on (the error event is then sent and recorded)."""
        resumed = None
        answer = self._answer
        if self._resume is not None and self._sent is not None:
            resumed = await self._director.resume(self._resume[0], self._resume[1], answer,
                                                  partial_answer(self._sent))
        if resumed is None:
            self._seen.served(answer.model, answer.source, answer.route, answer.attempts, answer.first_byte_at,
                              None, status=exc.http_status, prompt=self._prompt, error=exc.message)
            return b""
        log.warning("stream from %s broke (%s); resumed on %s", answer.source, exc.message, resumed.source)
        self._answer, self._accumulator = resumed, None  # a spliced answer is never cached
        self._gaps, self._previous = self._gaps_of(resumed), 0.0
        # An SSE comment: clients skip it, a person reading the wire sees the splice.
        return f": sits resumed the answer on {resumed.source} after {exc.code}\n\n".encode()

    def _usage(self) -> bytes:
        """The stream's usage event and what follows it. A server writes the usage just before `[DONE]`
        (the event a request's `include_usage` asks for, or the last of those that carry it on every
        event), so it is in the last chunks, kept anyway: looked for there once, at the end, not in every
        chunk on the way (`_last` when a stripped event was kept). An event cut across reads is found
        whole: the last three chunks hold the usage cut in two and `[DONE]` after it."""
        if self._last:
            return self._last
        tail = self._tail
        at = tail.rfind(b'"usage":{')
        if at >= 0:
            return tail[at:]
        if not self._before:
            return b""
        end = self._before + tail
        at = end.rfind(b'"usage":{')
        if at < 0 and self._earlier:
            end = self._earlier + end
            at = end.rfind(b'"usage":{')
        return end[at:] if at >= 0 else b""

    def end(self, status: int) -> None:
        answer = self._answer
        tenant = self._seen.tenant
        self._last = self._usage()
        if tenant is not None and not self._last and self._sent:  # no usage event: the key's spend is counted
            tenant.generated = generated_text(self._sent)
        self._seen.served(answer.model, answer.source, answer.route, answer.attempts, answer.first_byte_at,
                          answer.usage(self._last), status=status, prompt=self._prompt,
                          error=None if status == 200 else "client closed the stream", raw_usage=self._last)
        if status == 200 and self._accumulator is not None:
            self._director.remember(answer, self._accumulator.result())

    async def push(self, sink: ChunkSink) -> None:
        self._sink = sink
        status = 499  # until the stream ends one way or the other: the client went away
        try:
            while True:
                answer = self._answer
                sink.on_drained = answer.resume_reading
                try:
                    await answer.push(self.deliver, self._include_usage)
                    self.check_complete()
                    status = 200
                    return
                except SitsError as exc:
                    splice = await self.broke(exc)
                    if not splice:
                        status = exc.http_status
                        sink.send(_error_event(answer, exc))
                        return
                    sink.send(splice)
        finally:
            sink.on_drained = None
            self.end(status)

    @property
    def answer(self) -> Answer:
        """The answer being relayed: the resumed one after a splice."""
        return self._answer

    def pull_into(self, sink: PulledSink) -> None:
        self._sink = sink

    def error_event(self, exc: SitsError) -> bytes:
        """The SSE error event that ends the stream after `exc` (when `broke` could not go on)."""
        return _error_event(self._answer, exc)

    def chunks(self) -> AsyncGenerator[bytes, None]:
        return pulled_relays.chat_chunks(self, self._include_usage)


_PULLED = PulledSink()  # until push() or chunks() puts their own sink in


def without_usage_event(chunk: bytes, at: int = -1) -> bytes:
    """`chunk` without its usage-only event (`"choices":[]`, as servers write the usage a request asked
    for). A usage that rides on an event with choices stays: a client's SDK reads it as an optional
    field. An event cut across two reads is left as it is. `at`: where its `"usage":{` is, when known."""
    if at < 0:
        at = chunk.rfind(b'"usage":{')
    # An event's JSON holds no raw newline, so the newline just before the usage ends the event before
    # it, and the first one after it ends this one: one-byte searches (memchr), where a two-byte pattern
    # is scanned for byte by byte. An event of several lines (`event:` or `id:` beside its `data:`) is
    # told by the newline not being doubled, and searched for by its blank line as such.
    start = chunk.rfind(b"\n", 0, at) + 1  # 0: the chunk starts with this event
    if start == 1 or (start > 1 and chunk[start - 2] != 10):  # (10: a newline, read as a byte, not a slice)
        start = chunk.rfind(b"\n\n", 0, at)
        start = 0 if start < 0 else start + 2
    end = chunk.find(b"\n", at)
    if end >= 0 and (end + 1 == len(chunk) or chunk[end + 1] != 10):
        end = chunk.find(b"\n\n", at)
    if end < 0:
        return chunk
    end += 2
    # Where OpenAI and vLLM write it, the empty choices come just before the usage: told by a slice, not a search.
    if chunk[at - len(_EMPTY_CHOICES):at] != _EMPTY_CHOICES and chunk.find(b'"choices":[]', start, end) < 0 \
            and chunk.find(b'"choices": []', start, end) < 0:
        return chunk
    return chunk[:start] + chunk[end:]


def _error_event(answer: Answer, exc: SitsError) -> bytes:
    log.warning("stream from %s failed: %s", answer.source, exc.message)
    event = {"error": {"message": exc.message, "type": exc.error_type, "param": None, "code": exc.code}}
    return b"data: " + orjson.dumps(event) + b"\n\n"
