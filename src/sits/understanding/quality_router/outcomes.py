"""Routing-outcome data (../shared/data/routing format): prompts with per-model scores and costs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sits.errors import ConfigError


@dataclass(frozen=True)
class Outcomes:
    """Rows x models. `costs` is None when the source published none."""

    ids: tuple[str, ...]
    prompts: tuple[str, ...]
    models: tuple[str, ...]
    scores: np.ndarray  # (n, m) in [0, 1]
    costs: np.ndarray | None  # (n, m) USD per prompt
    dropped: int = 0  # rows in the file left out for lacking some model's score

    def __len__(self) -> int:
        return len(self.prompts)

    def subset(self, index: Sequence[int] | np.ndarray) -> Outcomes:
        idx = np.asarray(index, dtype=int)
        return Outcomes(tuple(self.ids[i] for i in idx), tuple(self.prompts[i] for i in idx), self.models,
                        self.scores[idx], None if self.costs is None else self.costs[idx])

    def select_models(self, models: Sequence[str]) -> Outcomes:
        cols = [self.models.index(m) for m in models]
        return Outcomes(self.ids, self.prompts, tuple(models), self.scores[:, cols],
                        None if self.costs is None else self.costs[:, cols])


def prompt_key(prompt: str) -> str:
    """A short stable hash of a prompt: what a router remembers of its training prompts."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]


def load_outcomes(path: Path) -> Outcomes:
    try:
        # split("\n"), not splitlines(): prompts may hold U+2028 and other line separators.
        lines = path.read_text("utf-8").split("\n")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{n}: not JSON: {exc.msg}") from None
        if not isinstance(row.get("prompt"), str) or not isinstance(row.get("scores"), dict) or not row["scores"]:
            raise ConfigError(f"{path}:{n}: need 'prompt' (string) and 'scores' (object of model: score)")
        rows.append(row)
    if not rows:
        raise ConfigError(f"{path}: no rows")
    # The models are those most rows score; a few source rows lack some models and are left out.
    counts: dict[str, int] = {}
    for r in rows:
        for m in r["scores"]:
            counts[m] = counts.get(m, 0) + 1
    models = tuple(m for m in counts if counts[m] >= len(rows) / 2)
    total = len(rows)
    rows = [r for r in rows if all(m in r["scores"] for m in models)]
    if not rows:
        raise ConfigError(f"{path}: no row scores every model")
    has_costs = all(isinstance(r.get("costs"), dict) and set(models) <= set(r["costs"]) for r in rows)
    scores = np.zeros((len(rows), len(models)), dtype=np.float32)
    costs = np.zeros_like(scores) if has_costs else None
    for i, r in enumerate(rows):
        scores[i] = [float(r["scores"][m]) for m in models]
        if costs is not None:
            costs[i] = [float(r["costs"][m]) for m in models]
    ids = tuple(str(r.get("id", i)) for i, r in enumerate(rows))
    return Outcomes(ids, tuple(r["prompt"] for r in rows), models, np.clip(scores, 0, 1), costs, total - len(rows))
