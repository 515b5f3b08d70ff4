"""How much of the host's memory an embedded worker holds, for the scheduler's memory-pressure signal.

Linux's /proc only; elsewhere the ratio is unknown (None), which never filters an endpoint out.
"""

from __future__ import annotations

import os
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes(statm: Path = Path("/proc/self/statm")) -> int | None:
    try:
        return int(statm.read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


def available_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        return None
    return None


def memory_usage_ratio(resident: int | None, available: int | None) -> float | None:
    """The worker's resident memory against what it holds plus what the host still has free: near 1
    when the host is about to run out with this worker the main holder, near 0 with room to spare."""
    if resident is None or available is None or resident + available <= 0:
        return None
    return resident / (resident + available)
