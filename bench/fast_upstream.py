"""A fixed-answer OpenAI-compatible upstream, fast enough never to be the bottleneck.

Raw asyncio.Protocol + httptools (llhttp) on uvloop; every response is prebuilt bytes.

- POST /v1/chat/completions            -> one small chat.completion JSON (Content-Length)
- POST /v1/chat/completions stream=true -> 8 chat.completion.chunk SSE events (role, 6 tokens, finish;
                                           --stream-tokens N: N tokens) (and the usage event when
                                           stream_options.include_usage asks for it) + [DONE],
                                           chunked transfer encoding, one write (with
                                           --event-gap-ms G: each event its own write, G ms
                                           apart, as a model server streams tokens)
- POST /v1/responses (a Responses-API upstream, for `api: responses` endpoints) -> one small response
  object, or with stream=true: created, in_progress, 6 output_text.delta events and completed
  (8 events, the same token text), one write or spaced like the chat stream
- with --error-every N, every Nth completion is a 500 error instead (injected upstream errors)
- GET  /v1/models, GET /health          -> model list / ok
- GET  /stats                           -> {"connections": opened so far, "completions": answered so far}
- anything else                         -> 404 JSON

HTTP/1.1 keep-alive and pipelining (answers in order). Bound to 127.0.0.1 only.
Prints "PORT <n>" on stdout once listening (use --port 0 for a free port).

    python bench/fast_upstream.py --port 0
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import httptools
import orjson

MODEL = "bench-model"
CREATED = 1700000000
# Each chat answer carries its own id and `created`, as a model server's do: these bytes of the prebuilt
# answers are replaced per answer by ones of the same length (`_own_values`).
CHAT_ID = "chatcmpl-0000000000000000"
DEFAULT_TOKENS = ("Hello", " from", " the", " bench", " upstream", ".")


def _completion_body() -> bytes:
    return orjson.dumps(
        {
            "id": CHAT_ID,
            "object": "chat.completion",
            "created": CREATED,
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Hello from the bench upstream."},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16},
        }
    )


def _chunk(delta: dict, finish_reason: str | None) -> bytes:
    return orjson.dumps(
        {
            "id": CHAT_ID,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
    )


def answer_tokens(count: int) -> list[str]:
    """The streamed answer's `count` content tokens: the six of the default answer, repeated."""
    return [DEFAULT_TOKENS[i % len(DEFAULT_TOKENS)] for i in range(count)]


def stream_events(tokens: list[str], usage: bool = False) -> list[bytes]:
    """The SSE payloads: role, one event per content token, finish; then (asked with
    stream_options.include_usage) the usage event, as OpenAI-compatible servers send it; then [DONE]."""
    events = [_chunk({"role": "assistant", "content": ""}, None)]
    events += [_chunk({"content": t}, None) for t in tokens]
    events.append(_chunk({}, "stop"))
    if usage:
        events.append(orjson.dumps({"id": CHAT_ID, "object": "chat.completion.chunk", "created": CREATED,
                                    "model": MODEL, "choices": [],
                                    "usage": {"prompt_tokens": 9, "completion_tokens": len(tokens),
                                              "total_tokens": 9 + len(tokens)}}))
    return events + [b"[DONE]"]


_CHAT_ID_BYTES = CHAT_ID.encode()
_CREATED_BYTES = b'"created":%d' % CREATED


def _own_values(answer: bytes, number: int) -> bytes:
    """A prebuilt chat answer with the id and `created` of answer `number` (the same lengths)."""
    return answer.replace(_CHAT_ID_BYTES, b"chatcmpl-%016x" % number).replace(
        _CREATED_BYTES, b'"created":%d' % (CREATED + number % 10**9))


def _response_object(status: str, text: str) -> dict:
    output = [{"type": "message", "id": "msg_bench", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "text": text, "annotations": []}]}] if text else []
    return {"id": "resp_bench", "object": "response", "created_at": CREATED, "status": status, "model": MODEL,
            "output": output, "usage": {"input_tokens": 9, "output_tokens": 7, "total_tokens": 16}}


def responses_events(tokens: list[str]) -> list[bytes]:
    """A Responses stream's SSE events (each with its `event:` line): as many as the chat stream's."""
    def event(kind: str, **fields: object) -> bytes:
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"
    events = [event("response.created", response=_response_object("in_progress", "")),
              event("response.in_progress", response=_response_object("in_progress", ""))]
    events += [event("response.output_text.delta", item_id="msg_bench", output_index=0, content_index=0, delta=t)
               for t in tokens]
    events.append(event("response.completed", response=_response_object("completed", "".join(tokens))))
    return events


