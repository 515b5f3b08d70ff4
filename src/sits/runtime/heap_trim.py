"""Give back to the system the heap that a burst freed.

A burst of client connections allocates buffers and objects for each; when they close, CPython and
glibc's malloc keep the freed memory mapped for reuse, so resident memory stays at the burst's
high-water mark though nothing holds it (what a soak sees as growth in steps, `bench/soak.py`). glibc's
`malloc_trim(0)` returns every free page of its heaps to the system, not only the top of each heap.

What reference cycles a burst left (a cancelled task's exception and the frames it holds, a closed
connection's objects) is not free yet: with the collector's first threshold raised
(`runtime/gc_tuning.py`) and no allocation while idle, it can wait for a full collection for a long
time. So each run first collects every generation (the startup heap is frozen, out of its scan), then
trims. Run now and then, on the event loop (it takes the allocator's locks either way); elsewhere than
glibc the trim is skipped and only the collection runs.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import os
import time
from collections.abc import Callable

log = logging.getLogger("sits.heap")

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


def resident_bytes() -> int:
    """This process's resident memory, from /proc (0 where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


class HeapTrim:
    """Every `interval_s`, a full collection and `malloc_trim(0)`; counts what they gave back
    (`released_bytes`, `runs`, `collected`: unreachable objects the collections found)."""

    def __init__(self, interval_s: float, trim: Callable[[int], int] | None = None) -> None:
        self.interval_s = interval_s
        self._trim = trim if trim is not None else _malloc_trim()
        self.runs = 0
        self.released_bytes = 0
        self.seconds = 0.0  # time spent collecting and trimming, all runs together
        self.collected = 0

    @property
    def available(self) -> bool:
        return self._trim is not None

    def trim_now(self) -> int:
        """Collect, then trim once; the resident bytes given back (0 when none, or not measurable)."""
        before, started = resident_bytes(), time.perf_counter()
        self.collected += gc.collect()
        if self._trim is not None:
            self._trim(0)
        self.seconds += time.perf_counter() - started
        released = max(0, before - resident_bytes())
        self.runs += 1
        self.released_bytes += released
        if released >= 1 << 20:
            log.debug("heap trim gave back %.1f MiB", released / (1 << 20))
        return released

    async def run(self) -> None:
        """Trim every `interval_s`, for the gateway's life (a `BackgroundTask`)."""
        while True:
            await asyncio.sleep(self.interval_s)
            self.trim_now()
