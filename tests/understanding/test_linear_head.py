"""The softmax head: the Gram-matrix descent (rows < dimensions) gives the primal descent's weights."""

from __future__ import annotations

import numpy as np

from sits.understanding.linear_head import _softmax, fit_linear_head


def _primal(x: np.ndarray, y: list[str], epochs: int, l2: float = 1e-3, lr: float = 0.5, temperature: float = 0.1):
    labels = sorted(set(y))
    n, d = x.shape
    k = len(labels)
    onehot = np.zeros((n, k))
    onehot[np.arange(n), [labels.index(v) for v in y]] = 1.0
    sample_w = (onehot @ (n / (k * onehot.sum(axis=0))))[:, None]
    xs, w, b = x.astype(np.float64) / temperature, np.zeros((d, k)), np.zeros(k)
    for _ in range(epochs):
        g = (_softmax(xs @ w + b) - onehot) * sample_w / n
        w -= lr * (xs.T @ g + l2 * w)
        b -= lr * g.sum(axis=0)
    return w / temperature, b


def test_wide_inputs_fit_the_same_head_as_plain_gradient_descent():
    rng = np.random.default_rng(0)
    x = rng.random((30, 200)).astype(np.float32)
    y = [("a", "b", "c")[i % 3] for i in range(30)]
    head = fit_linear_head(x, y, epochs=50, temperature=0.1)
    w, b = _primal(x, y, epochs=50)
    assert head.labels == ("a", "b", "c")
    assert np.allclose(head.weights, w, atol=1e-5) and np.allclose(head.bias, b, atol=1e-6)


def test_tall_inputs_separate_their_classes():
    rng = np.random.default_rng(1)
    centres = np.eye(4, dtype=np.float32)
    x = np.concatenate([c + 0.05 * rng.standard_normal((20, 4)).astype(np.float32) for c in centres])
    y = [label for label in "wxyz" for _ in range(20)]
    head = fit_linear_head(x, y, temperature=0.1)
    assert [head.labels[i] for i in head.probabilities(x).argmax(axis=1)] == y