def _http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _response(status: bytes, content_type: bytes, body: bytes, keep_alive: bool) -> bytes:
    conn = b"keep-alive" if keep_alive else b"close"
    return (
        b"HTTP/1.1 " + status + b"\r\nContent-Type: " + content_type
        + b"\r\nContent-Length: %d\r\nConnection: %s\r\n\r\n" % (len(body), conn)
        + body
    )


def _stream_response(keep_alive: bool, events: list[bytes]) -> bytes:
    conn = b"keep-alive" if keep_alive else b"close"
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: %s\r\n\r\n" % conn
    )
    return head + b"".join(_http_chunk(e) for e in events) + b"0\r\n\r\n"


def _spaced(keep_alive: bool, events: list[bytes]) -> list[bytes]:
    """The stream as one write per event (the head with the first, the terminator with the last)."""
    whole = _stream_response(keep_alive, events)
    pieces = [_http_chunk(e) for e in events]
    pieces[0] = whole[:whole.index(b"\r\n\r\n") + 4] + pieces[0]
    pieces[-1] += b"0\r\n\r\n"
    return pieces


_MODELS = orjson.dumps(
    {"object": "list", "data": [{"id": MODEL, "object": "model", "created": CREATED, "owned_by": "bench"}]}
)
_NOT_FOUND = orjson.dumps({"error": {"message": "not found", "type": "invalid_request_error", "code": "not_found"}})
_BAD_REQUEST = orjson.dumps({"error": {"message": "bad request", "type": "invalid_request_error", "code": "bad_request"}})

# (path, keep_alive) -> prebuilt bytes (streams: built by `build_streams`, for the answer's length)
_COMPLETION = {k: _response(b"200 OK", b"application/json", _completion_body(), k) for k in (True, False)}
_STREAM: dict[bool, bytes] = {}
_STREAM_PIECES: dict[bool, list[bytes]] = {}  # --event-gap-ms: one write per event
_STREAM_USAGE: dict[bool, bytes] = {}
_STREAM_USAGE_PIECES: dict[bool, list[bytes]] = {}
_RESPONSE: dict[bool, bytes] = {}
_RESPONSE_STREAM: dict[bool, bytes] = {}
_RESPONSE_PIECES: dict[bool, list[bytes]] = {}


def build_streams(tokens: list[str]) -> None:
    """The prebuilt streamed answers (and the Responses answer) for an answer of `tokens`."""
    def sse(events: list[bytes]) -> list[bytes]:
        return [b"data: " + e + b"\n\n" for e in events]
    for k in (True, False):
        _STREAM[k] = _stream_response(k, sse(stream_events(tokens)))
        _STREAM_PIECES[k] = _spaced(k, sse(stream_events(tokens)))
        _STREAM_USAGE[k] = _stream_response(k, sse(stream_events(tokens, True)))
        _STREAM_USAGE_PIECES[k] = _spaced(k, sse(stream_events(tokens, True)))
        _RESPONSE[k] = _response(b"200 OK", b"application/json",
                                 orjson.dumps(_response_object("completed", "".join(tokens))), k)
        _RESPONSE_STREAM[k] = _stream_response(k, responses_events(tokens))
        _RESPONSE_PIECES[k] = _spaced(k, responses_events(tokens))


build_streams(answer_tokens(len(DEFAULT_TOKENS)))
EVENT_GAP_S = 0.0
_MODELS_RESP = {k: _response(b"200 OK", b"application/json", _MODELS, k) for k in (True, False)}
_HEALTH_RESP = {k: _response(b"200 OK", b"application/json", b'{"status":"ok"}', k) for k in (True, False)}
_NOT_FOUND_RESP = {k: _response(b"404 Not Found", b"application/json", _NOT_FOUND, k) for k in (True, False)}
_BAD_REQUEST_RESP = _response(b"400 Bad Request", b"application/json", _BAD_REQUEST, False)
_INJECTED = orjson.dumps({"error": {"message": "injected upstream error", "type": "server_error", "code": "injected"}})
_INJECTED_RESP = {k: _response(b"500 Internal Server Error", b"application/json", _INJECTED, k) for k in (True, False)}
ERROR_EVERY = 0  # --error-every N: every Nth completion fails


def _wants_stream(body: bytes) -> bool:
    return _stream_asked(body)[0]


