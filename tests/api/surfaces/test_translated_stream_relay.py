"""The translated stream relay, pushed and pulled: the same events either way, the response stored
before the client sees the stream end, a chunk that does not translate ends the stream with the
surface's error event. Over an answer that pushes its chunks as an upstream connection does (the
behaviour under test is the relay's); end to end over HTTP in test_surface_errors.py and the SDK tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from sits.api.request_observer import Observation, RequestObserver
from sits.api.translated_stream_relay import TranslatedStreamRelay
from sits.errors import SitsError, UpstreamProtocolError
from sits.state.routing_table import RoutingTable
from sits.telemetry.config import LogsConfig
from sits.telemetry.decision_log import DecisionLog
from sits.telemetry.metrics import NoMetrics
from sits.telemetry.tracing import NO_TRACE, Tracing, TracingSettings
from sits.translate.messages_stream import MessagesStream
from sits.translate.responses_passthrough import PassthroughStream
from sits.translate.responses_stream import ResponsesStream
from sits.translate.sse import MAX_LINE
from tests.conftest import one_model_config, read_slowly


def chat_chunks(texts: list[str]) -> list[bytes]:
    head = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m1"}
    events = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    events += [{**head, "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]} for t in texts]
    events.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 3, "completion_tokens": len(texts), "total_tokens": 3 + len(texts)}})
    return [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


class PushedAnswer:
    """An answer whose chunks arrive one loop turn apart, each pushed from a callback (as an upstream
    connection's reads are); `error` ends it with that error after the chunks."""

    model, source, route, attempts, intent, first_byte_at, cache_key = "m1", "m1/ep-0", "r", "", "", 1.0, None

    def __init__(self, chunks: list[bytes], error: SitsError | None = None) -> None:
        self._chunks, self._error = chunks, error
        self.closed: bool | None = None

    def usage(self, body: bytes, parsed: object = None) -> tuple[int, int] | None:
        return (3, 2) if body else None

    async def push(self, deliver: Callable[[bytes], bool], include_usage: bool = False) -> None:
        loop = asyncio.get_running_loop()
        for chunk in self._chunks:
            done = loop.create_future()

            def read(chunk: bytes = chunk, done: asyncio.Future = done) -> None:
                try:
                    deliver(chunk)
                    done.set_result(None)
                except SitsError as exc:  # what SseGuard.relay makes of a consumer's error
                    done.set_exception(exc)
            loop.call_soon(read)
            await done
        if self._error is not None:
            raise self._error

    async def chunks(self, include_usage: bool = False) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            await asyncio.sleep(0)
            yield chunk
        if self._error is not None:
            raise self._error

    def resume_reading(self) -> None:
        pass

    def close(self, ok: bool = False) -> None:
        self.closed = ok


class Observed:
    """A request's real observation, and what it recorded: the recent-decisions log's entries."""

    def __init__(self) -> None:
        self._decisions = DecisionLog(8)
        observer = RequestObserver(NoMetrics(), Tracing(TracingSettings()), self._decisions, LogsConfig(),
                                   table=lambda: RoutingTable({}))
        self.observation = Observation(observer, "/responses", "req-1", "m1", 0.0, NO_TRACE)

    @property
    def calls(self) -> list[dict[str, Any]]:
        return self._decisions.recent(8)


class Sink:
    on_drained = None

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, chunk: bytes) -> bool:
        self.sent.append(chunk)
        return False


def never_remembered(answer: Any, completion: Any) -> None:
    raise AssertionError("an answer with no cache key is not kept for the cache steps")


def relay_of(answer: PushedAnswer, translator: Any, on_complete: Any = None,
             **options: Any) -> tuple[TranslatedStreamRelay, Observed]:
    seen = Observed()
    relay = TranslatedStreamRelay(answer, seen.observation, "hi", translator, never_remembered, on_complete, **options)
    return relay, seen


def event_names(body: bytes) -> list[str]:
    return [line[7:] for line in body.decode().split("\n") if line.startswith("event: ")]


async def pushed(relay: TranslatedStreamRelay) -> bytes:
    sink = Sink()
    await relay.push(sink)
    return b"".join(sink.sent)


async def pulled(relay: TranslatedStreamRelay) -> bytes:
    return b"".join([chunk async for chunk in relay])


@pytest.mark.parametrize("translator", [lambda: ResponsesStream("resp_1", 1, {"model": "m1"}),
                                        lambda: MessagesStream("msg_1", "m1")])
async def test_pushed_and_pulled_say_the_same(translator):
    chunks = chat_chunks(["Hel", "lo", " world"])
    by_push, seen_push = relay_of(PushedAnswer(chunks), translator())
    by_pull, seen_pull = relay_of(PushedAnswer(chunks), translator())
    pushed_body, pulled_body = await pushed(by_push), await pulled(by_pull)
    assert pushed_body == pulled_body and event_names(pushed_body)
    assert b"Hel" in pushed_body and b" world" in pushed_body
    assert [s["status"] for s in seen_push.calls] == [s["status"] for s in seen_pull.calls] == [200]


