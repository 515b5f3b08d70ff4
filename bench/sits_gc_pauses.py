"""Diagnostic only: run `sits` with a hook on the cyclic garbage collector, to see its passes.

Takes the CLI's arguments (`python bench/sits_gc_pauses.py serve ...`). Each collection after startup
is counted by generation with the objects it freed and the time it took; when the process exits
(Ctrl-C or SIGTERM: `sits serve` stops gracefully) the tally goes to stderr as one JSON line,
`GC_PAUSES {...}`. A request path that leaves nothing for the collector shows no pass under load;
one that leaves reference cycles shows generation-0 passes of thousands of objects.
"""

from __future__ import annotations

import atexit
import gc
import sys
import time

import orjson

_started: list[float] = []
_tally: dict[int, dict[str, float]] = {}
_watching = [False]


def _on_collection(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _started[:] = [time.perf_counter()]
        return
    if not _watching[0] or not _started:
        return
    ms = (time.perf_counter() - _started[0]) * 1000
    row = _tally.setdefault(info["generation"], {"passes": 0, "collected": 0, "total_ms": 0.0, "max_ms": 0.0})
    row["passes"] += 1
    row["collected"] += info["collected"]
    row["total_ms"] = round(row["total_ms"] + ms, 3)
    row["max_ms"] = round(max(row["max_ms"], ms), 3)


def _report() -> None:
    sys.stderr.write("GC_PAUSES " + orjson.dumps({f"gen{g}": row for g, row in sorted(_tally.items())}).decode()
                     + "\n")


gc.callbacks.append(_on_collection)
atexit.register(_report)

from sits import serve  # noqa: E402
from sits.cli import main  # noqa: E402

_freeze = serve.freeze_startup_heap


def _freeze_then_watch() -> None:
    """Counting starts where serving does: after the startup heap is frozen."""
    _freeze()
    _watching[0] = True


serve.freeze_startup_heap = _freeze_then_watch
sys.exit(main(sys.argv[1:]))
