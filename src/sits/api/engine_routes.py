"""Engine control (admin key required): which model is resident on a shared GPU.

    POST /v1/engines/switch   {"sleep": [endpoint ids], "wake": [endpoint ids], "level": 1, "drain_timeout_s": 30}
    GET  /v1/engines/sleeping every endpoint's vLLM sleep state (or why it has none)
"""

from __future__ import annotations

from typing import Annotated

import orjson
from pydantic import BaseModel, ConfigDict, Field

from sits.api.auth import AdminGuard
from sits.api.http_types import HttpRequest, HttpResponse
from sits.api.body_schema import parse_body
from sits.control.engine_residency import EngineResidency

SWITCH = "/v1/engines/switch"
SLEEPING = "/v1/engines/sleeping"

EndpointId = Annotated[str, Field(min_length=1, max_length=256)]


class EngineSwitch(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    sleep: list[EndpointId] = []
    wake: list[EndpointId] = []
    level: Annotated[int, Field(ge=1, le=2)] = 1
    drain_timeout_s: Annotated[float, Field(ge=0, le=600)] = 30.0


class EngineRoutes:
    def __init__(self, residency: EngineResidency, guard: AdminGuard) -> None:
        self._residency = residency
        self._guard = guard

    async def switch(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        body = parse_body(EngineSwitch, request.body)
        outcome = await self._residency.switch(body.sleep, body.wake, body.level, body.drain_timeout_s)
        return HttpResponse(200, orjson.dumps({"slept": outcome.slept, "woken": outcome.woken,
                                               "drained": outcome.drained, "seconds": round(outcome.seconds, 3)}))

    async def sleeping(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        return HttpResponse(200, orjson.dumps({"endpoints": await self._residency.sleeping()}))
