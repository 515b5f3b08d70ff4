from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits.errors import UpstreamProtocolError
from sits.pipeline.sse_guard import SseGuard
from sits.translate.sse import one_event

GOOD = b'data: {"a": 1}\n\n: keep-alive\n\nevent: message\ndata: {"b": 2}\n\ndata: [DONE]\n\n'


@pytest.mark.parametrize("cut", range(1, len(GOOD)))
def test_any_split_of_a_good_stream_passes(cut):
    guard = SseGuard("e")
    guard.check(GOOD[:cut])
    guard.check(GOOD[cut:])


@pytest.mark.parametrize("bad", [b"<html>oops</html>\n", b"data: not json\n", b"HTTP/1.1 502\n", b"data: 42\n",
                                 # as many line ends and data lines as whole events would have, a line not blank
                                 b'data: {"a":1}\n<html>\ndata: {"b":2}\n\n'])
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


def test_a_consumer_that_checks_gets_every_chunk_unchecked():
    guard = SseGuard("ep")
    passed: list[bytes] = []
    broken: list[Exception] = []
    guard.forward_to(lambda chunk: passed.append(chunk) or False, broken.append, consumer_checks=True)
    for chunk in (b'data: {"a"', b":1}\n\n", b"<html>\n\n"):
        assert guard.relay(chunk) is False
    assert passed == [b'data: {"a"', b":1}\n\n", b"<html>\n\n"] and not broken


@pytest.mark.parametrize("first", [b"<html>502</html>\n\ndata: {}\n\n", b"data: 42\n\n", b"data: not json\n",
                                   b'event: x\n<html>\ndata: {"a":1}\n\n'])
def test_a_malformed_first_event_is_refused_by_the_first_event_check(first):
    with pytest.raises(UpstreamProtocolError, match="malformed SSE line"):
        SseGuard("e").check_first_event(first)


def test_the_first_event_check_reads_only_the_first_event_and_keeps_no_state():
    guard = SseGuard("e")
    guard.check_first_event(b'data: {"a":1}\n\n<html>\n\n')  # the rest is its reader's to check
    guard.check_first_event(b": hi\nevent: m\ndata: {}\n\ndata: 42\n\n")
    guard.check_first_event(b'data: {"a"')  # no complete line yet
    guard.check(b'data: {"b":2}\n\n')  # nothing held from the first-event checks
    with pytest.raises(UpstreamProtocolError, match="malformed SSE line"):
        guard.check(b"<html>\n")


LINES = [b"", b"\r", b'data: {"a":1}', b'data:{"a":1}', b"data: [DONE]", b"data:\t {}", b": keep-alive", b"event: x",
         b"id: 7", b"retry: 10", b"data: 42", b"data:", b"data: not json", b"<html>", b"HTTP/1.1 502", b"ev", b"\x0b",
         b"data:\x0c[DONE] tail", b"data: \r{", b"\xff\xfe"]


def _by_lines(chunk: bytes) -> bool:
    """The check as the SSE rules say it, line by line: True when every complete line is well formed."""
    for line in chunk.split(b"\n")[:-1]:
        if not line or line == b"\r":
            continue
        if line.startswith(b"data:"):
            payload = line[5:].lstrip()
            if payload[:1] != b"{" and not payload.startswith(b"[DONE]"):
                return False
        elif not line.startswith((b":", b"event:", b"id:", b"retry:")):
            return False
    return True


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(LINES), min_size=1, max_size=12), st.integers(0, 200))
def test_one_match_over_a_read_of_many_lines_refuses_exactly_what_the_rules_refuse(lines, cut):
    chunk = b"\n".join(lines) + b"\n"
    guard = SseGuard("e")
    if _by_lines(chunk):
        guard.check(chunk[:cut])
        guard.check(chunk[cut:])
    else:
        with pytest.raises(UpstreamProtocolError, match="malformed SSE line"):
            guard.check(chunk[:cut])
            guard.check(chunk[cut:])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(LINES), st.sampled_from([b"\n\n", b"\n", b"\n\n\n", b"\r\n\r\n"])),
                min_size=1, max_size=10))
def test_a_read_of_whole_events_is_refused_exactly_when_a_line_is_malformed(events):
    """Reads made of whole events (what a stream written faster than it is read gives), checked by counting."""
    chunk = b"".join(line + end for line, end in events)
    guard = SseGuard("e")
    if _by_lines(chunk):
        guard.check(chunk)
    else:
        with pytest.raises(UpstreamProtocolError, match="malformed SSE line"):
            guard.check(chunk)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(LINES + [b"event: response.output_text.delta", b'data: {"type":"x"}']),
                min_size=1, max_size=4),
       st.sampled_from([b"\n\n", b"\n", b"\r\n\r\n", b""]))
def test_one_event_is_said_only_of_one_whole_well_formed_event(lines, end):
    """`one_event` (the per-read fast test of the guard and the pass-through tap) says yes only where the
    line rules say every line is well formed and the chunk ends its one event."""
    chunk = b"\n".join(lines) + end
    if one_event(chunk):
        assert _by_lines(chunk) and chunk.endswith(b"\n\n") and chunk.count(b"\n\n") == 1
        assert [line[:5] for line in chunk[:-2].split(b"\n")][-1] == b"data:"


@pytest.mark.parametrize("chunk, one", [(b'data: {"a":1}\n\n', True), (b'event: m\ndata: {"a":1}\n\n', True),
                                        (b'data: {"a":1}\n\ndata: {"b":2}\n\n', False), (b'data: {"a":1}\n', False),
                                        (b'event: m\nevent: n\ndata: {}\n\n', False), (b"event: m\n\n", False),
                                        (b"data: [DONE]\n\n", False), (b'data: {"a":1}\r\n\r\n', False),
                                        (b'data: {"a":"' + b"x" * 3000 + b'"}\n\n', True),  # a long one: searched
                                        (b"data: {}\n\n" * 400, False), (b'event: m\ndata: {"a":"' + b"x" * 3000 + b'"}\n\n', True)])
def test_one_event_at_a_glance(chunk, one):
    assert one_event(chunk) is one