def _stream_asked(body: bytes) -> tuple[bool, bool]:
    """(a stream is asked for, with its usage event)."""
    if b'"stream"' not in body:
        return False, False
    try:
        req = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False, False
    if not isinstance(req, dict) or req.get("stream") is not True:
        return False, False
    options = req.get("stream_options")
    return True, isinstance(options, dict) and options.get("include_usage") is True


class Stats:
    """Counters the harness reads to check that every request really reached the upstream."""

    connections = 0
    completions = 0


def _stats_response(keep_alive: bool) -> bytes:
    body = orjson.dumps({"connections": Stats.connections, "completions": Stats.completions})
    return _response(b"200 OK", b"application/json", body, keep_alive)


class UpstreamProtocol(asyncio.Protocol):
    """One connection; answers each parsed request synchronously, in order."""

    __slots__ = ("transport", "parser", "url", "body")

    def __init__(self) -> None:
        Stats.connections += 1
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.write(_BAD_REQUEST_RESP)
                self.transport.close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.url = b""
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        transport = self.transport
        if transport is None:
            return
        keep = self.parser.should_keep_alive()
        method = self.parser.get_method()
        path = self.url.split(b"?", 1)[0]
        if method == b"POST" and path == b"/v1/chat/completions":
            body = b"".join(self.body)
            Stats.completions += 1
            stream, usage = _stream_asked(body)
            number = Stats.completions
            if ERROR_EVERY and number % ERROR_EVERY == 0:
                transport.write(_INJECTED_RESP[keep])
            elif not stream:
                transport.write(_own_values(_COMPLETION[keep], number))
            elif EVENT_GAP_S > 0:
                pieces = (_STREAM_USAGE_PIECES if usage else _STREAM_PIECES)[keep]
                self._write_spaced([_own_values(piece, number) for piece in pieces], keep)
                return
            else:
                transport.write(_own_values((_STREAM_USAGE if usage else _STREAM)[keep], number))
        elif method == b"POST" and path == b"/v1/responses":
            Stats.completions += 1
            if not _wants_stream(b"".join(self.body)):
                transport.write(_RESPONSE[keep])
            elif EVENT_GAP_S > 0:
                self._write_spaced(_RESPONSE_PIECES[keep], keep)
                return
            else:
                transport.write(_RESPONSE_STREAM[keep])
        elif method == b"GET" and path == b"/v1/models":
            transport.write(_MODELS_RESP[keep])
        elif method == b"GET" and path == b"/stats":
            transport.write(_stats_response(keep))
        elif method == b"GET" and path in (b"/health", b"/healthz", b"/readyz"):
            transport.write(_HEALTH_RESP[keep])
        else:
            transport.write(_NOT_FOUND_RESP[keep])
        if not keep:
            transport.close()

    def _write_spaced(self, pieces: list[bytes], keep: bool) -> None:
        """Head and first event now, each later event EVENT_GAP_S after the one before (one client at
        a time per connection: the bench clients never pipeline streams)."""
        loop = asyncio.get_running_loop()

        def write(i: int) -> None:
            transport = self.transport
            if transport is None:
                return
            transport.write(pieces[i])
            if i + 1 < len(pieces):
                loop.call_later(EVENT_GAP_S, write, i + 1)
            elif not keep:
                transport.close()

        write(0)


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(UpstreamProtocol, host, port, backlog=4096, reuse_address=True)
    bound = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"PORT {bound}\n")
    sys.stdout.flush()
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    async with server:
        await stop


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--event-gap-ms", type=float, default=0.0,
                    help="stream each SSE event in its own write, this many ms apart (default: all in one write)")
    ap.add_argument("--stream-tokens", type=int, default=len(DEFAULT_TOKENS),
                    help="content tokens of a streamed answer, one event each (default %(default)s)")
    ap.add_argument("--error-every", type=int, default=0,
                    help="answer every Nth completion with a 500 error (default 0: never)")
    args = ap.parse_args(argv)
    if not 0 <= args.event_gap_ms <= 1000:
        ap.error("--event-gap-ms must be in 0..1000")
    if args.error_every < 0:
        ap.error("--error-every must be 0 or more")
    if not 1 <= args.stream_tokens <= 100_000:
        ap.error("--stream-tokens must be in 1..100000")
    build_streams(answer_tokens(args.stream_tokens))
    global EVENT_GAP_S, ERROR_EVERY
    EVENT_GAP_S = args.event_gap_ms / 1000
    ERROR_EVERY = args.error_every
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        ap.error("the bench upstream binds loopback only")
    import uvloop

    uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
