"""Per-model quality predictors over prompt features: kNN, logistic, matrix factorisation.

All map features (n, d) to predicted quality (n, m) in [0, 1] and store as plain arrays,
so a trained router loads with numpy alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

KINDS = ("knn", "logistic", "mf")


@dataclass(frozen=True)
class KnnPredictor:
    """Similarity-weighted mean of the k nearest training prompts' scores (cosine on unit vectors)."""

    keys: np.ndarray  # (n_train, d)
    values: np.ndarray  # (n_train, m)
    k: int
    kind: str = field(default="knn", init=False)

    def predict(self, x: np.ndarray) -> np.ndarray:
        out = np.empty((x.shape[0], self.values.shape[1]), dtype=np.float32)
        k = min(self.k, len(self.keys))
        for start in range(0, x.shape[0], 512):  # bounded memory for the similarity block
            sims = x[start : start + 512] @ self.keys.T
            top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
            w = np.maximum(np.take_along_axis(sims, top, axis=1), 0.0) + 1e-6
            out[start : start + 512] = np.einsum("nk,nkm->nm", w, self.values[top]) / w.sum(axis=1, keepdims=True)
        return np.clip(out, 0.0, 1.0)  # rounding can step a hair past 1

    def arrays(self) -> dict[str, np.ndarray]:
        return {"keys": self.keys, "values": self.values, "k": np.array(self.k)}


@dataclass(frozen=True)
class BilinearPredictor:
    """quality(m, x) = sigmoid(v_m . (x W) + b_m). Logistic: W is the identity (one model per column);
    matrix factorisation: W projects to a small shared space where each model is a vector."""

    w: np.ndarray | None  # (d, r), None for the identity
    v: np.ndarray  # (r, m)
    b: np.ndarray  # (m,)
    kind: str = "logistic"

    def predict(self, x: np.ndarray) -> np.ndarray:
        z = x if self.w is None else x @ self.w
        return _sigmoid(z @ self.v + self.b).astype(np.float32)

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"v": self.v, "b": self.b}
        if self.w is not None:
            out["w"] = self.w
        return out


Predictor = KnnPredictor | BilinearPredictor


def fit_knn(x: np.ndarray, y: np.ndarray, k: int) -> KnnPredictor:
    return KnnPredictor(x.astype(np.float32), y.astype(np.float32), k)


def fit_bilinear(
    x: np.ndarray, y: np.ndarray, rank: int | None, l2: float, epochs: int = 300, lr: float = 0.05, seed: int = 0,
) -> BilinearPredictor:
    """Full-batch Adam on the cross-entropy of soft labels y in [0, 1]."""
    rng = np.random.default_rng(seed)
    n, d = x.shape
    m = y.shape[1]
    params: dict[str, np.ndarray] = {"v": np.zeros((d if rank is None else rank, m)),
                                      "b": np.log((y.mean(0) + 1e-3) / (1 - y.mean(0) + 1e-3))}
    if rank is not None:
        params["w"] = rng.normal(0, 1 / np.sqrt(d), (d, rank))
        params["v"] = rng.normal(0, 0.1, (rank, m))
    state = {k: (np.zeros_like(p), np.zeros_like(p)) for k, p in params.items()}
    x64 = x.astype(np.float64)
    for t in range(1, epochs + 1):
        z = x64 if rank is None else x64 @ params["w"]
        p = _sigmoid(z @ params["v"] + params["b"])
        g = (p - y) / n  # d loss / d logit
        grads = {"v": z.T @ g + l2 * params["v"], "b": g.sum(0)}
        if rank is not None:
            grads["w"] = x64.T @ (g @ params["v"].T) + l2 * params["w"]
        for k, gk in grads.items():
            m1, m2 = state[k]
            m1 = 0.9 * m1 + 0.1 * gk
            m2 = 0.999 * m2 + 0.001 * gk * gk
            state[k] = (m1, m2)
            params[k] -= lr * (m1 / (1 - 0.9**t)) / (np.sqrt(m2 / (1 - 0.999**t)) + 1e-8)
    return BilinearPredictor(params.get("w"), params["v"], params["b"], "logistic" if rank is None else "mf")


def predictor_from_arrays(kind: str, arrays: dict[str, np.ndarray]) -> Predictor:
    if kind == "knn":
        return KnnPredictor(arrays["keys"], arrays["values"], int(arrays["k"]))
    if kind in ("logistic", "mf"):
        return BilinearPredictor(arrays.get("w"), arrays["v"], arrays["b"], kind)
    raise ValueError(f"unknown predictor kind {kind!r}")


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))
