"""The Anthropic Messages API (docs/responses-and-messages.md).

    POST /v1/messages               create (JSON or a stream of Messages events)
    POST /v1/messages/count_tokens  {"input_tokens": n}, counted with the target model's tokenizer

A create is translated to a chat completion (`sits.translate.messages`) and goes the one request path
(`api/surface_path.py`). Every error at these paths, a refused key included, is Anthropic-shaped
(`api/error_responses.py`, chosen by the dispatcher): `{"type": "error", "error": {"type",
"message"}}`, the message naming the field.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any, Final

import orjson

from sits.api.dispatch import SerialIds
from sits.api.http_types import HttpRequest, HttpResponse, StreamingResponse
from sits.api.surface_path import SurfacePath
from sits.errors import InvalidRequest, ModelNotFound, SitsError
from sits.state.routing_table import RoutingTable
from sits.translate import messages as wire
from sits.translate.messages_stream import MessagesStream
from sits.understanding.tokenizers.catalog import TokenizerCatalog

PATH = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
_VERSION: Final = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# anthropic-version values found well formed: a client sends the same one on every request, and a set
# lookup costs a fraction of a regular-expression match (bounded: a client cannot grow it)
_VERSIONS_SEEN: Final[set[str]] = set()
_VERSIONS_KEPT: Final = 64
_CHARS_PER_TOKEN = 4  # the estimate when no tokenizer is loaded for the model


class MessagesRoutes:
    def __init__(self, path: SurfacePath, tokenizers: TokenizerCatalog, table: Callable[[], RoutingTable]) -> None:
        self._path = path
        self._tokenizers = tokenizers
        self._table = table
        self._ids = SerialIds("msg_")

    async def create(self, request: HttpRequest, request_id: str) -> HttpResponse | StreamingResponse:
        try:
            body = self._body(request)
            stream = body.get("stream") is True
            chat = wire.chat_request(body, stream)
        except SitsError as exc:
            self._path.bad_input(exc)
            raise
        started = await self._path.run(request, request_id, "/messages", chat, stream)
        message_id = self._ids.next()
        headers = started.answer.headers()
        if stream:
            translator = MessagesStream(message_id, body["model"], started.answer.source, body.get("stop_sequences"))
            relay = self._path.relay(started, translator)
            return StreamingResponse(200, relay, headers=headers, push=relay.push)
        completion = await self._path.read(started)
        message = wire.message_object(completion, message_id, body["model"], body.get("stop_sequences"))
        return HttpResponse(200, orjson.dumps(message), headers=headers)

    async def count_tokens(self, request: HttpRequest, request_id: str) -> HttpResponse:
        """Counted with the model's tokenizer (the token bridge's catalog); an estimate, said so in
        `x-sits-token-count: estimate`, when none is loaded for it."""
        body = self._body(request, count_only=True)
        chat = wire.chat_request(body, False)
        entry = self._table().resolve(body["model"])
        if entry is None:
            raise ModelNotFound(f"model: the model '{body['model']}' does not exist", param="model")
        text = _prompt_text(chat)
        counter = self._tokenizers.counter_for(entry.name, entry.tokenizer_family)
        if counter is None:
            tokens, how = -(-len(text.encode()) // _CHARS_PER_TOKEN), b"estimate"
        else:
            tokens, how = await asyncio.to_thread(counter.count, text), b"exact"
        return HttpResponse(200, orjson.dumps({"input_tokens": tokens}), headers=[(b"x-sits-token-count", how)])

    @staticmethod
    def _body(request: HttpRequest, count_only: bool = False) -> dict[str, Any]:
        version = request.headers.get("anthropic-version")
        if version is None:
            raise InvalidRequest("anthropic-version: header is required", param="anthropic-version")
        if version not in _VERSIONS_SEEN:
            if not _VERSION.match(version):
                raise InvalidRequest(f"anthropic-version: {version!r} is not a version date such as 2023-06-01",
                                     param="anthropic-version")
            if len(_VERSIONS_SEEN) < _VERSIONS_KEPT:
                _VERSIONS_SEEN.add(version)
        if not request.body:
            raise InvalidRequest("request body is empty; expected a JSON object", param="body")
        try:
            body = orjson.loads(request.body)
        except orjson.JSONDecodeError as exc:
            raise InvalidRequest(f"request body is not valid JSON: {exc}", param="body") from None
        if count_only and isinstance(body, dict) and "max_tokens" not in body:
            body = {**body, "max_tokens": 1}  # count_tokens takes no max_tokens
        return wire.validate(body)


def _prompt_text(chat: dict[str, Any]) -> str:
    """What the model reads: each message's role and text, and the tool definitions."""
    parts = []
    for message in chat["messages"]:
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        calls = message.get("tool_calls")
        parts.append(f"{message['role']}: {content or ''}" + (orjson.dumps(calls).decode() if calls else ""))
    if chat.get("tools"):
        parts.append(orjson.dumps(chat["tools"]).decode())
    return "\n".join(parts)
