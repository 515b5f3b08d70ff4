"""A small multinomial logistic regression in numpy: the classifier head over embeddings.

Trained by full-batch gradient descent with L2; at a few thousand rows and a few hundred
dimensions this takes well under a second and needs no ML library at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LinearHead:
    labels: tuple[str, ...]
    weights: np.ndarray  # (dim, n_labels)
    bias: np.ndarray  # (n_labels,)

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        return _softmax(x @ self.weights + self.bias)


def fit_linear_head(
    x: np.ndarray, y: list[str], l2: float = 1e-3, epochs: int = 300, lr: float = 0.5,
    temperature: float = 1.0,
) -> LinearHead:
    labels = tuple(sorted(set(y)))
    index = {label: i for i, label in enumerate(labels)}
    n, d = x.shape
    k = len(labels)
    onehot = np.zeros((n, k), dtype=np.float64)
    onehot[np.arange(n), [index[v] for v in y]] = 1.0
    # Balance classes so a domain with many examples does not swamp one with few.
    counts = onehot.sum(axis=0)
    sample_w = (onehot @ (n / (k * np.maximum(counts, 1))))[:, None]
    xs = x.astype(np.float64) / temperature
    b = np.zeros(k)
    if n < d:
        # Fewer rows than dimensions (char n-grams: 4096): w stays in the span of the rows,
        # w = xs.T @ a, so descend on a with the n x n Gram matrix. The same iterates, exactly,
        # at a fraction of the cost (the primal's (n, d) products dominate startup otherwise).
        gram = xs @ xs.T
        a = np.zeros((n, k))
        for _ in range(epochs):
            p = _softmax(gram @ a + b)
            g = (p - onehot) * sample_w / n
            a -= lr * (g + l2 * a)
            b -= lr * g.sum(axis=0)
        w = xs.T @ a
    else:
        w = np.zeros((d, k))
        for _ in range(epochs):
            p = _softmax(xs @ w + b)
            g = (p - onehot) * sample_w / n
            w -= lr * (xs.T @ g + l2 * w)
            b -= lr * g.sum(axis=0)
    return LinearHead(labels, (w / temperature).astype(np.float32), b.astype(np.float32))


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)
