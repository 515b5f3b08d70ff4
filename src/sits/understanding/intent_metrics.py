"""Accuracy and macro-F1 of intent predictions against gold labels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LabelScore:
    precision: float
    recall: float
    f1: float
    support: int


@dataclass(frozen=True, slots=True)
class IntentReport:
    accuracy: float
    macro_f1: float
    per_label: dict[str, LabelScore]

    def as_json(self) -> dict[str, object]:
        return {"accuracy": self.accuracy, "macro_f1": self.macro_f1,
                "per_label": {k: {"precision": v.precision, "recall": v.recall, "f1": v.f1, "support": v.support}
                              for k, v in self.per_label.items()}}


def score_predictions(gold: Sequence[str], predicted: Sequence[str]) -> IntentReport:
    if len(gold) != len(predicted) or not gold:
        raise ValueError("need as many predictions as gold labels, and at least one")
    per_label = {}
    for label in sorted(set(gold)):
        tp = sum(1 for g, p in zip(gold, predicted) if g == label and p == label)
        fp = sum(1 for g, p in zip(gold, predicted) if g != label and p == label)
        fn = sum(1 for g, p in zip(gold, predicted) if g == label and p != label)
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_label[label] = LabelScore(precision, recall, f1, tp + fn)
    accuracy = sum(1 for g, p in zip(gold, predicted) if g == p) / len(gold)
    macro_f1 = sum(s.f1 for s in per_label.values()) / len(per_label)
    return IntentReport(accuracy, macro_f1, per_label)
