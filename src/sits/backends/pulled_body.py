"""An upstream body pulled as an async iterator.

An async generator, kept out of `upstream_response.py`: that module is compiled by mypyc, which
compiles no async generators (docs/hot-path.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sits.backends.upstream_response import UpstreamResponse


async def pulled_body(response: UpstreamResponse) -> AsyncIterator[bytes]:
    """Each `next_chunk()` until the body ends (b""); the response is closed however the iteration ends."""
    try:
        while True:
            chunk = await response.next_chunk()
            if not chunk:
                return
            yield chunk
    finally:
        response.close()
