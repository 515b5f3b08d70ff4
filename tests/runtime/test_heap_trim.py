"""The heap trim gives back to the system the memory a burst freed: blocks freed in the middle of glibc's
heap (a survivor above them keeps the heap from shrinking by itself) are resident until `malloc_trim`."""

from __future__ import annotations

import asyncio
import gc
import weakref

from sits.runtime.heap_trim import HeapTrim, resident_bytes


def test_the_trim_gives_back_freed_blocks_that_a_survivor_kept_resident():
    trim = HeapTrim(30.0)
    assert trim.available  # glibc: this project's machines and containers
    blocks = [bytearray(4096) for _ in range(40_000)]  # ~160 MiB through malloc, not CPython's arenas
    survivors = blocks[::64]
    del blocks  # freed, but every 64th block still holds the pages around it in place
    before = resident_bytes()
    released = trim.trim_now()
    assert released > 64 << 20, f"gave back {released} bytes of {before}"
    assert trim.runs == 1 and trim.released_bytes == released
    assert len(survivors) == 625


def test_the_trim_runs_on_its_interval():
    calls: list[int] = []

    def fake_trim(pad: int) -> int:
        calls.append(pad)
        return 1

    async def run_a_while() -> None:
        trim = HeapTrim(0.01, fake_trim)
        task = asyncio.get_running_loop().create_task(trim.run())
        for _ in range(500):  # at most 5 s; due every 0.01 s
            if len(calls) >= 3:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        assert trim.runs >= 3

    asyncio.run(run_a_while())
    assert calls[:3] == [0, 0, 0]


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_each_run_first_frees_what_reference_cycles_hold():
    # Cycles left by a burst (a closed connection's objects, a cancelled task's frames) are garbage only
    # the collector frees; with its threshold raised and no allocation while idle, that may be never.
    gc.disable()
    try:
        pairs = []
        for _ in range(1000):
            a, b = _Node(), _Node()
            a.other, b.other = b, a
            pairs.append(weakref.ref(a))
        del a, b
        trim = HeapTrim(30.0)
        assert all(p() is not None for p in pairs)  # unreachable, but not freed by reference counting
        trim.trim_now()
        assert all(p() is None for p in pairs)
        assert trim.collected >= 2000
    finally:
        gc.enable()
