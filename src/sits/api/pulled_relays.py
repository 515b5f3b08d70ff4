"""The stream relays' iterators for a door that pulls (the HTTP/2 door). They are async generators,
which mypyc does not compile, so they live here, in plain Python, and drive each relay's compiled
steps: the same `deliver` per chunk and `end` as the relay's own `push`."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from sits.api.pulled_relay import PulledSink
from sits.errors import SitsError

if TYPE_CHECKING:
    from sits.api.chat_stream_relay import ChatStreamRelay
    from sits.api.translated_stream_relay import TranslatedStreamRelay

CLIENT_GONE = 499


async def chat_chunks(relay: ChatStreamRelay, include_usage: bool) -> AsyncGenerator[bytes, None]:
    status = CLIENT_GONE
    sink = PulledSink()
    relay.pull_into(sink)
    try:
        while True:
            answer = relay.answer
            try:
                async for chunk in answer.chunks(include_usage):
                    relay.deliver(chunk)
                    if sink.chunk:
                        yield sink.take()
                relay.check_complete()
                status = 200
                return
            except SitsError as exc:
                splice = await relay.broke(exc)
                if not splice:
                    status = exc.http_status
                    yield relay.error_event(exc)
                    return
                yield splice
    finally:
        relay.end(status)


async def translated_chunks(relay: TranslatedStreamRelay) -> AsyncGenerator[bytes, None]:
    sink = PulledSink()
    relay.pull_into(sink)
    status: int = CLIENT_GONE
    error: str | None = "client closed the stream"
    try:
        try:
            async for chunk in relay.answer.chunks(True):
                relay.deliver(chunk)
                if sink.chunk:
                    yield sink.take()
                if relay.holding():  # the stream ended well: stored before the client sees its end
                    await relay.complete()
                    yield relay.take_held()
            status, error = relay.body_ended()
        except SitsError as exc:
            status, error = relay.body_failed(exc)
        if relay.storing():
            await relay.complete()
        if relay.holding():
            yield relay.take_held()
    finally:
        relay.end(status, error)
