"""Stopping background tasks."""

from __future__ import annotations

import asyncio

from sits.runtime.tasks import cancel_and_wait


async def test_every_task_is_cancelled_and_has_unwound_when_it_returns():
    unwound: list[str] = []

    async def loop(name: str) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0)  # cleanup that itself awaits
            unwound.append(name)

    tasks = [asyncio.create_task(loop(n)) for n in ("a", "b")]
    await asyncio.sleep(0)
    await cancel_and_wait(tasks)
    assert sorted(unwound) == ["a", "b"] and all(t.cancelled() for t in tasks)
    await cancel_and_wait([])  # nothing to stop is fine
