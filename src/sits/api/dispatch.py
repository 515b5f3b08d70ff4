"""Path dispatch for the gateway's HTTP edge, and the one place errors are rendered."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable

import orjson

from sits.api.error_responses import render_error
from sits.api.http_types import HttpRequest, HttpResponse, StreamingResponse
from sits.errors import MethodNotAllowed, NotFound, SitsError
from sits.telemetry.logging_setup import current_request_id, current_trace_id

log = logging.getLogger("sits.api")

_MAX_REQUEST_ID = 128

Route = Callable[[HttpRequest, str], Awaitable[HttpResponse | StreamingResponse]]
Renderer = Callable[[SitsError], HttpResponse]


class SerialIds:
    """Ids unique across gateway processes without a system call each: a random prefix per instance and a
    counter (they name a request or an answer; they guard nothing)."""

    __slots__ = ("_prefix", "_made")

    def __init__(self, prefix: str = "") -> None:
        self._prefix = prefix + os.urandom(6).hex() + "-"
        self._made = 0

    def next(self) -> str:
        self._made += 1
        # hex() and a slice, not an f-string's `:x`: compiled, that formats through two str.format calls
        return self._prefix + hex(self._made)[2:]


class RandomIds:
    """Ids that cannot be guessed (they name a stored resource): a prefix and `size` random bytes in hex,
    drawn from the system's random source for many ids at once rather than one system call each."""

    __slots__ = ("_prefix", "_size", "_pool", "_at", "_batch")

    def __init__(self, prefix: str, size: int, batch: int = 256) -> None:
        self._prefix = prefix
        self._size = size
        self._pool = b""
        self._at = 0
        self._batch = batch * size

    def next(self) -> str:
        at = self._at
        if at + self._size > len(self._pool):
            self._pool, at = os.urandom(self._batch), 0
        self._at = at + self._size
        return self._prefix + self._pool[at:at + self._size].hex()


class Dispatcher:
    """Maps (method, path) to a route; every answer carries x-request-id."""

    def __init__(self, routes: dict[tuple[str, str], Route], prefix_routes: dict[str, Route] | None = None,
                 before: Callable[[HttpRequest, str], None] | None = None,
                 renderers: dict[str, Renderer] | None = None) -> None:
        """`prefix_routes` serve every method below a path prefix (resources with ids in the path);
        `before` runs ahead of the data-plane routes (client authentication); `renderers` write the
        errors at a path and below it in that API's own shape (the rest are OpenAI-shaped), whoever
        raised them: the hook, the dispatch itself (404, 405) or the route."""
        self._routes = routes
        self._paths = {path for _, path in routes}
        self._prefix_routes = prefix_routes or {}
        self._before = before
        self._renderers = tuple((path, path + "/", render) for path, render in (renderers or {}).items())
        self._ids = SerialIds()

    def request_id_of(self, request: HttpRequest) -> str:
        """The client's x-request-id if it is safe to echo and forward, else a fresh one."""
        given = request.headers.get("x-request-id")
        if given and len(given) <= _MAX_REQUEST_ID and given.isascii() and given.isprintable():
            return given
        return self._ids.next()

    async def __call__(self, request: HttpRequest) -> HttpResponse | StreamingResponse:
        request_id = self.request_id_of(request)
        current_request_id.set(request_id)  # for log lines written while handling it
        current_trace_id.set(None)
        path = request.path.rstrip("/") or "/"
        route = self._routes.get((request.method, path))
        try:
            if route is None:
                route = next((r for p, r in self._prefix_routes.items() if path.startswith(p)), None)
            elif self._before is not None:
                self._before(request, path)
            if route is None:
                if path in self._paths:
                    allowed = ", ".join(sorted(m for m, p in self._routes if p == path))
                    raise MethodNotAllowed(f"{request.method} is not allowed on {path}; use {allowed}")
                raise NotFound(f"no route for {request.method} {path}")
            response = await route(request, request_id)
        except SitsError as exc:
            response = self._renderer(path)(exc)
        except Exception:
            log.exception("unexpected error on %s %s (request %s)", request.method, path, request_id)
            response = self._renderer(path)(SitsError("internal error; see the gateway log for request " + request_id))
        response.headers.append((b"x-request-id", request_id.encode()))
        return response

    def _renderer(self, path: str) -> Renderer:
        for exact, below, render in self._renderers:
            if path == exact or path.startswith(below):
                return render
        return render_error


def json_response(status: int, payload: object) -> HttpResponse:
    return HttpResponse(status, orjson.dumps(payload))
