"""Liveness and readiness."""

from __future__ import annotations

from collections.abc import Callable

from sits.api.dispatch import json_response
from sits.api.http_types import HttpRequest, HttpResponse
from sits.hot_path import STATE as HOT_PATH


class HealthRoutes:
    def __init__(self, is_ready: Callable[[], tuple[bool, str]]) -> None:
        self._is_ready = is_ready

    async def healthz(self, request: HttpRequest, request_id: str) -> HttpResponse:
        # which build of the request path answers: compiled by mypyc, or its source (sits/hot_path.py)
        return json_response(200, {"status": "alive", "hot_path": HOT_PATH.describe()})

    async def readyz(self, request: HttpRequest, request_id: str) -> HttpResponse:
        ready, why = self._is_ready()
        return json_response(200 if ready else 503, {"status": "ready" if ready else "not ready", "reason": why})
