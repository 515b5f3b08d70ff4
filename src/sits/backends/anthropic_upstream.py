"""An endpoint that speaks Anthropic's Messages API (`api: anthropic`), behind the same `send()` as an
OpenAI-compatible one: the chat request goes out as a Messages request, and the answer, its stream,
its errors and its usage (cache reads and writes included) come back as chat completions
(the translation itself is `sits.translate.anthropic_upstream`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

import orjson

from sits.backends.upstream_response import UpstreamResponse
from sits.errors import InvalidRequest, UpstreamProtocolError
from sits.translate.anthropic_upstream import AnthropicToChat, anthropic_request, chat_completion, chat_error

log = logging.getLogger("sits.backends")

ANTHROPIC_VERSION = "2023-06-01"
CHAT_PATH = b"/chat/completions"
MESSAGES_PATH = b"/messages"


def request_body(api_path: bytes, body: bytes, endpoint_id: str) -> tuple[bytes, bool, bool]:
    """(the Messages body, stream, include_usage) for a chat body; other APIs are refused."""
    if api_path != CHAT_PATH:
        raise InvalidRequest(f"endpoint {endpoint_id} speaks Anthropic's API: only chat completions can go there",
                             param="model")
    try:
        chat = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidRequest("the request body is not JSON", param="body") from None
    options = chat.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    return orjson.dumps(anthropic_request(chat)), chat.get("stream") is True, include_usage


def error_body(payload: bytes, status: int) -> bytes:
    return chat_error(payload, status)


class AnthropicResponse:
    """An `UpstreamResponse` whose body is translated to chat completions as it is read."""

    __slots__ = ("_response", "status", "headers", "_stream", "_translator", "_warned")

    def __init__(self, response: UpstreamResponse, stream: bool, include_usage: bool) -> None:
        self._response = response
        self.status = response.status
        self.headers = {k: v for k, v in response.headers.items() if k != "content-type"}
        self.headers["content-type"] = "text/event-stream" if stream else "application/json"
        self._stream = stream
        self._translator = AnthropicToChat(include_usage)  # one per stream, whichever way it is read
        self._warned = False

    async def read(self) -> bytes:
        payload = await self._response.read()
        try:
            message = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise UpstreamProtocolError(f"an Anthropic-API upstream answered with a body that is not JSON: "
                                        f"{payload[:80]!r}") from None
        return orjson.dumps(chat_completion(message, int(time.time())))

    def _translate(self, chunk: bytes) -> bytes:
        out = self._translator.feed(chunk)
        if self._translator.missing_start and not self._warned:
            self._warned = True
            log.warning("an Anthropic-API upstream began its stream without message_start: the answer's input "
                        "tokens are unknown (reported as 0)")
        return out

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        async for chunk in self._response.iter_chunks():
            out = self._translate(chunk)
            if out:
                yield out

    async def next_chunk(self) -> bytes:
        while True:
            chunk = await self._response.next_chunk()
            if not chunk:
                return b""
            out = self._translate(chunk)
            if out:
                return out

    def push(self, deliver: Callable[[bytes], bool]) -> asyncio.Future[None]:
        def translated(chunk: bytes) -> bool:
            out = self._translate(chunk)
            return deliver(out) if out else False

        return self._response.push(translated)

    def ended(self) -> bool:
        return self._response.ended()

    def resume(self) -> None:
        self._response.resume()

    def fail(self, error: BaseException) -> None:
        self._response.fail(error)

    def first_chunk_within(self, seconds: float) -> None:
        self._response.first_chunk_within(seconds)

    def close(self) -> None:
        self._response.close()
