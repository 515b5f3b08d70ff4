from __future__ import annotations

import pytest

from sits.errors import UpstreamProtocolError
from sits.pipeline.sse_guard import SseGuard

GOOD = b'data: {"a": 1}\n\n: keep-alive\n\nevent: message\ndata: {"b": 2}\n\ndata: [DONE]\n\n'


@pytest.mark.parametrize("cut", range(1, len(GOOD)))
def test_any_split_of_a_good_stream_passes(cut):
    guard = SseGuard("e")
    guard.check(GOOD[:cut])
    guard.check(GOOD[cut:])


@pytest.mark.parametrize("bad", [b"<html>oops</html>\n", b"data: not json\n", b"HTTP/1.1 502\n", b"data: 42\n"])
def test_malformed_lines_are_refused(bad):
    guard = SseGuard("e")
    guard.check(b'data: {"ok": 1}\n\n')
    with pytest.raises(UpstreamProtocolError, match="malformed SSE line"):
        guard.check(bad)


def test_crlf_lines_pass():
    SseGuard("e").check(b'data: {"a": 1}\r\n\r\n')


def test_relay_forwards_checked_chunks_keeps_partial_lines_and_reports_a_malformed_one():
    guard = SseGuard("ep")
    passed: list[bytes] = []
    broken: list[Exception] = []
    guard.forward_to(lambda chunk: passed.append(chunk) or False, broken.append)
    assert guard.relay(b'data: {"a":1}\n\n') is False  # the one-line fast path
    guard.relay(b'data: {"b"')  # a line cut in two reads: held until its end comes
    guard.relay(b':2}\n\n')
    assert passed == [b'data: {"a":1}\n\n', b'data: {"b"', b':2}\n\n'] and not broken
    assert guard.relay(b"data: <html>\n\n") is True  # stop reading: the stream is broken
    assert passed[-1] == b':2}\n\n' and "malformed SSE line" in str(broken[0])


def test_relay_reports_a_chunk_its_consumer_refuses_as_the_streams_error():
    guard = SseGuard("ep")
    broken: list[Exception] = []

    def refuse(chunk: bytes) -> bool:
        raise UpstreamProtocolError("upstream ep sent an event the consumer cannot read")
    guard.forward_to(refuse, broken.append)
    assert guard.relay(b'data: {"a":1}\n\n') is True  # stop reading: the stream ends with the error
    assert "cannot read" in str(broken[0])
