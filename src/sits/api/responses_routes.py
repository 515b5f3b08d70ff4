"""The OpenAI Responses API (docs/responses-and-messages.md).

    POST   /v1/responses                       create (JSON or a stream of Responses events)
    GET    /v1/responses/{id}                  a stored response
    DELETE /v1/responses/{id}                  forget it
    GET    /v1/responses/{id}/input_items      what it was asked

A create is translated to a chat completion (`sits.translate.responses`) and goes the one request
path (`api/surface_path.py`); an endpoint that declares `api: responses` is sent the client's own body
instead and its answer relayed unchanged (`sits.translate.responses_passthrough`). With `store` (the
default) the response, its input items and the conversation so far (in chat form) are kept in the
response store, so `previous_response_id` works on any replica that shares it. A
`previous_response_id` the store does not know is left in the body for such an endpoint to continue;
any other endpoint answers it 404.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

import orjson

from sits.api.auth import DataPlaneKeys
from sits.api.dispatch import RandomIds
from sits.api.http_types import HttpRequest, HttpResponse, StreamingResponse
from sits.api.surface_path import Started, SurfacePath, passed_through
from sits.errors import InvalidRequest, MethodNotAllowed, NotFound, SitsError
from sits.pipeline.context import Passthrough
from sits.state.response_store import ResponseStore
from sits.translate import responses as wire
from sits.translate import responses_passthrough as passthrough
from sits.translate.responses_stream import ResponsesStream
from sits.tuples import new_tuple

log = logging.getLogger("sits.responses")
PATH = "/v1/responses"
PREFIX = "/v1/responses/"
INPUT_ITEMS = "/input_items"


_RESPONSE_IDS: Final = RandomIds("resp_", 12)


def new_response_id() -> str:
    """A response id: the key the response is stored under, so it cannot be guessed."""
    return _RESPONSE_IDS.next()


class ResponsesRoutes:
    def __init__(self, path: SurfacePath, store: ResponseStore, keys: DataPlaneKeys, max_record_bytes: int) -> None:
        self._path = path
        self._store = store
        self._keys = keys
        self._max_record_bytes = max_record_bytes

    async def create(self, request: HttpRequest, request_id: str) -> HttpResponse | StreamingResponse:
        try:
            body = wire.validate(_json(request.body))
            stream = body.get("stream") is True
            previous = body.get("previous_response_id")
            history = await self._history(previous) if previous is not None else None  # no coroutine when none
            chat, items = wire.chat_request(body, history or [], stream)
            # Every field, in order, without the named tuple's own __new__ (sits/tuples.py)
            own = new_tuple(Passthrough, (passthrough.upstream_body(request.body, body, history if previous else None),
                                          previous if previous is not None and history is None else None))
        except SitsError as exc:
            self._path.bad_input(exc)
            raise
        started = await self._path.run(request, request_id, "/responses", chat, stream, own)
        store = body.get("store", True) is not False
        asked = chat["messages"][1:] if body.get("instructions") else chat["messages"]  # history + this input
        if passed_through(started.answer):
            return await self._relayed(started, stream, store, items, asked)
        response_id, created = new_response_id(), int(time.time())
        headers = started.answer.headers()
        if stream:
            translator = ResponsesStream(response_id, created, body, started.answer.source)

            async def keep() -> None:
                try:
                    result = translator.result
                    if result is not None:
                        await self._keep(response_id, *result, items, asked)
                except SitsError as exc:  # the answer is streaming already: it is not held back
                    log.warning("response %s was not stored: %s", response_id, exc.message)

            # not stored: nothing to wait for before the stream's last events
            relay = self._path.relay(started, translator, keep if store else None)
            return StreamingResponse(200, relay, headers=headers, push=relay.push)
        completion = await self._path.read(started)
        payload, message = wire.from_chat_completion(completion, response_id, created, body)
        if store:
            await self._keep(response_id, payload, message, items, asked)
        return HttpResponse(200, payload, headers=headers)

    async def _relayed(self, started: Started, stream: bool, store: bool, items: list[dict[str, Any]],
                       asked: list[dict[str, Any]]) -> HttpResponse | StreamingResponse:
        """An upstream that speaks the Responses API answered: its answer goes to the client as it came,
        and is stored under the upstream's own response id (so the next turn finds it on any replica)."""
        headers = started.answer.headers()

        async def keep(response: dict[str, Any]) -> None:
            response_id = response.get("id")
            if not store or not isinstance(response_id, str) or not response_id:
                return
            try:
                await self._keep(response_id, orjson.dumps(response), passthrough.said(response), items, asked)
            except SitsError as exc:  # the answer is on its way already: it is not held back
                log.warning("response %s was not stored: %s", response_id, exc.message)

        if stream:
            relay = self._path.relay_passthrough(started, keep)
            return StreamingResponse(200, relay, headers=headers, push=relay.push)
        payload, parsed = await self._path.read_passthrough(started)
        response_id = parsed.get("id") if isinstance(parsed, dict) else None
        if store and isinstance(response_id, str) and parsed.get("status") in ("completed", "incomplete"):
            await self._keep(response_id, payload, passthrough.said(parsed), items, asked)
        return HttpResponse(200, payload, headers=headers)

    async def resource(self, request: HttpRequest, request_id: str) -> HttpResponse:
        """GET / DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items."""
        if self._keys.enabled:
            self._keys.check(request)
        rest = request.path.split("?", 1)[0][len(PREFIX):].rstrip("/")
        response_id, _, sub = rest.partition("/")
        if not response_id or (sub and "/" + sub != INPUT_ITEMS):
            raise NotFound(f"no route for {request.method} {request.path}")
        if request.method == "DELETE" and not sub:
            if not await self._store.delete(response_id):
                raise _missing(response_id, "response_id")
            return HttpResponse(200, orjson.dumps({"id": response_id, "object": "response.deleted", "deleted": True}))
        if request.method != "GET":
            raise MethodNotAllowed(f"{request.method} is not allowed on {request.path}; use GET"
                                   + ("" if sub else " or DELETE"))
        record = await self._record(response_id, "response_id")
        if not sub:
            return HttpResponse(200, orjson.dumps(record["response"]))
        data = record["input_items"]
        page = {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None, "has_more": False}
        return HttpResponse(200, orjson.dumps(page))

    async def _history(self, previous: str | None) -> list[dict[str, Any]] | None:
        """The stored conversation `previous` continues; None when there is none or the store does not know
        it (then only an upstream that speaks the Responses API may continue it)."""
        if previous is None:
            return None
        raw = await self._store.get(previous)
        return list(orjson.loads(raw)["conversation"]) if raw is not None else None

    async def _record(self, response_id: str, param: str) -> dict[str, Any]:
        raw = await self._store.get(response_id)
        if raw is None:
            raise _missing(response_id, param)
        return orjson.loads(raw)  # type: ignore[no-any-return]

    async def _keep(self, response_id: str, response: bytes, said: dict[str, Any], items: list[dict[str, Any]],
                    asked: list[dict[str, Any]]) -> None:
        """Store the response (its JSON as the client got it, spliced in as it is), its input items and
        the conversation so far, with the answer as a chat message (`said`)."""
        numbered = [{"id": item.get("id") or f"item_{response_id[5:]}_{i}", **item} for i, item in enumerate(items)]
        record = b"".join((b'{"response":', response, b',"input_items":', orjson.dumps(numbered),
                           b',"conversation":', orjson.dumps([*asked, said]), b"}"))
        if len(record) <= self._max_record_bytes:
            await self._store.put(response_id, record)


def _json(raw: bytes) -> Any:
    if not raw:
        raise InvalidRequest("request body is empty; expected a JSON object", param="body")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}", param="body") from None


def _missing(response_id: str, param: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found (it was not stored, was deleted, or expired).",
                    param=param)
