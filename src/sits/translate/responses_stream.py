"""Chat SSE chunks in, Responses API events out, one chunk at a time (docs/responses-and-messages.md).

Events are written as bytes from templates, not built as objects and dumped: the text pieces the
chat reader slices out (`translate/chat_stream.py`) go into them as they are, the fields of the
response that restate the request are serialised once, and each output item is kept as the JSON it
was last sent as. The response object for the response store (`result`) is the closing event's
bytes, spliced into the stored record as they are.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from sits.errors import UpstreamProtocolError
from sits.translate.chat_delta import ChatDelta, StreamEnd, text_piece
from sits.translate.chat_stream import ChatStreamReader
from sits.translate.responses import (
    assistant_message,
    call_item,
    fields_json,
    incomplete_details,
    message_id,
    response_json,
    status_of,
    text_message,
    text_part,
)
from sits.translate.sse import decimal
from sits.translate.usage import responses_usage


# one per streamed piece: the event's bytes before its sequence number, between it and the piece (the item id
# and output index, `_open_message`) and after the piece; one event's tail and the next one's head are one
# constant where several pieces come in one read
_TEXT_DELTA_HEAD: Final = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":'
_TEXT_DELTA_TAIL: Final = b'","logprobs":[]}\n\n'
_TEXT_DELTA_TAIL_HEAD: Final = _TEXT_DELTA_TAIL + _TEXT_DELTA_HEAD

# Each event is a bytes literal formatted where it is written (with `%b` for bytes, `%d` for ints):
# compiled, that is one allocation, no template parsed at run time (docs/hot-path.md).


def _closed(name: bytes, sequence: int, response: bytes) -> bytes:
    """The closing event (`response.completed`, `.incomplete` or `.failed`) with the final response."""
    return b'event: %b\ndata: {"type":"%b","sequence_number":%d,"response":%b}\n\n' % (name, name, sequence, response)


def _item_added(sequence: int, index: int, item: bytes) -> bytes:
    return (b'event: response.output_item.added\ndata: {"type":"response.output_item.added","sequence_number":%d,'
            b'"output_index":%d,"item":%b}\n\n' % (sequence, index, item))


def _item_done(sequence: int, index: int, item: bytes) -> bytes:
    return (b'event: response.output_item.done\ndata: {"type":"response.output_item.done","sequence_number":%d,'
            b'"output_index":%d,"item":%b}\n\n' % (sequence, index, item))


class ResponsesStream:
    """Chat SSE bytes in, Responses SSE events out. Feed every chunk; `fail()` on a broken stream.
    `result` is the final response object and the assistant's chat message once the stream ended well."""

    __slots__ = ("_id", "_message_id", "_request", "_model", "_fields", "_reader", "_sequence",
                 "_started", "_text", "_text_delta", "_message_index", "_message_done", "_calls", "_output",
                 "_finish", "_usage", "_final", "ended", "error", "_id_json", "_created_json", "_model_json")

    def __init__(self, response_id: str, created: int, request: dict[str, Any], source: str = "upstream") -> None:
        self._id = response_id
        self._id_json = b'"%b"' % response_id.encode()  # in every snapshot (SITS's own id: nothing to escape)
        self._message_id = message_id(response_id)
        self._created_json = b"%d" % created
        self._request = request
        self._model = request["model"]
        self._model_json = orjson.dumps(self._model)  # in every snapshot too
        self._fields = fields_json(request)
        self._reader = ChatStreamReader(source)
        self._sequence = 0
        self._started = False
        self._text: list[bytes] | None = None  # the open message item's text pieces (JSON-escaped)
        self._text_delta = b""  # the open message's delta events' bytes between sequence number and piece
        self._message_index = -1
        self._message_done = False
        self._calls: dict[int, list[Any]] = {}  # chat tool index -> [output index, item id, call id, name, [args]]
        self._output: list[bytes] = []  # each output item as the JSON last sent of it
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._final = b""  # the closing event's response
        self.ended = False
        self.error: str | None = None  # why the stream failed, once it did

    def _response(self, status: bytes, usage: bytes = b"null", incomplete: bytes = b"null",
                  error: bytes = b"null") -> bytes:
        return response_json(self._id_json, self._created_json, status, self._model_json, b",".join(self._output),
                             error, incomplete, self._fields, usage)

    @property
    def usage(self) -> dict[str, Any] | None:
        return self._usage

    @property
    def result(self) -> tuple[bytes, dict[str, Any]] | None:
        """(the response object as the closing event wrote it, the answer as a chat message), once the
        stream ended well."""
        if not self._final:
            return None
        try:
            text = orjson.loads(b'"' + b"".join(self._text) + b'"') if self._text else ""
        except orjson.JSONDecodeError:  # a piece sliced out of an event that was not JSON
            raise UpstreamProtocolError("the upstream's text is not a valid JSON string") from None
        calls = [(c[2], c[3], "".join(c[4])) for c in self._calls.values()]
        return self._final, assistant_message(text, calls)

    def start(self) -> list[bytes]:
        self._started = True
        self._sequence = 2
        snapshot = self._response(b"in_progress")
        return [b'event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":%b}\n\n'
                b'event: response.in_progress\ndata: {"type":"response.in_progress","sequence_number":1,"response":%b}'
                b'\n\n' % (snapshot, snapshot)]

    def feed(self, chunk: bytes) -> list[bytes]:
        text = self._text
        if text is not None and not self._message_done and not self.ended:
            piece = self._reader.lone_text(chunk)
            if piece is not None:  # one token's event into the open message: most of a stream
                text.append(piece)
                sequence = self._sequence
                self._sequence = sequence + 1
                return [b"%b%d%b%b%b" % (_TEXT_DELTA_HEAD, sequence, self._text_delta, piece, _TEXT_DELTA_TAIL)]
        out = [] if self._started else self.start()
        for item in self._reader.feed(chunk):
            if self.ended:
                break
            if type(item) is list:  # pieces of text: most of a stream
                self._text_pieces(item, out)
            elif type(item) is StreamEnd:
                out += self.finish() if item.error is None else self.fail(item.error, item.code or "upstream_error")
            else:
                self._delta(item, out)  # type: ignore[arg-type]
        return out

    def _text_pieces(self, pieces: list[bytes], out: list[bytes]) -> None:
        if not pieces:  # the join below ends on the last piece's tail: it needs one piece at least
            return
        text = self._text
        if text is None:
            text = self._open_message(out)
        text += pieces
        sequence = self._sequence
        self._sequence = sequence + len(pieces)
        middle = self._text_delta
        # The events' parts go into `out` as they are: the relay joins `out` once (no join here, and a
        # second copy there, of every byte of the run).
        out.append(_TEXT_DELTA_HEAD)
        for piece in pieces:  # one event's tail and the next one's head are one constant
            out.append(decimal(sequence))
            out.append(middle)
            out.append(piece)
            out.append(_TEXT_DELTA_TAIL_HEAD)
            sequence += 1
        out[-1] = _TEXT_DELTA_TAIL

    def _delta(self, delta: ChatDelta, out: list[bytes]) -> None:
        if delta.model and self._model == self._request["model"] and delta.model != self._model:
            self._model = delta.model
            self._model_json = orjson.dumps(delta.model)
        if delta.text:
            self._text_pieces([text_piece(delta.text)], out)
        for tool in delta.tools:
            call = self._calls.get(tool.index)
            if call is None:
                self._close_message(out)
                index = len(self._output)
                item = call_item(self._id, len(self._calls), tool.id or f"call_{tool.index}", tool.name or "", "",
                                 "in_progress")
                call = self._calls[tool.index] = [index, item["id"].encode(), item["call_id"], item["name"], []]
                self._output.append(orjson.dumps(item))
                out.append(_item_added(self._sequence, index, self._output[index]))
                self._sequence += 1
            elif tool.name and not call[3]:
                call[3] = tool.name
            if tool.arguments:
                call[4].append(tool.arguments)
                out.append(b'event: response.function_call_arguments.delta\ndata: {"type":'
                           b'"response.function_call_arguments.delta","sequence_number":%d,"item_id":"%b",'
                           b'"output_index":%d,"delta":%b}\n\n'
                           % (self._sequence, call[1], call[0], orjson.dumps(tool.arguments)))
                self._sequence += 1
        if delta.finish is not None:
            self._finish = delta.finish
        if delta.usage is not None:
            self._usage = delta.usage

    def _open_message(self, out: list[bytes]) -> list[bytes]:
        """Opens the message item (its added events into `out`); its text pieces, empty."""
        text: list[bytes] = []
        self._text = text
        index = self._message_index = len(self._output)
        message_id = self._message_id
        self._text_delta = b',"item_id":"%b","output_index":%d,"content_index":0,"delta":"' % (message_id, index)
        item = b'{"type":"message","id":"%b","status":"in_progress","role":"assistant","content":[]}' % (message_id,)
        self._output.append(item)
        sequence = self._sequence
        self._sequence += 2
        out.append(b'%b' b'event: response.content_part.added\ndata: {"type":"response.content_part.added",'
                   b'"sequence_number":%d,"item_id":"%b","output_index":%d,"content_index":0,'
                   b'"part":{"type":"output_text","text":"","annotations":[]}}\n\n'
                   % (_item_added(sequence, index, item), sequence + 1, message_id, index))
        return text

    def _close_message(self, out: list[bytes]) -> None:
        """Closes the open message: its text done, its part done and the item done, one write."""
        if self._text is None or self._message_done:
            return
        self._message_done = True
        literal = b'"' + b"".join(self._text) + b'"'
        index, sequence = self._message_index, self._sequence
        self._sequence += 3
        message_id = self._message_id
        part = text_part(literal)
        item = self._output[index] = text_message(message_id, part)
        out.append(b'event: response.output_text.done\ndata: {"type":"response.output_text.done","sequence_number":%d,'
                   b'"item_id":"%b","output_index":%d,"content_index":0,"text":%b,"logprobs":[]}\n\n'
                   b'event: response.content_part.done\ndata: {"type":"response.content_part.done","sequence_number":%d,'
                   b'"item_id":"%b","output_index":%d,"content_index":0,"part":%b}\n\n%b'
                   % (sequence, message_id, index, literal, sequence + 1, message_id, index, part,
                      _item_done(sequence + 2, index, item)))

    def _close_calls(self, out: list[bytes]) -> None:
        for n, (index, item_id, call_id, name, pieces) in enumerate(self._calls.values()):
            arguments = "".join(pieces)
            item = self._output[index] = orjson.dumps(call_item(self._id, n, call_id, name, arguments, "completed"))
            sequence = self._sequence
            self._sequence += 2
            out.append(b'event: response.function_call_arguments.done\ndata: {"type":'
                       b'"response.function_call_arguments.done","sequence_number":%d,"item_id":"%b",'
                       b'"output_index":%d,"name":%b,"arguments":%b}\n\n%b'
                       % (sequence, item_id, index, orjson.dumps(name), orjson.dumps(arguments),
                          _item_done(sequence + 1, index, item)))

    def finish(self) -> list[bytes]:
        """The chat stream ended with [DONE]: close the open items, then response.completed (or .incomplete)."""
        out: list[bytes] = [] if self._started else self.start()
        if self.ended:
            return out
        if self._text is None and not self._calls:
            self._open_message(out)  # an empty answer is still one (empty) message
        self._close_message(out)
        self._close_calls(out)
        status = status_of(self._finish)
        details = incomplete_details(status, self._finish)
        self._final = self._response(status.encode(), responses_usage(self._usage),
                                     b"null" if details is None else orjson.dumps(details))
        name = b"response.completed" if status == "completed" else b"response.incomplete"
        out.append(_closed(name, self._sequence, self._final))
        self._sequence += 1
        self.ended = True
        return out

    def fail(self, message: str, code: str = "server_error") -> list[bytes]:
        """The stream broke: `response.failed` with the error, and no further events."""
        out: list[bytes] = [] if self._started else self.start()
        if self.ended:
            return out
        self.ended = True
        self.error = message
        error = orjson.dumps({"code": code, "message": message})
        out.append(_closed(b"response.failed", self._sequence, self._response(b"failed", error=error)))
        self._sequence += 1
        return out
