"""Synthetic strong/weak outcomes that a router can learn: two clusters of unit vectors, and the weak
model fails on cluster B only (the strong one is right 90% of the time on both)."""

from __future__ import annotations

import numpy as np


def two_clusters(n: int, seed: int = 0, spread: float = 0.3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(vectors, scores as [strong, weak] columns, each row's cluster 0/1)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(2, 16))
    group = rng.integers(0, 2, n)
    x = centers[group] + spread * rng.normal(size=(n, 16))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    strong = (rng.random(n) < 0.9).astype(float)
    weak = np.where(group == 1, rng.random(n) < 0.2, rng.random(n) < 0.85).astype(float)
    return x.astype(np.float32), np.stack([strong, weak], axis=1), group
