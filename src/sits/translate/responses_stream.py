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
from sits.translate.chat_stream import ChatDelta, ChatStreamReader, StreamEnd, text_piece
from sits.translate.sse import decimal, fill, slots
from sits.translate.responses import (
    RESPONSE,
    TEXT_MESSAGE,
    TEXT_PART,
    assistant_message,
    call_item,
    fields_json,
    incomplete_details,
    message_id,
    status_of,
)
from sits.translate.usage import responses_usage


def _event(name: bytes, fields: bytes) -> bytes:
    """The template of one Responses event: its name in the `event:` line and as `type`, then `fields`."""
    return b'event: ' + name + b'\ndata: {"type":"' + name + b'",' + fields + b'}\n\n'


_OPENED: Final = slots(_event(b"response.created", b'"sequence_number":0,"response":%b')
                       + _event(b"response.in_progress", b'"sequence_number":1,"response":%b'))
_ITEM_ADDED_EVENT: Final = _event(b"response.output_item.added", b'"sequence_number":%b,"output_index":%b,"item":%b')
_ITEM_ADDED: Final = slots(_ITEM_ADDED_EVENT)
# A message item added and its text part added, one template (`_open_message`)
_MESSAGE_OPENED: Final = slots(
    _ITEM_ADDED_EVENT + _event(b"response.content_part.added", b'"sequence_number":%b,"item_id":"%b","output_index":%b,'
                               b'"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}'))
# one per streamed piece: the event's bytes before its sequence number, between it and the piece (the item id
# and output index, filled in once per message) and after the piece
_TEXT_DELTA_HEAD: Final = _event(b"response.output_text.delta", b'"sequence_number":').removesuffix(b"}\n\n")
_TEXT_DELTA_MIDDLE: Final = slots(b',"item_id":"%b","output_index":%b,"content_index":0,"delta":"')
_TEXT_DELTA_TAIL: Final = b'","logprobs":[]}\n\n'
_TEXT_DELTA_TAIL_HEAD: Final = _TEXT_DELTA_TAIL + _TEXT_DELTA_HEAD
# The three events that close a message (text done, part done, item done) as one template: what
# `_close_message` writes per stream in one join.
_ITEM_DONE_EVENT: Final = _event(b"response.output_item.done", b'"sequence_number":%b,"output_index":%b,"item":%b')
_ITEM_DONE: Final = slots(_ITEM_DONE_EVENT)
_MESSAGE_CLOSED: Final = slots(
    _event(b"response.output_text.done", b'"sequence_number":%b,"item_id":"%b","output_index":%b,'
           b'"content_index":0,"text":%b,"logprobs":[]')
    + _event(b"response.content_part.done", b'"sequence_number":%b,"item_id":"%b","output_index":%b,'
             b'"content_index":0,"part":' + TEXT_PART)
    + _ITEM_DONE_EVENT)
_ARGUMENTS_DELTA: Final = slots(_event(b"response.function_call_arguments.delta",
                                       b'"sequence_number":%b,"item_id":"%b","output_index":%b,"delta":%b'))
_CLOSED: Final = slots(b'event: %b\ndata: {"type":"%b","sequence_number":%b,"response":%b}\n\n')
_MESSAGE_OPEN: Final = slots(b'{"type":"message","id":"%b","status":"in_progress","role":"assistant","content":[]}')
_FUNCTION_ARGUMENTS_DONE: Final = slots(_event(b"response.function_call_arguments.done",
                                               b'"sequence_number":%b,"item_id":"%b","output_index":%b,"name":%b,'
                                               b'"arguments":%b'))


