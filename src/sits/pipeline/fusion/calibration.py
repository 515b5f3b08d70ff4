"""Confidence calibration: a monotone map from a raw score to the probability the answer is right,
fitted by isotonic regression (pool-adjacent-violators) on a labelled set; and the measures that
say how well calibrated a set of predictions is (reliability curve, expected calibration error).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CalibrationMap:
    """Piecewise-linear through (raw, calibrated) points; flat outside them."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]

    @classmethod
    def identity(cls) -> CalibrationMap:
        return cls((0.0, 1.0), (0.0, 1.0))

    @classmethod
    def from_points(cls, points: Sequence[tuple[float, float]]) -> CalibrationMap:
        return cls(tuple(float(x) for x, _ in points), tuple(float(y) for _, y in points))

    def __call__(self, raw: float) -> float:
        xs, ys = self.xs, self.ys
        if raw <= xs[0]:
            return ys[0]
        if raw >= xs[-1]:
            return ys[-1]
        i = bisect_right(xs, raw)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (raw - x0) / (x1 - x0)

    def points(self) -> list[tuple[float, float]]:
        return list(zip(self.xs, self.ys, strict=True))


def fit_isotonic(raw: Sequence[float], correct: Sequence[bool]) -> CalibrationMap:
    """Pool adjacent violators over the labelled pairs; each pooled block becomes one level
    (its share of correct answers, smoothed)."""
    if len(raw) != len(correct) or not raw:
        raise ValueError("need as many labels as scores, at least one")
    by_score: dict[float, list[float]] = {}  # equal scores must get one value: pool them first
    for x, y in zip(raw, correct, strict=True):
        entry = by_score.setdefault(float(x), [0.0, 0.0])
        entry[0] += float(y)
        entry[1] += 1.0
    blocks: list[list[float]] = []  # [sum of labels, count, min raw, max raw]
    for x in sorted(by_score):
        blocks.append([by_score[x][0], by_score[x][1], x, x])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] >= blocks[-1][0] / blocks[-1][1]:
            total, count, _, hi = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
            blocks[-1][3] = hi
    points: list[tuple[float, float]] = []
    level = 0.0
    for total, count, lo, hi in blocks:
        # Laplace: a handful of drafts never earns a certain 0 or 1; the running max keeps it monotone.
        level = max(level, (total + 1) / (count + 2))
        for x in (lo, hi):
            if not points or x > points[-1][0]:
                points.append((x, level))
    if len(points) == 1:
        points.append((min(1.0, points[0][0] + 1e-6), points[0][1]))
    return CalibrationMap.from_points(points)


@dataclass(frozen=True, slots=True)
class ReliabilityBin:
    low: float
    high: float
    count: int
    mean_confidence: float
    accuracy: float


def reliability_curve(confidence: Sequence[float], correct: Sequence[bool], bins: int = 10) -> list[ReliabilityBin]:
    out = []
    for b in range(bins):
        low, high = b / bins, (b + 1) / bins
        members = [(c, y) for c, y in zip(confidence, correct, strict=True)
                   if low <= c < high or (b == bins - 1 and c == 1.0)]
        if members:
            out.append(ReliabilityBin(low, high, len(members), sum(c for c, _ in members) / len(members),
                                      sum(1 for _, y in members if y) / len(members)))
    return out


def expected_calibration_error(confidence: Sequence[float], correct: Sequence[bool], bins: int = 10) -> float:
    """Sum over bins of (share of predictions in the bin) x |accuracy - mean confidence|."""
    n = len(confidence)
    return sum(b.count / n * abs(b.accuracy - b.mean_confidence) for b in reliability_curve(confidence, correct, bins))
