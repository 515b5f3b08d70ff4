"""On-disk cache of data-set embeddings, so repeated training and evaluation runs are fast.

Keyed by the embedder's name and a hash of the exact texts; a stale or corrupt file is
recomputed. Used by the offline commands (train, eval), never on the request path.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sits.understanding.embedders import Embedder

DEFAULT_CACHE_DIR = Path(".sits-data/cache/understanding")  # .sits-data/ is git-ignored


def cache_dir_from_env(env: dict[str, str] | os._Environ[str]) -> Path:
    return Path(env.get("SITS_CACHE_DIR", str(DEFAULT_CACHE_DIR)))


def cached_embed(embedder: Embedder, texts: Sequence[str], cache_dir: Path | None, batch: int = 64) -> np.ndarray:
    if cache_dir is None:
        return _embed_batched(embedder, texts, batch)
    digest = hashlib.sha256("\x1e".join(texts).encode("utf-8")).hexdigest()[:24]
    path = cache_dir / embedder.name / f"{digest}-{len(texts)}.npy"
    if path.exists():
        try:
            arr = np.load(path)
            if arr.shape == (len(texts), embedder.dim):
                return arr
        except (OSError, ValueError):
            pass
    arr = _embed_batched(embedder, texts, batch)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, arr)
    tmp.replace(path)
    return arr


def _embed_batched(embedder: Embedder, texts: Sequence[str], batch: int) -> np.ndarray:
    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    return np.concatenate([embedder.embed(texts[i : i + batch]) for i in range(0, len(texts), batch)])
