"""What reading a role event costs three ways, in the installed (compiled) chat reader: by a source's
learnt opening, parsed with nothing to learn, and parsed after a miss and learnt again (the cost the
relearning rule of `sits/translate/stream_opening.py` bounds). Wall time per event over a loop; run it
on a quiet machine, and compare the three figures of one run.

    python -m research.opening_cost
"""

from __future__ import annotations

import timeit

from sits.translate import stream_opening
from sits.translate.chat_stream import ChatStreamReader

_ROLE = (b'data: {"id":"chatcmpl-%b","object":"chat.completion.chunk","created":1733000000,"model":"m",%b'
         b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}'
         b'\n\n')
_LOOPS = 20_000


def per_event(source: str, event_of: object, first_miss: bool = False) -> float:
    """Microseconds a reader of `source` takes for its first event; `first_miss`: each miss is the first
    of its run (so the opening is learnt again each time)."""
    events = iter([event_of(n) for n in range(_LOOPS)])  # type: ignore[operator]
    misses = stream_opening.MISSES

    def one() -> None:
        if first_miss:
            misses.clear()
        ChatStreamReader(source).feed(next(events))
    return timeit.timeit(one, number=_LOOPS) / _LOOPS * 1e6


def main() -> None:
    stream_opening.OPENINGS.clear()
    stream_opening.MISSES.clear()
    ChatStreamReader("hit").feed(_ROLE % (b"0", b""))
    hit = per_event("hit", lambda n: _ROLE % (b"%d" % n, b""))
    parsed = per_event("parse", lambda n: _ROLE % (b"a\\/%d" % n, b""))  # an escape in the id: never learnt
    # a field that changes per stream: every role event misses the opening, and is learnt again
    relearned = per_event("vary", lambda n: _ROLE % (b"1", b'"system_fingerprint":"fp%d",' % n), first_miss=True)
    print(f"role event read by the opening: {hit:.2f} us; parsed: {parsed:.2f} us; "
          f"parsed and learnt again after a miss: {relearned:.2f} us")


if __name__ == "__main__":
    main()
