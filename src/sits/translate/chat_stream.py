"""Reading a chat-completions SSE stream event by event, for the surfaces that translate it.

`ChatStreamReader.feed(bytes)` returns what the complete events say, in order: a `list` of text pieces
for one or more consecutive events that say a piece of text and nothing else (most of a stream), a
`ChatDelta` for any other event; `[DONE]` and an in-band error event are reported as `StreamEnd`, so a
surface can end its own stream the right way.

A text piece is the string's content as the upstream escaped it in JSON (no quotes), so a surface
puts it into its own events' bytes without decoding and re-encoding it; pieces joined between two
quotes are the whole text as one JSON string.

Most text events are not parsed. A chat server writes every text-only event of a stream alike but for
the text (`data: {"id":"x",...,"choices":[{"index":0,"delta":{"content":"` *text* `"},...}]}`): the
first one is parsed, found to say text and nothing else, and the bytes before and after its text are
kept. Events made of the same bytes around strings with no quote in them are the same JSON object
with other texts (quotes are escaped inside JSON strings, so nothing else can look alike): their text
is sliced out, the chunk split once into events and each tested with a prefix, a suffix and one
`translate` pass over its text (no quote, no line end); anything else is parsed.

The shape is known before the first text event where the role event says it: `"delta":{"role":
"assistant","content":""}` (or `null`) written once, with nothing else in the event that a text-only
event could not hold, is the text event's bytes with another delta. From the shape follow two more
events a stream ends with, read without parsing when they are those bytes exactly: the finish event
(the delta empty, or an empty content, and the null `finish_reason` a string of letters and
underscores) and the usage event (the bytes up to `"choices":[`, then `],"usage":` and one JSON object).
Each is what parsing it says: every other byte is one of an event that was parsed.

A source's role event is alike from stream to stream but for the stream's id and `created` time: after
a source's first stream it is read by its bytes too (`translate/stream_opening.py`).

The reader is the stream's SSE check (the exchange's guard passes a translated stream's chunks on
unchecked: `pipeline/sse_guard.py`): an event read by its bytes is one `data:` line of a JSON object by
construction, and every other event is checked line by line (`sse.refuse_malformed`) before it is parsed.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from sits.errors import UpstreamProtocolError
from sits.translate import stream_opening
from sits.translate.chat_delta import ChatDelta, StreamEnd, chunk_delta, matched_stop, only_text, text_piece
from sits.translate.sse import DONE, MAX_LINE, refuse_malformed
from sits.translate.stream_opening import Opening, fill_in, only_table
from sits.tuples import new_tuple


Item = list[bytes] | ChatDelta | StreamEnd

_DONE_END = StreamEnd()
_TEXT_KEY = b'"delta":{"content":"'  # where a text-only event's text starts, as chat servers write it
_NEVER = b"\n\n"  # no complete event starts with this: matches nothing until a shape is learnt
_NO_ENDS: Final = (_NEVER, _NEVER)
_CONTENT_KEY: Final = b'"content":"'  # how `_TEXT_KEY` ends: the head without it ends at the delta's brace
_ROLE_DELTAS: Final = (b'"delta":{"role":"assistant","content":""}', b'"delta":{"role":"assistant","content":null}')
_DELTA_KEY: Final = b'"delta":'
_DONE_LINE: Final = b"data: [DONE]"  # the usual end, as every chat server writes it
_DATA: Final = b"data: "
_NEXT_DATA: Final = b"\n\ndata: "  # an event's end and the next one's data line
_FINISH_KEY: Final = b'"finish_reason":'
_CHOICES_KEY: Final = b'"choices":['
_MODEL_KEY: Final = b'"model":'
# Bytes tested for by value: `34 in data` is a memchr, while `b'"' in data` first tries the bytes as an
# integer and builds (and clears) a TypeError, several times the cost.
_QUOTE: Final = 34
_NEWLINE: Final = 10
_CR: Final = 13
_BACKSLASH: Final = 92
_PIECE_TABLE: Final = only_table(bytes(n for n in range(256) if n not in (_QUOTE, _NEWLINE)))  # no quote, no newline
_REASON_TABLE: Final = only_table(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")


def _finish_ends(event: bytes) -> tuple[bytes, bytes]:
    """(before, after) a finish reason's text in `event` finished: `event` has one `finish_reason`, null;
    the same event finished for reason R is `before + R + after`. `_NO_ENDS` when it has no such field.
    (One split says where a key is and that it is there once: each bytes method call costs about as
    much as a thousand instructions of search.)"""
    parts = event.split(_FINISH_KEY)
    if len(parts) != 2 or not parts[1].startswith(b"null"):
        return _NO_ENDS
    return parts[0] + _FINISH_KEY + b'"', b'"' + parts[1][4:]


def _add_piece(out: list[Item], piece: bytes) -> None:
    """A text piece into `out`: pieces in a row go out as one list."""
    if out and type(out[-1]) is list:
        out[-1].append(piece)  # type: ignore[union-attr]
    else:
        out.append([piece])


class ChatStreamReader:
    """Chat SSE bytes in (cut anywhere), text pieces, deltas and the end out."""

    __slots__ = ("_partial", "_source", "_head", "_tail", "_tail_end", "_body", "_model", "_stop", "_finish_empty",
                 "_finish_content", "_usage_head", "_usage_model")

    def __init__(self, source: str = "upstream") -> None:
        self._partial = b""
        self._source = source
        # The learnt shape of this stream's text-only events: the bytes before the text and after it
        # (with the blank line).
        self._head = self._tail = _NEVER
        self._tail_end = b""  # the tail without its blank line, as an event split out of a read ends
        self._body: bytes | None = None  # the head after its `data: `, as a read's parts after the first start
        # What follows from the shape (`_set_shape`): the model and the stop string its event says, the
        # ends of its finish event (delta empty, or an empty content), the usage event's head, and the
        # model the usage event says.
        self._model: str | None = None
        self._stop: str | None = None
        self._finish_empty = self._finish_content = _NO_ENDS
        self._usage_head = _NEVER
        self._usage_model: str | None = None

    def lone_text(self, chunk: bytes) -> bytes | None:
        """The text piece of `chunk` when it is one whole text-only event of the learnt shape and nothing
        else (how a model server writes each token), else None: then `feed` it. No quote and no newline
        between the learnt head and tail means they hold one JSON string and nothing else; a piece
        ending in a backslash may have escaped the closing quote, and goes the long way."""
        head = self._head
        if self._partial or head is _NEVER or not chunk.startswith(head) or not chunk.endswith(self._tail):
            return None
        return self._piece(chunk, len(head), len(chunk) - len(self._tail))

    def _piece(self, event: bytes, start: int, end: int) -> bytes | None:
        """The text between the learnt head (ending at `start`) and `end` when it is one JSON string's
        content and nothing else."""
        piece = event[start:end]
        if not piece or piece.translate(_PIECE_TABLE) != piece or piece[-1] == _BACKSLASH:
            return None
        return piece

    def feed(self, chunk: bytes) -> list[Item]:
        piece = self.lone_text(chunk)
        if piece is not None:
            return [[piece]]
        data = self._partial + chunk if self._partial else chunk
        if _CR in data:  # CRLF line ends (rare): as LF, so events end with one separator
            data = data.replace(b"\r\n", b"\n")
        # Split where an event ends and the next one's data line starts (how chat servers write every
        # event): a longer separator than the blank line alone is found in fewer steps, and each part
        # after the first is an event's bytes after its `data: `. Events a server separates otherwise
        # (a comment, an `event:` line, another blank line) stay in one part, split at the blank lines.
        parts = data.split(_NEXT_DATA)
        last = parts[-1]
        if last.endswith(b"\n\n"):  # the read ends with a whole event (the usual)
            partial = b""
            parts[-1] = last[:-2]
        else:
            end = last.rfind(b"\n\n")
            if end >= 0:
                partial = last[end + 2:]
                parts[-1] = last[:end]
            else:  # the last event is not whole yet
                partial = _DATA + last if len(parts) > 1 else last
                parts.pop()
                if not parts and len(partial) > MAX_LINE:
                    raise UpstreamProtocolError(f"upstream {self._source} sent an SSE event over {MAX_LINE} bytes")
        self._partial = partial
        out: list[Item] = []
        head, tail, body = self._head, self._tail_end, self._body  # the learnt shape, without the blank line
        for index, part in enumerate(parts):
            # an event of the learnt shape with no quote, newline or final backslash in its text: the text
            # piece, sliced out unparsed (pieces in a row go out as one list); inline, the read's hot loop
            start = (None if head is _NEVER else head) if index == 0 else body
            if start is not None and part.startswith(start) and part.endswith(tail):
                piece = self._piece(part, len(start), len(part) - len(tail))
                if piece is not None:
                    _add_piece(out, piece)
                    continue
            event = part if index == 0 else _DATA + part
            if _NEWLINE in event:  # more than one line: more than one event, maybe
                for one in event.split(b"\n\n"):
                    if not self._sliced(one, self._head, out):
                        self._other(one, out)
            else:  # one event, already tested against the shape above
                self._other(event, out)
            head, tail, body = self._head, self._tail_end, self._body  # learnt from this event, maybe
        return out

    def _sliced(self, event: bytes, head: bytes, out: list[Item]) -> bool:
        """`feed`'s test of an event split out of a part of several: of the learnt shape, its text piece
        into `out`. Whether it was one."""
        if head is _NEVER or not event.startswith(head):
            return False
        tail = self._tail_end
        if not event.endswith(tail):
            return False
        piece = self._piece(event, len(head), len(event) - len(tail))
        if piece is None:
            return False
        _add_piece(out, piece)
        return True

    def _other(self, event: bytes, out: list[Item]) -> None:
        """A whole event that is not a text event of the learnt shape: read by its bytes if it is the
        shape's finish or usage event, else parsed."""
        if event and not self._known_end(event, out):
            self._event(event, out)

    def _known_end(self, event: bytes, out: list[Item]) -> bool:
        """A finish or usage event of the shape's bytes, its delta into `out` without parsing it: whether
        it was one."""
        before, after = self._finish_empty
        if not (event.startswith(before) and event.endswith(after)):
            before, after = self._finish_content
        if event.startswith(before) and event.endswith(after) and len(event) > len(before) + len(after):
            reason = event[len(before):len(event) - len(after)]
            if reason.translate(_REASON_TABLE) != reason:  # ASCII letters and underscores: the JSON string is its bytes
                return False
            out.append(new_tuple(ChatDelta, ("", "", (), reason.decode(), None, self._model, self._stop)))
            return True
        head = self._usage_head
        if event.startswith(head) and event.endswith(b"}") and _NEWLINE not in event:
            try:
                usage = orjson.loads(event[len(head):-1])
            except orjson.JSONDecodeError:  # more than the one object: parsed whole
                return False
            if type(usage) is not dict:
                return False
            out.append(new_tuple(ChatDelta, ("", "", (), None, usage, self._usage_model, None)))
            return True
        return False

    def _event(self, event: bytes, out: list[Item]) -> None:
        """An event not in a run: its `data:` lines, parsed (a role event of the source's learnt opening
        is read by its bytes)."""
        if event == _DONE_LINE:
            out.append(_DONE_END)
            return
        if self._head is _NEVER:
            opening = stream_opening.OPENINGS.get(self._source)
            if opening is not None and self._opened(event, opening, out):
                return
        if event.startswith(b"data:") and _NEWLINE not in event:
            payload = event[5:]
            if payload[:1] != b"{" and payload[:2] != b" {":
                refuse_malformed(event, self._source)  # the SSE check of the events the reader parses
        else:  # comments, `event:` lines, data over several lines (rare for chat servers)
            refuse_malformed(event, self._source)
            lines = [line[5:] for line in event.split(b"\n") if line.startswith(b"data:")]
            if not lines:
                return
            payload = b"\n".join(lines)
        if payload.endswith(DONE) and payload.strip() == DONE:
            out.append(_DONE_END)
            return
        try:
            parsed = orjson.loads(payload)
        except orjson.JSONDecodeError:
            out.append(StreamEnd(f"an SSE event that is not JSON: {payload[:80]!r}", "upstream_bad_stream"))
            return
        if type(parsed) is not dict:
            return
        event_object: dict[str, Any] = parsed  # a dict: its reads compile to dict operations
        error = event_object.get("error")
        if error is not None:
            message = error.get("message", error) if type(error) is dict else error
            code = error.get("code") if type(error) is dict else None
            out.append(StreamEnd(str(message), str(code) if code else "upstream_error"))
            return
        text = only_text(event_object)
        if text is None:
            delta = chunk_delta(event_object)
            out.append(delta)
            if self._head is _NEVER and delta.finish is None and delta.usage is None \
                    and self._foresee(event, event_object):
                stream_opening.learn(self._source, event, event_object, delta, (
                    self._head, self._tail, *self._finish_empty, *self._finish_content, self._usage_head),
                    self._model, self._stop, self._usage_model)
        elif text:
            piece = text_piece(text)
            self._learn(event, piece, event_object)
            _add_piece(out, piece)

    def _learn(self, event: bytes, piece: bytes, parsed: dict[str, Any]) -> None:
        """Keep the bytes around this text-only event's text, when it is written as orjson writes it.
        Quotes are escaped inside JSON strings, so `"delta":{"content":"<piece>"}` is found only where
        the object has it."""
        at = event.find(_TEXT_KEY + piece + b'"}')
        if at < 0 or event.find(b"\n") >= 0:
            return
        start = at + len(_TEXT_KEY)
        end = start + len(piece)
        head, tail = event[:start], event[end:] + b"\n\n"
        if head != self._head or tail != self._tail:
            self._set_shape(head, tail, parsed)

    def _foresee(self, event: bytes, parsed: dict[str, Any]) -> bool:
        """The text events' shape from the role event, when it says the role and an empty content and
        nothing a text-only event could not say (`_only_text`): its bytes with `"delta":{"content":"<text>"}`
        instead. `"delta":` written once, in choice 0: it is that choice's delta. Whether it did."""
        if _NEWLINE in event or parsed.get("usage") is not None:
            return False
        choices = parsed.get("choices")
        if type(choices) is not list or len(choices) != 1 or type(choices[0]) is not dict:
            return False
        choice: dict[str, Any] = choices[0]
        delta = choice.get("delta")
        if type(delta) is not dict or len(delta) != 2 or choice.get("index", 0) != 0 \
                or choice.get("finish_reason") is not None:
            return False
        parts = event.split(_ROLE_DELTAS[0])
        if len(parts) != 2:
            parts = event.split(_ROLE_DELTAS[1])
        if len(parts) != 2 or event.count(_DELTA_KEY) != 1:
            return False
        self._set_shape(parts[0] + _TEXT_KEY, b'"}' + parts[1] + b"\n\n", parsed)
        return True

    def _opened(self, event: bytes, opening: Opening, out: list[Item]) -> bool:
        """A role event of the source's learnt opening (`translate/stream_opening.py`), read by its bytes:
        its delta into `out` and the shape set, with this stream's two values in. Whether it was one."""
        found = stream_opening.values(event, opening)
        if found is None:
            return False
        one, two = found
        head, tail, empty_before, empty_after, content_before, content_after, usage_head = opening.templates
        self._shaped(fill_in(head, one, two), fill_in(tail, one, two))
        self._finish_empty = (fill_in(empty_before, one, two), fill_in(empty_after, one, two))
        self._finish_content = (fill_in(content_before, one, two), fill_in(content_after, one, two))
        self._usage_head = fill_in(usage_head, one, two)
        self._model, self._stop, self._usage_model = opening.model, opening.stop, opening.usage_model
        out.append(opening.delta)
        stream_opening.hit(self._source)
        return True

    def _shaped(self, head: bytes, tail: bytes) -> None:
        """The text events' bytes before and after the text, and what a read's parts are tested with."""
        self._head, self._tail, self._tail_end = head, tail, tail[:-2]
        self._body = head[len(_DATA):] if head.startswith(_DATA) else None

    def _set_shape(self, head: bytes, tail: bytes, parsed: dict[str, Any]) -> None:
        """`head` and `tail` around the text of this stream's text-only events, and what follows from them;
        `parsed` is an event of that shape (the text aside): its model, its choice's stop string."""
        self._shaped(head, tail)
        model = parsed.get("model")
        self._model = model if type(model) is str else None
        choice: dict[str, Any] = parsed["choices"][0]
        self._stop = matched_stop(choice)
        body = tail[:-2]  # the closing quote and brace of the delta, then the rest of the event
        whole = head + body  # the event with an empty text
        if "finish_reason" in choice:  # then the one `"finish_reason":` written is the choice's
            self._finish_empty = _finish_ends(head[:-len(_CONTENT_KEY)] + b"}" + body[2:])
            self._finish_content = _finish_ends(whole)
        else:
            self._finish_empty = self._finish_content = _NO_ENDS
        at_choices = whole.split(_CHOICES_KEY)
        models = whole.split(_MODEL_KEY)
        if len(at_choices) != 2 or len(models) > 2:
            self._usage_head = _NEVER
            return
        # the usage event keeps the members before `choices`: the model, where it is one of them
        self._usage_head = at_choices[0] + _CHOICES_KEY + b'],"usage":'
        self._usage_model = self._model if len(models) == 2 and len(models[0]) < len(at_choices[0]) else None
