"""Liveness and readiness."""

from __future__ import annotations

from collections.abc import Callable

from sits.api.dispatch import json_response
from sits.api.http_types import HttpRequest, HttpResponse


class HealthRoutes:
    def __init__(self, is_ready: Callable[[], tuple[bool, str]], hot_path: str = "") -> None:
        """`hot_path`: which build of the request path answers, compiled or its source (sits/hot_path.py)."""
        self._is_ready = is_ready
        self._hot_path = hot_path

    async def healthz(self, request: HttpRequest, request_id: str) -> HttpResponse:
        return json_response(200, {"status": "alive", "hot_path": self._hot_path})

    async def readyz(self, request: HttpRequest, request_id: str) -> HttpResponse:
        ready, why = self._is_ready()
        return json_response(200 if ready else 503, {"status": "ready" if ready else "not ready", "reason": why})
