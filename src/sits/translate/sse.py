"""Server-sent events in and out: split relayed bytes into events (chunks may cut them anywhere), and
write named events."""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import orjson

from sits.errors import UpstreamProtocolError

MAX_LINE = 4 * 1024 * 1024  # one event's bytes; a longer line is a broken stream, not a big answer
DONE = b"[DONE]"


class SseEvent(NamedTuple):
    name: str  # "" when the event had no `event:` line
    data: bytes  # the `data:` lines joined by newlines


class SseSplitter:
    """Feed byte chunks, get the complete events so far."""

    __slots__ = ("_partial", "_name", "_data", "_source")

    def __init__(self, source: str = "upstream") -> None:
        self._partial = b""
        self._name = ""
        self._data: list[bytes] = []
        self._source = source

    def feed(self, chunk: bytes) -> list[SseEvent]:
        data = self._partial + chunk if self._partial else chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE:
            raise UpstreamProtocolError(f"upstream {self._source} sent an SSE line over {MAX_LINE} bytes")
        events = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data or self._name:
                    events.append(SseEvent(self._name, b"\n".join(self._data)))
                    self._name, self._data = "", []
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
            elif line.startswith(b"event:"):
                self._name = line[6:].strip().decode("utf-8", "replace")
            # comments (":") and other fields are skipped
        return events

    def between_events(self) -> bool:
        """Nothing of an event is held: the bytes fed so far ended with a complete event."""
        return not self._partial and not self._data and not self._name

    def end(self) -> list[SseEvent]:
        """An event the stream did not close with a blank line (some servers end that way)."""
        rest = self.feed(b"\n\n") if (self._partial or self._data) else []
        return rest


def named_event(name: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def data_event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


DONE_EVENT = b"data: [DONE]\n\n"


# The decimals a stream's sequence numbers and indices mostly are, written once: a lookup instead of a
# str() and an encode() per event.
_DECIMALS: Final = tuple(b"%d" % n for n in range(4096))


def decimal(number: int) -> bytes:
    if 0 <= number < 4096:
        return _DECIMALS[number]
    return str(number).encode()
