"""A trained router on disk: `router.json` (what it is) and `arrays.npz` (its numbers).

It remembers hashes of its training prompts so evaluation can keep to unseen prompts.
Loading needs numpy only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sits.errors import ConfigError
from sits.understanding.quality_router.predictors import Predictor, predictor_from_arrays

FORMAT_VERSION = 1


@dataclass(frozen=True)
class TrainedRouter:
    embedder: str
    models: tuple[str, ...]
    mean_costs: tuple[float, ...] | None  # USD per prompt in training; the request-time cost estimate
    predictor: Predictor
    train_keys: frozenset[str]
    selection: dict[str, float]  # validation score of each candidate that was tried

    def predict(self, vectors: np.ndarray) -> np.ndarray:
        """Predicted quality (n, len(models)) in [0, 1]."""
        return np.clip(self.predictor.predict(np.atleast_2d(vectors)), 0.0, 1.0)


def save_router(router: TrainedRouter, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT_VERSION, "embedder": router.embedder, "models": list(router.models),
            "mean_costs": None if router.mean_costs is None else list(router.mean_costs),
            "kind": router.predictor.kind, "selection": router.selection,
            "train_keys": sorted(router.train_keys)}
    np.savez_compressed(directory / "arrays.npz", **router.predictor.arrays())
    (directory / "router.json").write_text(json.dumps(meta, indent=1), "utf-8")


def load_router(directory: Path) -> TrainedRouter:
    try:
        meta = json.loads((directory / "router.json").read_text("utf-8"))
        with np.load(directory / "arrays.npz") as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load router from {directory}: {exc}") from None
    if meta.get("format") != FORMAT_VERSION:
        raise ConfigError(f"{directory}: router format {meta.get('format')!r}, expected {FORMAT_VERSION}")
    costs = meta.get("mean_costs")
    return TrainedRouter(meta["embedder"], tuple(meta["models"]), None if costs is None else tuple(costs),
                         predictor_from_arrays(meta["kind"], arrays), frozenset(meta.get("train_keys", ())),
                         dict(meta.get("selection", {})))