class ResponsesStream:
    """Chat SSE bytes in, Responses SSE events out. Feed every chunk; `fail()` on a broken stream.
    `result` is the final response object and the assistant's chat message once the stream ended well."""

    __slots__ = ("_id", "_message_id", "_request", "_model", "_fields", "_reader", "_sequence",
                 "_started", "_text", "_text_delta", "_message_index", "_message_done", "_calls", "_output",
                 "_finish", "_usage", "_final", "ended", "error", "_id_json", "_created_json", "_model_json")

    def __init__(self, response_id: str, created: int, request: dict[str, Any], source: str = "upstream") -> None:
        self._id = response_id
        self._id_json = orjson.dumps(response_id)  # in every snapshot of the response
        self._message_id = message_id(response_id)
        self._created_json = decimal(created)
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
        return fill(RESPONSE, (self._id_json, self._created_json, status, self._model_json, b",".join(self._output),
                               error, incomplete, self._fields, usage))

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
        return [fill(_OPENED, (snapshot, snapshot))]

    def feed(self, chunk: bytes) -> list[bytes]:
        text = self._text
        if text is not None and not self._message_done and not self.ended:
            piece = self._reader.lone_text(chunk)
            if piece is not None:  # one token's event into the open message: most of a stream
                text.append(piece)
                sequence = self._sequence
                self._sequence = sequence + 1
                return [b"".join((_TEXT_DELTA_HEAD, decimal(sequence), self._text_delta, piece, _TEXT_DELTA_TAIL))]
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
        parts = [_TEXT_DELTA_HEAD]
        for piece in pieces:  # one event's tail and the next one's head are one constant
            parts.append(decimal(sequence))
            parts.append(middle)
            parts.append(piece)
            parts.append(_TEXT_DELTA_TAIL_HEAD)
            sequence += 1
        parts[-1] = _TEXT_DELTA_TAIL
        out.append(b"".join(parts))

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
                out.append(fill(_ITEM_ADDED, (decimal(self._sequence), decimal(index), self._output[index])))
                self._sequence += 1
            elif tool.name and not call[3]:
                call[3] = tool.name
            if tool.arguments:
                call[4].append(tool.arguments)
                out.append(fill(_ARGUMENTS_DELTA, (decimal(self._sequence), call[1], decimal(call[0]),
                                                    orjson.dumps(tool.arguments))))
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
        self._text_delta = fill(_TEXT_DELTA_MIDDLE, (self._message_id, decimal(index)))
        item = fill(_MESSAGE_OPEN, (self._message_id,))
        self._output.append(item)
        sequence = self._sequence
        self._sequence += 2
        position = decimal(index)
        out.append(fill(_MESSAGE_OPENED, (decimal(sequence), position, item, decimal(sequence + 1), self._message_id,
                                          position)))
        return text

    def _close_message(self, out: list[bytes]) -> None:
        if self._text is None or self._message_done:
            return
        self._message_done = True
        literal = b'"' + b"".join(self._text) + b'"'
        index, sequence = self._message_index, self._sequence
        self._sequence += 3
        message_id = self._message_id
        item = self._output[index] = fill(TEXT_MESSAGE, (message_id, literal))
        position = decimal(index)
        out.append(fill(_MESSAGE_CLOSED, (decimal(sequence), message_id, position, literal,
                                          decimal(sequence + 1), message_id, position, literal,
                                          decimal(sequence + 2), position, item)))

    def _close_calls(self, out: list[bytes]) -> None:
        for n, (index, item_id, call_id, name, pieces) in enumerate(self._calls.values()):
            arguments = "".join(pieces)
            item = self._output[index] = orjson.dumps(call_item(self._id, n, call_id, name, arguments, "completed"))
            sequence = self._sequence
            self._sequence += 2
            out.append(fill(_FUNCTION_ARGUMENTS_DONE, (decimal(sequence), item_id, decimal(index), orjson.dumps(name),
                                                        orjson.dumps(arguments)))
                       + fill(_ITEM_DONE, (decimal(sequence + 1), decimal(index), item)))

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
        out.append(fill(_CLOSED, (name, name, decimal(self._sequence), self._final)))
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
        out.append(fill(_CLOSED, (b"response.failed", b"response.failed", decimal(self._sequence),
                                   self._response(b"failed", error=error))))
        self._sequence += 1
        return out
