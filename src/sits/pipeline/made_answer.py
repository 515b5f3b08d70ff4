"""An answer the gateway made itself (a cache hit, the static template, a workflow's result), streamed:
it is complete, so it goes out at once and nothing waits for room.

Async generators, kept out of `answer.py`: that module is compiled by mypyc, which compiles no async
generators (docs/hot-path.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable


async def push_all(chunks: AsyncIterator[bytes], deliver: Callable[[bytes], bool]) -> None:
    """`Answer.push` for an answer the gateway made: it is complete, so nothing waits for room."""
    async for chunk in chunks:
        deliver(chunk)


async def replay(events: list[bytes]) -> AsyncIterator[bytes]:
    """An answer the gateway made, as one chunk: it is complete, so a door writes it at once."""
    yield b"".join(events)
