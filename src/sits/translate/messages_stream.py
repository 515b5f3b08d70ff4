"""Chat SSE chunks in, Anthropic Messages events out, one chunk at a time (docs/responses-and-messages.md).

Events are written as bytes from templates, not built as objects and dumped: the text pieces the
chat reader slices out (`translate/chat_stream.py`) go into them as they are.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from sits.translate.chat_delta import ChatDelta, StreamEnd, text_piece
from sits.translate.chat_stream import ChatStreamReader
from sits.translate.messages import stop_of
from sits.translate.sse import named_event
from sits.translate.usage import anthropic_usage

_TEXT_BLOCK: Final = b'{"type":"text","text":""}'
_THINKING_BLOCK: Final = b'{"type":"thinking","thinking":"","signature":""}'
_DELTA_END: Final = b'"}}\n\n'  # after each streamed piece

# Each event is a bytes literal formatted where it is written (with `%b` for bytes, `%d` for ints):
# compiled, that is one allocation, no template parsed at run time (docs/hot-path.md).


def _delta_head(block: int, kind: bytes, field: bytes) -> bytes:
    """A content block's delta event up to its piece (then the piece and `_DELTA_END`)."""
    return (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,"delta":{"type":"%b","%b":"'
            % (block, kind, field))


class MessagesStream:
    """Chat SSE bytes in, Messages events out. Feed every chunk; `fail()` on a broken stream."""

    def __init__(self, message_id: str, model: str, source: str = "upstream", stop_sequences: Any = None) -> None:
        self._id = message_id
        self._stop_sequences = stop_sequences  # the client's: `stop_sequence` names one of them
        self._model = model
        self._reader = ChatStreamReader(source)
        self._started = False
        self._block = -1  # index of the open content block, -1 when none
        self._open_kind = ""  # "text", "thinking" or "tool:<chat index>"
        self._text_delta = b""  # the open text block's delta events' head
        self._tools: dict[int, int] = {}  # chat tool index -> block index
        self._finish: str | None = None
        self._stop: str | None = None  # the stop string matched, where the server says
        self._usage: dict[str, Any] | None = None
        self.ended = False
        self.error: str | None = None  # why the stream failed, once it did

    @property
    def usage(self) -> dict[str, Any] | None:
        return self._usage

    def start(self) -> list[bytes]:
        self._started = True
        return [b'event: message_start\ndata: {"type":"message_start","message":{"id":%b,"type":"message",'
                b'"role":"assistant","model":%b,"content":[],"stop_reason":null,"stop_sequence":null,'
                b'"usage":{"input_tokens":0,"output_tokens":0}}}\n\n' % (orjson.dumps(self._id), orjson.dumps(self._model))]

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._open_kind == "text" and not self.ended:
            piece = self._reader.lone_text(chunk)
            if piece is not None:  # one token's event into the open text block: most of a stream
                return [b"%b%b%b" % (self._text_delta, piece, _DELTA_END)]
        out = [] if self._started else self.start()
        for item in self._reader.feed(chunk):
            if self.ended:
                break
            if type(item) is list:  # pieces of text: most of a stream
                if self._open_kind != "text":
                    self._open_text(out)
                head = self._text_delta  # the run's events in three parts, joined once by the relay
                out.append(head)
                out.append((_DELTA_END + head).join(item))
                out.append(_DELTA_END)
            elif type(item) is StreamEnd:
                out += self.finish() if item.error is None else self.fail(item.error, item.code or "api_error")
            else:
                self._delta(item, out)  # type: ignore[arg-type]
        return out

    def _open(self, kind: str, block: bytes, out: list[bytes]) -> None:
        self._close(out)
        self._block += 1
        self._open_kind = kind
        out.append(b'event: content_block_start\ndata: {"type":"content_block_start","index":%d,"content_block":%b}\n\n'
                   % (self._block, block))

    def _open_text(self, out: list[bytes]) -> None:
        self._open("text", _TEXT_BLOCK, out)
        self._text_delta = _delta_head(self._block, b"text_delta", b"text")

    def _close(self, out: list[bytes]) -> None:
        if self._open_kind:
            out.append(b'event: content_block_stop\ndata: {"type":"content_block_stop","index":%d}\n\n' % (self._block,))
            self._open_kind = ""

    def _delta(self, delta: ChatDelta, out: list[bytes]) -> None:
        if delta.reasoning:
            if self._open_kind != "thinking":
                self._open("thinking", _THINKING_BLOCK, out)
            out.append(b"%b%b%b" % (_delta_head(self._block, b"thinking_delta", b"thinking"), text_piece(delta.reasoning),
                                    _DELTA_END))
        if delta.text:
            if self._open_kind != "text":
                self._open_text(out)
            out.append(b"%b%b%b" % (self._text_delta, text_piece(delta.text), _DELTA_END))
        for tool in delta.tools:
            kind = f"tool:{tool.index}"
            if tool.index not in self._tools:
                block = {"type": "tool_use", "id": tool.id or f"toolu_{self._id[4:]}_{tool.index}",
                         "name": tool.name or "", "input": {}}
                self._open(kind, orjson.dumps(block), out)
                self._tools[tool.index] = self._block
            elif self._open_kind != kind:
                continue  # a delta for a block already closed: chat servers send each call's pieces in order
            if tool.arguments:
                out.append(b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
                           b'"delta":{"type":"input_json_delta","partial_json":%b}}\n\n'
                           % (self._block, orjson.dumps(tool.arguments)))
        if delta.finish is not None:
            self._finish, self._stop = delta.finish, delta.stop
        if delta.usage is not None:
            self._usage = delta.usage

    def finish(self) -> list[bytes]:
        out: list[bytes] = [] if self._started else self.start()
        if self.ended:
            return out
        self._close(out)
        reason, sequence = stop_of(self._finish, self._stop, self._stop_sequences)
        out.append(b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"%b","stop_sequence":%b},'
                   b'"usage":%b}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n'
                   % (reason.encode(), orjson.dumps(sequence), anthropic_usage(self._usage)))
        self.ended = True
        return out

    def fail(self, message: str, code: str = "api_error") -> list[bytes]:
        """The stream broke: an `error` event, and no further events."""
        error_type = "overloaded_error" if code == "overloaded" else "api_error"
        out: list[bytes] = [] if self._started else self.start()
        if self.ended:
            return out
        self.ended = True
        self.error = message
        out.append(named_event("error", {"type": "error", "error": {"type": error_type, "message": message}}))
        return out
