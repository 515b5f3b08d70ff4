"""The parts a gateway runs for its whole life, started in one loop and stopped in the reverse order."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from sits.runtime.tasks import cancel_and_wait


class Runnable(Protocol):
    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class BackgroundTask:
    """A coroutine run as one task; stopping cancels it and waits for it to unwind."""

    def __init__(self, name: str, run: Callable[[], Awaitable[object]]) -> None:
        self.name = name
        self._run = run
        self._task: asyncio.Task[object] | None = None

    async def start(self) -> None:
        async def run() -> object:  # a task needs a coroutine; `run` may return any awaitable
            return await self._run()

        self._task = asyncio.get_running_loop().create_task(run(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait([task])  # type: ignore[list-item]

    async def finished(self) -> None:
        """Wait until the task has run to its end (one that is never started counts as finished)."""
        if self._task is not None:
            await asyncio.shield(self._task)


class Started(Protocol):
    def start(self) -> None: ...

    async def stop(self) -> None: ...


class SyncStart:
    """A part whose start is synchronous (it schedules its own task) as a runnable."""

    def __init__(self, name: str, part: Started) -> None:
        self.name = name
        self._part = part

    async def start(self) -> None:
        self._part.start()

    async def stop(self) -> None:
        await self._part.stop()
