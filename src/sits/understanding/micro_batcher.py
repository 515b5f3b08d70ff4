"""Micro-batching of concurrent embedding requests, run on one worker thread.

Requests arriving while a batch is being computed queue up and go together in the next
batch, so under load the per-item cost drops to the batched rate, and the event loop
never runs model code. Each caller awaits only its own row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

EmbedFn = Callable[[Sequence[str]], np.ndarray]


class MicroBatcher:
    def __init__(self, embed: EmbedFn, max_batch: int = 32, max_wait_s: float = 0.001) -> None:
        self._embed = embed
        self._max_batch = max_batch
        self._max_wait_s = max_wait_s
        self._queue: asyncio.Queue[tuple[str, asyncio.Future[np.ndarray]]] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self.batches = 0  # how many batches ran; for tests and metrics

    async def start(self) -> None:
        if self._worker is not None:
            return
        self._queue = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sits-embed")
        self._worker = asyncio.create_task(self._run(), name="sits-embed-batcher")

    async def aclose(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None
        if self._queue is not None:
            while not self._queue.empty():
                _, fut = self._queue.get_nowait()
                if not fut.done():
                    fut.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def embed(self, text: str) -> np.ndarray:
        """One row of the batch `text` lands in. Cancelling the caller does not disturb the batch."""
        if self._queue is None:
            raise RuntimeError("MicroBatcher.start() was not awaited")
        fut: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        await self._queue.put((text, fut))
        return await fut

    async def _run(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            if self._max_wait_s > 0:
                await asyncio.sleep(self._max_wait_s)  # let concurrent callers join this batch
            while len(batch) < self._max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            live = [(t, f) for t, f in batch if not f.done()]  # callers that timed out are skipped
            if not live:
                continue
            try:
                rows = await loop.run_in_executor(self._executor, self._embed, [t for t, _ in live])
            except Exception as exc:  # a model failure fails this batch's callers, not the worker
                for _, f in live:
                    if not f.done():
                        f.set_exception(exc)
                continue
            self.batches += 1
            for (_, f), row in zip(live, rows):
                if not f.done():
                    f.set_result(row)
