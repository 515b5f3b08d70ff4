"""Which events of a real llama-server stream the translated surfaces' chat reader reads without parsing.

Starts the embedded tiny model under PyPI's llama-server (as the test suite does), asks for a short
stream with its usage event, feeds it to `ChatStreamReader` one event a read and reports which shapes
the reader knew: the text events' (foreseen from the role event), the finish event's and the usage
event's, and how many of the stream's closing events it read by their bytes; then whether a second
stream's role event is read by the opening the first one left (`translate/stream_opening.py`). A probe of the product's
decisions against a real server, not a test: run it after a llama.cpp upgrade.

    python -m research.llama_stream_probe
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import aiohttp

from sits.backends.local.model_files import resolve_gguf
from sits.translate import stream_opening
from sits.translate.chat_stream import ChatStreamReader
from tests.llama_server import SMOLLM2, LlamaServer

_UNKNOWN = b"\n\n"  # the reader's "nothing learnt" bytes


async def probe() -> None:
    server = await LlamaServer(resolve_gguf(SMOLLM2, Path(tempfile.mkdtemp(prefix="sits-probe-")))).start()
    try:
        body = {"model": "m", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 8, "stream": True,
                "stream_options": {"include_usage": True}}
        streams = []
        for _ in range(2):  # a connection each: the server may close one after a stream
            async with aiohttp.ClientSession() as session, \
                    session.post(server.url + "/chat/completions", json=body) as r:
                streams.append([e for e in (await r.read()).split(b"\n\n") if e])
    finally:
        await server.stop()
    events, later = streams
    reader = ChatStreamReader("llama-probe")
    foreseen = False
    for n, event in enumerate(events):
        reader.feed(event + b"\n\n")
        if n == 0:
            foreseen = reader.lone_text(events[1] + b"\n\n") is not None if len(events) > 1 else False
    by_bytes = [e for e in events if reader._known_end(e, [])]  # noqa: SLF001 - the probe's question
    print(f"{len(events)} events; text shape foreseen from the role event: {foreseen}")
    print(f"closing events read by their bytes: {len(by_bytes)}")
    for event in by_bytes:
        print("  ", event[:120])
    # the next stream of the same server: its role event read by the opening the first one left
    opening = stream_opening.OPENINGS.get("llama-probe")
    second = ChatStreamReader("llama-probe")
    opened = opening is not None and second._opened(later[0], opening, [])  # noqa: SLF001
    foreseen = opened and second.lone_text(later[1] + b"\n\n") is not None
    print(f"second stream (its own id and created): role event read by the learnt opening: {opened}; "
          f"its text shape foreseen: {foreseen}")


if __name__ == "__main__":
    asyncio.run(probe())
