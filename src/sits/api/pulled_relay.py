"""What the stream relays share for a door that pulls (the HTTP/2 door): the relay as an async
iterable whose iterator, `chunks()`, is made only when a door asks for it, and closed through the
relay when that door's client goes away. A door that pushes (`push(sink)`) never makes it."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator


class PulledRelay:
    __slots__ = ()
    _pulled: AsyncGenerator[bytes, None] | None  # a slot of the relay's own

    def chunks(self) -> AsyncGenerator[bytes, None]:
        raise NotImplementedError

    def __aiter__(self) -> AsyncIterator[bytes]:
        self._pulled = self.chunks()
        return self._pulled

    async def aclose(self) -> None:
        """What a pulling door calls when its client went away: the pull ends, and with it the upstream."""
        if self._pulled is not None:
            await self._pulled.aclose()