@pytest.mark.parametrize("consume", [pushed, pulled])
async def test_the_response_is_stored_before_the_client_sees_the_stream_end(consume):
    translator = ResponsesStream("resp_1", 1, {"model": "m1"})
    sink_seen_at_store: list[bytes] = []
    sink = Sink()

    async def store() -> None:
        await asyncio.sleep(0.01)  # a store write that takes a while: nothing more is sent meanwhile
        sink_seen_at_store.append(b"".join(sink.sent))
    relay, seen = relay_of(PushedAnswer(chat_chunks(["a", "b"])), translator, store)
    if consume is pushed:
        await relay.push(sink)
    else:
        sink.sent = [chunk async for chunk in _recording(relay, sink)]
    body = b"".join(sink.sent)
    assert event_names(body)[-1] == "response.completed"
    assert len(sink_seen_at_store) == 1 and b"response.completed" not in sink_seen_at_store[0]
    assert b"response.output_text.delta" in body and seen.calls[0]["status"] == 200


async def _recording(relay: TranslatedStreamRelay, sink: Sink) -> AsyncIterator[bytes]:
    async for chunk in relay:
        sink.sent.append(chunk)
        yield chunk


@pytest.mark.parametrize("consume", [pushed, pulled])
async def test_a_stream_that_breaks_ends_with_the_surfaces_error_event_and_stores_nothing(consume):
    stored: list[bool] = []

    async def store() -> None:
        stored.append(True)
    answer = PushedAnswer(chat_chunks(["a", "b"])[:3], UpstreamProtocolError("upstream m1/ep-0 went away"))
    relay, seen = relay_of(answer, ResponsesStream("resp_1", 1, {"model": "m1"}), store)
    body = await consume(relay)
    assert event_names(body)[-1] == "response.failed" and b"went away" in body
    assert not stored and seen.calls[0]["status"] == 502 and answer.closed is False


async def test_a_chunk_that_does_not_translate_ends_a_pushed_stream_with_the_error_event():
    hel, lo, never = chat_chunks(["Hel", "lo", "never"])[1:4]
    endless = b"data: " + b"x" * (MAX_LINE + 1)  # an event with no end in sight: the reader gives up on it
    answer = PushedAnswer([chat_chunks([])[0], hel, endless, lo, never])
    relay, seen = relay_of(answer, MessagesStream("msg_1", "m1"))
    body = await pushed(relay)
    names = event_names(body)
    assert names[-1] == "error" and "message_stop" not in names and b"never" not in body and b'"lo"' not in body
    assert b"over" in body.split(b"event: error")[-1] and seen.calls[0]["status"] == 502


async def test_a_client_reading_slowly_gets_a_long_translated_stream_whole_and_in_order(upstream, start_gateway):
    """Eight MB of Messages events against a client that reads 64 KB at a time with pauses: the pushed
    relay stops reading the upstream while the client's socket is full and goes on once it drains."""
    upstream.stream_chunks, upstream.chunk_padding = 400, 20_000
    gateway = await start_gateway(one_model_config(upstream.url))
    body = {"model": "m1", "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    received = await read_slowly(gateway, "/v1/messages", body, {"anthropic-version": "2023-06-01"})
    names = event_names(received)
    assert names[0] == "message_start" and names[-1] == "message_stop"
    texts = [orjson.loads(line[6:])["delta"]["text"] for line in received.split(b"\n")
             if line.startswith(b"data: ") and b'"text_delta"' in line]
    assert [t.split(" ")[0] for t in texts] == [f"tok{i}" for i in range(400)]
    assert upstream.log.completed_streams == 1


def responses_events(texts: list[str]) -> list[bytes]:
    """A Responses-API upstream's stream: created, text deltas, completed."""
    def event(kind: str, **fields: Any) -> bytes:
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"
    response = {"id": "resp_up", "object": "response", "status": "in_progress", "output": []}
    events = [event("response.created", response=response)]
    events += [event("response.output_text.delta", delta=t) for t in texts]
    done = {**response, "status": "completed", "usage": {"input_tokens": 4, "output_tokens": len(texts)}}
    return events + [event("response.completed", response=done)]


@pytest.mark.parametrize("consume", [pushed, pulled])
async def test_a_passed_through_stream_goes_on_unchanged_and_is_stored_before_it_closes(consume):
    chunks = responses_events(["Hel", "lo"])
    stream = PassthroughStream("m1/ep-0")
    stored: list[bytes] = []
    sink = Sink()

    async def store() -> None:
        await asyncio.sleep(0.01)
        stored.append(b"".join(sink.sent))
    relay, seen = relay_of(PushedAnswer(chunks), stream, store)
    if consume is pushed:
        await relay.push(sink)
    else:
        sink.sent = [chunk async for chunk in _recording(relay, sink)]
    body = b"".join(sink.sent)
    assert body == b"".join(chunks)  # relayed as it came
    assert stored and b"response.completed" not in stored[0]
    assert stream.tap.response is not None and stream.tap.response["id"] == "resp_up"
    assert seen.calls[0]["status"] == 200


async def test_a_passed_through_stream_cut_short_ends_with_response_failed():
    relay, seen = relay_of(PushedAnswer(responses_events(["Hel", "lo"])[:2]), PassthroughStream("m1/ep-0"),
                           chat=False, missing_end="closing the response")
    body = await pushed(relay)
    assert event_names(body)[-1] == "response.failed" and b"without closing the response" in body
    assert seen.calls[0]["status"] == 502
