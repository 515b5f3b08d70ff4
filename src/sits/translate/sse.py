"""Server-sent events in and out: split relayed bytes into events (chunks may cut them anywhere), and
write named events."""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import orjson

from sits.errors import UpstreamProtocolError

MAX_LINE = 4 * 1024 * 1024  # one event's bytes; a longer line is a broken stream, not a big answer
DONE = b"[DONE]"
_FIELDS: Final = (b"data:", b":", b"event:", b"id:", b"retry:")
_NEWLINE: Final = 10  # tested for by value: `10 in data` is a memchr
SHORT_READ: Final = 2048  # a token's event is shorter: copied and tested in one memchr, cheaper than a search call


def one_event(chunk: bytes) -> bool:
    """Whether `chunk` is one whole event of one JSON `data:` line, after an `event:` line or not: how a
    model server writes each token (chat servers without a name, Responses-API servers with one). Tests
    compiled to direct calls and a memchr: `bytes.find` is a generic call that parses a tuple of
    arguments, several times the cost."""
    if not chunk.startswith(b"data: {"):
        if not chunk.startswith(b"event:"):
            return False
        chunk = chunk.partition(b"\n")[2]  # the line after the name (an `event:` line holds any text)
        if not chunk.startswith(b"data: {"):
            return False
    if len(chunk) > SHORT_READ:  # a read of many events: searched to its first line end, not copied whole
        return chunk.find(b"\n") == len(chunk) - 2 and chunk[-1] == _NEWLINE
    return chunk.endswith(b"\n\n") and _NEWLINE not in chunk[:-2]


def refuse_malformed(lines: bytes, source: str) -> None:
    """Raise UpstreamProtocolError naming the first line of `lines` (complete lines) that is not an SSE
    field, or a `data:` line that is neither a JSON object nor `[DONE]`. JSON bodies are not parsed: only
    their first byte is read. The one check of the relayed SSE framing: the exchange's guard runs it on
    what it cannot pass at a glance, a translating reader on the events it cannot read by their bytes."""
    for line in lines.split(b"\n"):
        if not _well_formed(line):
            raise _malformed(line, source)


def _well_formed(line: bytes) -> bool:
    """A blank line, an SSE field, or a `data:` line of a JSON object or `[DONE]` (a line end's CR kept)."""
    if not line or line == b"\r":
        return True
    if line.startswith(b"data:"):
        payload = line[5:].lstrip()
        return payload[:1] == b"{" or payload.startswith(DONE)
    return line.startswith(_FIELDS)


def _malformed(line: bytes, source: str) -> UpstreamProtocolError:
    shown = line[:80].decode("utf-8", "replace")
    return UpstreamProtocolError(f"upstream {source} sent a malformed SSE line: {shown!r}")


class SseEvent(NamedTuple):
    name: str  # "" when the event had no `event:` line
    data: bytes  # the `data:` lines joined by newlines


class SseSplitter:
    """Feed byte chunks, get the complete events so far. `strict`: a malformed line (`refuse_malformed`)
    raises UpstreamProtocolError instead of being skipped."""

    __slots__ = ("_partial", "_name", "_data", "_source", "_strict")

    def __init__(self, source: str = "upstream", strict: bool = False) -> None:
        self._partial = b""
        self._name = ""
        self._data: list[bytes] = []
        self._source = source
        self._strict = strict

    @property
    def source(self) -> str:
        return self._source

    def feed(self, chunk: bytes) -> list[SseEvent]:
        data = self._partial + chunk if self._partial else chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE:
            raise UpstreamProtocolError(f"upstream {self._source} sent an SSE line over {MAX_LINE} bytes")
        events = []
        strict = self._strict
        for line in lines:
            if strict and not _well_formed(line):
                raise _malformed(line, self._source)
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


DONE_EVENT: Final = b"data: [DONE]\n\n"  # how every chat stream ends


# The decimals a stream's sequence numbers and indices mostly are, written once: a lookup instead of a
# str() and an encode() per event.
_DECIMALS: Final = tuple(b"%d" % n for n in range(4096))


def decimal(number: int) -> bytes:
    if 0 <= number < 4096:
        return _DECIMALS[number]
    return str(number).encode()
