"""A cheap framing check on relayed SSE: every line must be an SSE field, every `data:` a JSON
object or `[DONE]`. A malformed event ends the stream with a clear error instead of reaching the
client as garbage its SDK cannot parse. JSON bodies are not parsed: only their first byte is read.
"""

from __future__ import annotations

from collections.abc import Callable

from sits.errors import SitsError, UpstreamProtocolError

_FIELDS = (b"data:", b":", b"event:", b"id:", b"retry:")
_MAX_LINE = 4 * 1024 * 1024



class SseGuard:
    __slots__ = ("_partial", "_source", "_deliver", "_broken")

    def __init__(self, source: str) -> None:
        self._partial = b""
        self._source = source
        self._deliver: Callable[[bytes], bool] = _unset
        self._broken: Callable[[SitsError], None] = _unset_broken

    def forward_to(self, deliver: Callable[[bytes], bool], broken: Callable[[SitsError], None]) -> None:
        """For `relay`: where checked chunks go, and who hears of a malformed one."""
        self._deliver, self._broken = deliver, broken

    def detach(self) -> None:
        """Forget the consumer once the stream ended: it holds the exchange that holds this guard, and
        that cycle would otherwise leave every relayed stream to the cyclic garbage collector."""
        self._deliver, self._broken = _unset, _unset_broken

    def relay(self, chunk: bytes) -> bool:
        """Check `chunk` and pass it on (a pushed stream's per-event path: one call, not two); a
        malformed chunk, or one its consumer refuses (SitsError), goes to `broken` instead, and the
        producer is told to stop (True)."""
        if self._partial or not chunk.startswith(b"data: {") or chunk.find(b"\n") != len(chunk) - 2 \
                or chunk[-1] != 10:  # 10: "\n"
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

    def check(self, chunk: bytes) -> None:
        """Raise UpstreamProtocolError at the first malformed line; partial lines wait for the next chunk."""
        if not self._partial and chunk[:7] == b"data: {" and chunk.find(b"\n") == len(chunk) - 2 \
                and chunk[-1:] == b"\n":
            return  # the usual chunk from a model server streaming tokens: one whole JSON event, one line
        data = self._partial + chunk if self._partial else chunk
        if _whole_events(data):  # a read of several whole events (a stream written faster than read)
            self._partial = b""
            return
        complete = data.rfind(b"\n") + 1
        self._partial = data[complete:]
        if len(self._partial) > _MAX_LINE:
            raise UpstreamProtocolError(f"upstream {self._source} sent an SSE line over {_MAX_LINE} bytes")
        if complete:
            self._refuse(data[:complete])

    def _refuse(self, lines: bytes) -> None:
        """Complete lines, line by line: the error naming the first malformed one."""
        for line in lines.split(b"\n"):
            if not line or line == b"\r":
                continue
            if line.startswith(b"data:"):
                payload = line[5:].lstrip()
                if payload[:1] == b"{" or payload.startswith(b"[DONE]"):
                    continue
            elif line.startswith(_FIELDS):
                continue
            shown = line[:80].decode("utf-8", "replace")
            raise UpstreamProtocolError(f"upstream {self._source} sent a malformed SSE line: {shown!r}")


def _whole_events(data: bytes) -> bool:
    """Whether `data` is whole events of one `data:` line each, a JSON object or `[DONE]`, and nothing else:
    split at the blank lines, every piece such a data line and no line end left in any of them. A few
    C-level passes over the bytes instead of several method calls per line (`bench/README.md`)."""
    if data[-2:] != b"\n\n":
        return False
    events = data.split(b"\n\n")
    if events[-1]:
        return False
    for event in events[:-1]:
        if not (event.startswith(b"data: {") or event.startswith(b"data: [DONE]")):
            return False
    return b"".join(events).find(b"\n") < 0


def _unset(_: object) -> bool:
    raise RuntimeError("SseGuard.relay before forward_to")


def _unset_broken(_: SitsError) -> None:
    raise RuntimeError("SseGuard.relay before forward_to")
