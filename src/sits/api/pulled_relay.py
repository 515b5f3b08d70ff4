"""What the stream relays share for a door that pulls (the HTTP/2 door): the relay as an async
iterable whose iterator, `chunks()`, is made only when a door asks for it, and closed through the
relay when that door's client goes away. A door that pushes (`push(sink)`) never makes it.

The iterators themselves are async generators, which mypyc does not compile: they live in
`api/pulled_relays.py` and drive the relay's compiled steps."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable


class PulledSink:
    """Where a pulled relay's per-chunk step sends: it holds the chunk, for `chunks()` to yield."""

    __slots__ = ("chunk", "on_drained")

    def __init__(self) -> None:
        self.chunk = b""
        self.on_drained: Callable[[], None] | None = None

    def send(self, chunk: bytes) -> bool:
        self.chunk = chunk
        return False

    def take(self) -> bytes:
        chunk, self.chunk = self.chunk, b""
        return chunk


class PulledRelay:
    __slots__ = ("_pulled",)

    def __init__(self) -> None:
        self._pulled: AsyncGenerator[bytes, None] | None = None  # chunks(), made only for a door that pulls

    def chunks(self) -> AsyncGenerator[bytes, None]:
        raise NotImplementedError

    def __aiter__(self) -> AsyncIterator[bytes]:
        pulled = self._pulled = self.chunks()
        return pulled

    async def aclose(self) -> None:
        """What a pulling door calls when its client went away: the pull ends, and with it the upstream."""
        if self._pulled is not None:
            await self._pulled.aclose()
