"""A cheap framing check on relayed SSE: every line must be an SSE field, every `data:` a JSON
object or `[DONE]`. A malformed event ends the stream with a clear error instead of reaching the
client as garbage its SDK cannot parse. JSON bodies are not parsed: only their first byte is read.
"""

from __future__ import annotations

from collections.abc import Callable

from sits.errors import SitsError, UpstreamProtocolError
from sits.translate.sse import DONE_EVENT, SHORT_READ, one_event, refuse_malformed

_MAX_LINE = 4 * 1024 * 1024


class SseGuard:
    __slots__ = ("_partial", "_source", "_deliver", "_broken", "_consumer_checks")

    def __init__(self, source: str) -> None:
        self._partial = b""
        self._source = source
        self._deliver: Callable[[bytes], bool] = _unset
        self._broken: Callable[[SitsError], None] = _unset_broken
        self._consumer_checks = False

    def forward_to(self, deliver: Callable[[bytes], bool], broken: Callable[[SitsError], None],
                   consumer_checks: bool = False) -> None:
        """For `relay`: where checked chunks go, and who hears of a malformed one. `consumer_checks`: the
        consumer splits the stream into events and refuses malformed ones itself (a translating reader,
        `translate/chat_stream.py`), so `relay` passes chunks on unchecked rather than split them twice."""
        self._deliver, self._broken, self._consumer_checks = deliver, broken, consumer_checks

    def detach(self) -> None:
        """Forget the consumer once the stream ended: it holds the exchange that holds this guard, and
        that cycle would otherwise leave every relayed stream to the cyclic garbage collector."""
        self._deliver, self._broken = _unset, _unset_broken

    def relay(self, chunk: bytes) -> bool:
        """Check `chunk` and pass it on (a pushed stream's per-event path: one call, not two); a
        malformed chunk, or one its consumer refuses (SitsError), goes to `broken` instead, and the
        producer is told to stop (True)."""
        if not self._consumer_checks and (self._partial or not one_event(chunk)):
            try:
                self.check(chunk)  # anything but one whole one-line JSON event
            except UpstreamProtocolError as exc:
                self._broken(exc)
                return True
        try:
            return self._deliver(chunk)
        except SitsError as exc:  # the consumer could not take the chunk (a translated stream's bad event)
            self._broken(exc)
            return True

    def check_first_event(self, chunk: bytes) -> None:
        """Raise UpstreamProtocolError when a stream's first chunk opens with a malformed line: its first
        event, or its complete lines when it holds no whole event (what decides whether the stream can
        still fall back, where its reader checks the rest). Keeps no state: `check` starts afresh."""
        if len(chunk) <= SHORT_READ and one_event(chunk):
            return  # the usual first chunk (a long read is told below, with one search instead of two)
        line_end = chunk.find(b"\n")
        if line_end < 0:
            return  # no complete line yet
        if chunk.startswith(b"data: {") and (line_end == len(chunk) - 1 or chunk[line_end + 1] == 10):  # 10: "\n"
            return  # a first event of one JSON data line (a read of many events: the rest is the reader's)
        end = chunk.find(b"\n\n")
        refuse_malformed(chunk[:end + 1] if end >= 0 else chunk[:chunk.rfind(b"\n") + 1], self._source)

    def check(self, chunk: bytes) -> None:
        """Raise UpstreamProtocolError at the first malformed line; partial lines wait for the next chunk."""
        if not self._partial and one_event(chunk):
            return  # the usual chunk from a model server streaming tokens: one whole JSON event
        data = self._partial + chunk if self._partial else chunk
        if _whole_events(data):  # a read of several whole events (a stream written faster than read)
            self._partial = b""
            return
        complete = data.rfind(b"\n") + 1
        self._partial = data[complete:]
        if len(self._partial) > _MAX_LINE:
            raise UpstreamProtocolError(f"upstream {self._source} sent an SSE line over {_MAX_LINE} bytes")
        if complete:
            refuse_malformed(data[:complete], self._source)


def _whole_events(data: bytes) -> bool:
    """Whether `data` is whole events of one `data:` line each, JSON objects, the last one possibly
    `[DONE]`, and nothing else. Each event after the first starts after a `\\n\\ndata: {`: with those
    taken out, the only line ends left must be the last event's (and `[DONE]`'s). One split, one join
    and one memchr, where a split at every blank line and a test per event cost twice as much
    (`research/hot-path-log.md`). Anything else (`[DONE]` mid-read, `data:{`, other fields) is left to
    the line-by-line check, which decides the same."""
    if data[-2:] != b"\n\n" or data[:7] != b"data: {":
        return False
    rest = b"".join(data.split(b"\n\ndata: {"))
    first_end = rest.find(b"\n")
    size = len(rest)
    return first_end == size - 2 or (first_end == size - 16 and rest[-16:] == _DONE_AT_END)


_DONE_AT_END = b"\n\n" + DONE_EVENT


def _unset(_: object) -> bool:
    raise RuntimeError("SseGuard.relay before forward_to")


def _unset_broken(_: SitsError) -> None:
    raise RuntimeError("SseGuard.relay before forward_to")
