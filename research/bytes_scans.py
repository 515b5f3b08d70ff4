"""Wall time of the byte scans the stream path chose between (research/hot-path-log.md, "A stream that
comes whole with its head"): a read of the bench upstream's nine events and one token's event.

    python -m research.bytes_scans

timeit, best of five; the instruction counts quoted beside these in the log come from callgrind
profiles of the gateway (`bench_instructions.py --keep-callgrind`), not from here.
"""

from __future__ import annotations

import re
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from fast_upstream import DEFAULT_TOKENS, stream_events  # noqa: E402

_READ = b"".join(b"data: " + e + b"\n\n" for e in stream_events(list(DEFAULT_TOKENS)))
_EVENT = b"data: " + stream_events(list(DEFAULT_TOKENS))[2] + b"\n\n"
_DONE_AT_END = b"\n\ndata: [DONE]\n\n"
_USAGE = re.compile(rb'"usage":\{')


def split_at_blank_lines(data: bytes) -> bool:
    """The check before: a piece per event, a prefix test each, a join and a search for a line end."""
    events = data.split(b"\n\n")
    return all(e.startswith((b"data: {", b"data: [DONE]")) for e in events[:-1]) and \
        b"".join(events).find(b"\n") < 0


def count_line_ends(data: bytes) -> bool:
    """Counting: every line end must belong to an event boundary."""
    line_ends, starts = data.count(b"\n"), data.count(b"\n\ndata: {")
    return line_ends == 2 * starts + 2 or (line_ends == 2 * starts + 4 and data[-16:] == _DONE_AT_END)


def split_at_next_event(data: bytes) -> bool:
    """The check kept: one split at each next event's start, a join, one memchr."""
    rest = b"".join(data.split(b"\n\ndata: {"))
    first_end = rest.find(b"\n")
    return first_end == len(rest) - 2 or (first_end == len(rest) - 16 and rest[-16:] == _DONE_AT_END)


CASES = {
    "nine events: split at blank lines": lambda: split_at_blank_lines(_READ),
    "nine events: count line ends": lambda: count_line_ends(_READ),
    "nine events: split at the next event's start": lambda: split_at_next_event(_READ),
    "nine events: find usage (absent)": lambda: _READ.find(b'"usage":{'),
    "nine events: rfind usage (absent)": lambda: _READ.rfind(b'"usage":{'),
    "one event: rfind usage": lambda: _EVENT.rfind(b'"usage":{'),
    "one event: regex search usage": lambda: _USAGE.search(_EVENT),
}


def main() -> int:
    assert split_at_blank_lines(_READ) and count_line_ends(_READ) and split_at_next_event(_READ)
    print(f"a read of {len(_READ)} bytes, an event of {len(_EVENT)}")
    for name, case in CASES.items():
        best = min(timeit.repeat(case, number=100_000, repeat=5)) * 10  # µs per call
        print(f"{best:8.3f} µs  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
