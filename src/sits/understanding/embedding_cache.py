"""On-disk cache of data-set embeddings, so repeated training and evaluation runs are fast.

Keyed by the embedder's name and a hash of the exact texts; a stale or corrupt file is
recomputed. Used by the offline commands (train, eval), never on the request path.

A long run checkpoints: the texts are embedded in chunks of `CHUNK_ROWS`, each saved as it
finishes under a key of its own texts, so a run stopped early (a 25-minute e5 pass) resumes
at the first missing chunk. Once every chunk is there they are joined into one file and
removed. A "+"-joined embedder is cached part by part, so its slow part (e5) is shared with
the runs that use that part alone.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sits.understanding.embedders import ConcatEmbedder, Embedder

DEFAULT_CACHE_DIR = Path(".sits-data/cache/understanding")  # .sits-data/ is git-ignored
CHUNK_ROWS = 256  # e5 on one thread: about half a minute to a few minutes of work lost at most


def cache_dir_from_env(env: dict[str, str] | os._Environ[str]) -> Path:
    return Path(env.get("SITS_CACHE_DIR", str(DEFAULT_CACHE_DIR)))


def cached_embed(
    embedder: Embedder, texts: Sequence[str], cache_dir: Path | None, batch: int = 64, chunk_rows: int = CHUNK_ROWS,
) -> np.ndarray:
    if isinstance(embedder, ConcatEmbedder):
        return embedder.combine([cached_embed(p, texts, cache_dir, batch, chunk_rows) for p in embedder.parts])
    if cache_dir is None:
        return _embed_batched(embedder, texts, batch)
    folder = cache_dir / embedder.name
    path = folder / f"{_digest(texts)}-{len(texts)}.npy"
    arr = _load(path, (len(texts), embedder.dim))
    if arr is not None:
        return arr
    chunk_paths = []
    blocks = []
    for start in range(0, len(texts), chunk_rows):
        part = texts[start : start + chunk_rows]
        chunk_path = folder / "chunks" / f"{_digest(part)}-{len(part)}.npy"
        block = _load(chunk_path, (len(part), embedder.dim))
        if block is None:
            block = _embed_batched(embedder, part, batch)
            _save(chunk_path, block)
        chunk_paths.append(chunk_path)
        blocks.append(block)
    arr = np.concatenate(blocks) if blocks else np.zeros((0, embedder.dim), dtype=np.float32)
    _save(path, arr)
    for chunk_path in chunk_paths:
        chunk_path.unlink(missing_ok=True)
    return arr


def _digest(texts: Sequence[str]) -> str:
    return hashlib.sha256("\x1e".join(texts).encode("utf-8")).hexdigest()[:24]


def _load(path: Path, shape: tuple[int, int]) -> np.ndarray | None:
    """The cached array, or None when it is missing, unreadable or of another shape (stale)."""
    if not path.exists():
        return None
    try:
        arr = np.load(path)
    except (OSError, ValueError, EOFError):
        return None
    return arr if arr.shape == shape else None


def _save(path: Path, arr: np.ndarray) -> None:
    """Write-then-rename, so an interrupted write never leaves a half file under the real name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp, arr)
    tmp.replace(path)


def _embed_batched(embedder: Embedder, texts: Sequence[str], batch: int) -> np.ndarray:
    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    return np.concatenate([embedder.embed(texts[i : i + batch]) for i in range(0, len(texts), batch)])
