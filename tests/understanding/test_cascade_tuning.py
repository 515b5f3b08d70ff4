"""The cross-validated sweep that picks the cascade's margin bar from training rows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sits.understanding.cascade_tuning import cross_validated_sweep
from sits.understanding.embedders import CharNgramEmbedder

ROWS = [(f"{word} {topic} number {i}", topic) for topic, words in
        (("weather", ("rain", "sunny", "storm", "cloudy")), ("food", ("pasta", "salad", "soup", "bread")),
         ("sport", ("football", "tennis", "hockey", "rugby"))) for word in words for i in range(3)]


class OracleEmbedder:
    """Knows every row's label: stands in for an accurate model (cross-validated accuracy 1.0)."""

    name, dim = "oracle", 3

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        topics = ("weather", "food", "sport")
        return np.asarray([[1.0 if t in text else 0.0 for t in topics] for text in texts], dtype=np.float32)


def test_sweep_escalates_more_as_the_bar_rises_and_reaches_the_accurate_models_accuracy():
    sweep = cross_validated_sweep([t for t, _ in ROWS], [label for _, label in ROWS], CharNgramEmbedder(dim=64),
                                  OracleEmbedder(), folds=3, seeds=(0, 1), grid=(0.0, 0.2, 0.5, 1.01))
    assert sweep.accurate_accuracy == 1.0 and sweep.rows == len(ROWS) and sweep.seeds == 2
    first, *_, last = sweep.points
    assert first.escalated == 0.0 and first.accuracy == sweep.fast_accuracy
    assert last.escalated == 1.0 and last.accuracy == 1.0
    escalated = [p.escalated for p in sweep.points]
    assert escalated == sorted(escalated)
    assert sweep.choose(1.0) is not None and sweep.choose(1.0).accuracy == 1.0
    assert sweep.choose(0.0) is first and sweep.choose(1.5) is None
    assert sweep.as_json()["points"][-1]["escalated"] == 1.0
