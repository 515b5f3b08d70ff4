"""A minimal pipelined Redis connection for the limiter's two scripts: EVALSHA and PING, nothing else.

Why not redis-py here: a general client spends several times SITS' whole per-request limit budget on one
command (connection-pool checkout, an async lock, a generic encoder and reply parser written in Python;
`bench/bench_instructions.py --tenants`). The limiter needs one command shape and small replies, so
this writes the command's bytes straight onto one connection and matches replies to callers in order
(Redis answers a connection's commands in the order it received them): concurrent requests share the
connection, pipelined, with no lock and no task per call. A single timer checks the oldest waiting
call; past `timeout_s`, the connection is closed and every waiting call fails, which is how the
limiter learns that Redis is away.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit


class RedisUnavailable(Exception):
    """Redis could not be reached, or did not answer in time."""


class RedisReplyError(Exception):
    """Redis answered with an error (e.g. NOSCRIPT, a script error)."""


def _encode(args: tuple[Any, ...] | list[Any]) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        elif isinstance(arg, float) and arg.is_integer():
            data = b"%d" % arg
        else:
            data = str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class _Replies(asyncio.Protocol):
    """Parses RESP2 replies and hands each to the oldest waiting future."""

    def __init__(self, wire: RedisWire) -> None:
        self._wire = wire
        self._buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._wire._lost(self, exc)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer + data if self._buffer else data
        at = 0
        waiting = self._wire._waiting
        while at < len(buffer):  # not past the end: a reply cut short is the only thing _Incomplete stops
            try:
                reply, at_next = _parse(buffer, at)
            except _Incomplete:
                break
            at = at_next
            if waiting:
                waiting.popleft()[0](reply)
        self._buffer = buffer[at:]


class _Incomplete(Exception):
    pass


def _parse(buffer: bytes, at: int) -> tuple[Any, int]:
    end = buffer.find(b"\r\n", at)
    if end < 0:
        raise _Incomplete
    kind, line = buffer[at:at + 1], buffer[at + 1:end]
    at = end + 2
    if kind == b":":
        return int(line), at
    if kind == b"$":
        size = int(line)
        if size < 0:
            return None, at
        if len(buffer) < at + size + 2:
            raise _Incomplete
        return buffer[at:at + size], at + size + 2
    if kind == b"*":
        count = int(line)
        if count < 0:
            return None, at
        items = []
        for _ in range(count):
            item, at = _parse(buffer, at)
            items.append(item)
        return items, at
    if kind == b"+":
        return line, at
    if kind == b"-":
        return RedisReplyError(line.decode("utf-8", "replace")), at
    raise RedisUnavailable(f"unexpected reply from Redis: {buffer[at - 2 - len(line) - 1:at][:40]!r}")


def _ignore(reply: Any) -> None:
    pass


class Script:
    """A Lua script run by its SHA-1 (EVALSHA), loaded once with EVAL when the server does not know it."""

    __slots__ = ("source", "sha")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


class RedisWire:
    def __init__(self, url: str, timeout_s: float = 0.5) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ValueError(f"the limits' Redis URL must be redis:// or rediss://, got {url!r}")
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 6379
        self._tls = parts.scheme == "rediss"
        self._password = unquote(parts.password) if parts.password else None
        self._user = unquote(parts.username) if parts.username else None
        path = parts.path.strip("/")
        self._db = int(path) if path else 0
        self._timeout_s = timeout_s
        self._protocol: _Replies | None = None
        self._connecting: asyncio.Future[_Replies] | None = None
        self._waiting: deque[tuple[Callable[[Any], None], float]] = deque()  # reply handlers, in order
        self._watchdog: asyncio.TimerHandle | None = None

    @property
    def connected(self) -> bool:
        return self._protocol is not None

    def send(self, command: bytes, on_reply: Callable[[Any], None]) -> None:
        """Send an encoded command; `on_reply` gets the reply, a `RedisReplyError` or `RedisUnavailable`,
        once (a script the server does not know answers NOSCRIPT: see `load`)."""
        if self._protocol is not None:
            self._write(command, on_reply)
        else:  # (re)connect first, off the caller's path
            asyncio.get_running_loop().create_task(self._connect_then_send(command, on_reply))

    def load(self, script: Script) -> None:
        """Load `script` (after a NOSCRIPT answer: a restarted server); commands sent after it can run it."""
        self.send(_encode(["SCRIPT", "LOAD", script.source]), _ignore)

    async def _connect_then_send(self, command: bytes, on_reply: Callable[[Any], None]) -> None:
        try:
            await self._connect()
        except RedisUnavailable as exc:
            on_reply(exc)
            return
        self._write(command, on_reply)

    def _write(self, command: bytes, on_reply: Callable[[Any], None]) -> None:
        protocol = self._protocol
        if protocol is None or protocol.transport is None:
            on_reply(RedisUnavailable("connection to Redis lost"))
            return
        loop = asyncio.get_running_loop()
        self._waiting.append((on_reply, loop.time() + self._timeout_s))
        protocol.transport.write(command)
        if self._watchdog is None:
            self._watchdog = loop.call_later(self._timeout_s, self._check_oldest)

    async def ping(self) -> None:
        await self._call(b"*1\r\n$4\r\nPING\r\n")

    async def call(self, command: bytes) -> Any:
        """Send an encoded command and wait for its reply (outside the request path: the dashboard)."""
        reply = await self._call(command)
        if isinstance(reply, RedisReplyError):
            raise reply
        return reply

    async def _call(self, command: bytes) -> Any:
        if self._protocol is None:
            await self._connect()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def resolve(reply: Any) -> None:
            if not future.done():
                if isinstance(reply, Exception):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
        self._write(command, resolve)
        return await future

    def _check_oldest(self) -> None:
        """Past its deadline, the oldest call means a stuck connection: close it (all its calls fail)."""
        self._watchdog = None
        if not self._waiting:
            return
        loop = asyncio.get_running_loop()
        oldest = self._waiting[0][1]
        if loop.time() >= oldest and self._protocol is not None and self._protocol.transport is not None:
            self._fail_all(RedisUnavailable(f"Redis did not answer within {self._timeout_s}s"))
            self._protocol.transport.abort()
            self._protocol = None
            return
        self._watchdog = loop.call_later(max(0.001, oldest - loop.time()), self._check_oldest)

    async def _connect(self) -> _Replies:
        if self._connecting is not None:
            return await asyncio.shield(self._connecting)
        loop = asyncio.get_running_loop()
        self._connecting = loop.create_future()
        try:
            context = ssl.create_default_context() if self._tls else None
            _, protocol = await asyncio.wait_for(loop.create_connection(
                lambda: _Replies(self), self._host, self._port, ssl=context), self._timeout_s)
            self._protocol = protocol
            if self._password is not None:
                await self._call(_encode(["AUTH", self._user, self._password] if self._user
                                         else ["AUTH", self._password]))
            if self._db:
                await self._call(_encode(["SELECT", self._db]))
        except (OSError, TimeoutError, asyncio.TimeoutError, RedisReplyError) as exc:
            self._protocol = None
            error = RedisUnavailable(f"cannot connect to Redis at {self._host}:{self._port}: {exc or type(exc).__name__}")
            self._connecting.set_exception(error)
            self._connecting.exception()  # retrieved: no "never retrieved" warning when nobody else waits
            self._connecting = None
            raise error from None
        self._connecting.set_result(protocol)
        self._connecting = None
        return protocol

    def _lost(self, protocol: _Replies, exc: Exception | None) -> None:
        if self._protocol is protocol:
            self._protocol = None
        self._fail_all(RedisUnavailable(f"connection to Redis lost: {exc or 'closed by the server'}"))

    def _fail_all(self, error: Exception) -> None:
        waiting, self._waiting = self._waiting, deque()
        for on_reply, _ in waiting:
            on_reply(error)

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None
