"""Which model is resident on a GPU: switch between vLLM engines that share one, with sleep mode.

A switch puts the outgoing engines to sleep (level 1: weights offloaded to CPU memory, KV cache
dropped) and wakes the incoming ones, in that order so the GPU memory is free before it is
needed. Scheduling sees it through endpoint health: an engine stops getting new requests before
it is put to sleep (its in-flight requests may finish, within a bound) and gets traffic again
once it is awake. If waking fails, the outgoing engines are woken again: a failed switch leaves
the GPU with the model it had.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from sits.backends.vllm_admin import VllmAdmin
from sits.errors import InvalidRequest, NotFound, SitsError, UpstreamError, UpstreamProtocolError
from sits.state.endpoint_health import HealthBoard
from sits.state.endpoint_stats import StatsStore
from sits.state.routing_table import Endpoint, RoutingTable


@dataclass(frozen=True, slots=True)
class SwitchOutcome:
    slept: tuple[str, ...]
    woken: tuple[str, ...]
    drained: bool  # every outgoing engine finished its in-flight requests before sleeping
    seconds: float


class EngineResidency:
    def __init__(self, table: Callable[[], RoutingTable], admin: VllmAdmin, health: HealthBoard, stats: StatsStore,
                 clock: Callable[[], float]) -> None:
        self._table = table
        self._admin = admin
        self._health = health
        self._stats = stats
        self._clock = clock
        self._lock = asyncio.Lock()  # one switch at a time: two would fight over the same GPU

    async def switch(self, sleep_ids: list[str], wake_ids: list[str], level: int = 1,
                     drain_timeout_s: float = 30.0) -> SwitchOutcome:
        if level not in (1, 2):
            raise InvalidRequest("sleep level must be 1 (offload weights) or 2 (discard them)", param="level")
        if set(sleep_ids) & set(wake_ids):
            raise InvalidRequest("an endpoint cannot be put to sleep and woken in one switch", param="wake")
        async with self._lock:
            started = self._clock()
            outgoing, incoming = self._endpoints(sleep_ids, "sleep"), self._endpoints(wake_ids, "wake")
            for endpoint in outgoing:
                self._health.drain(endpoint.id)  # no new requests from here on
            drained = await self._drain(outgoing, drain_timeout_s)
            slept: list[Endpoint] = []
            try:
                for endpoint in outgoing:
                    await self._admin.sleep(endpoint, level)
                    slept.append(endpoint)
                for endpoint in incoming:
                    await self._admin.wake_up(endpoint)
                    if await self._admin.is_sleeping(endpoint):
                        raise UpstreamProtocolError(f"{endpoint.id} still reports is_sleeping after /wake_up")
            except SitsError as exc:
                await self._roll_back(slept, outgoing)
                # a 502 of our own: relaying the engine's status (a 404 from a server without sleep
                # mode) would read as if the switch route did not exist
                raise UpstreamError(f"switch failed and was rolled back: {exc.message}") from None
            for endpoint in incoming:
                self._health.track(endpoint.id, probed=False)  # ready: it just answered
            return SwitchOutcome(tuple(e.id for e in outgoing), tuple(e.id for e in incoming), drained,
                                 self._clock() - started)

    async def sleeping(self) -> dict[str, bool | str]:
        """Every endpoint's `/is_sleeping`, or why it could not say (not a vLLM engine in dev mode...)."""
        endpoints = [e for m in self._table().models.values() for e in m.endpoints]
        answers = await asyncio.gather(*(self._admin.is_sleeping(e) for e in endpoints), return_exceptions=True)
        return {e.id: (a if isinstance(a, bool) else getattr(a, "message", str(a)))
                for e, a in zip(endpoints, answers)}

    def _endpoints(self, ids: list[str], field: str) -> list[Endpoint]:
        by_id = {e.id: e for m in self._table().models.values() for e in m.endpoints}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise NotFound(f"no endpoint {', '.join(missing)}", param=field)
        return [by_id[i] for i in ids]

    async def _drain(self, endpoints: list[Endpoint], timeout_s: float) -> bool:
        deadline = self._clock() + timeout_s
        while any(self._stats.get(e.id).in_flight for e in endpoints):
            if self._clock() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def _roll_back(self, slept: list[Endpoint], outgoing: list[Endpoint]) -> None:
        for endpoint in slept:
            try:
                await self._admin.wake_up(endpoint)
            except SitsError:
                continue  # stays out of rotation: it is asleep and would fail every request
            self._health.track(endpoint.id, probed=False)
        for endpoint in outgoing:
            if endpoint not in slept:
                self._health.track(endpoint.id, probed=False)  # never put to sleep: back in rotation
