"""The packaged calibration map (raw SymbolicGuard score -> probability the answer is right).

Written by bench/bench_calibration.py; see docs/workflows.md for the data and the fit."""

from sits.pipeline.fusion.calibration import CalibrationMap

POINTS: tuple[tuple[float, float], ...] = ((0.0, 0.0), (1.0, 1.0))


def default_calibration() -> CalibrationMap:
    return CalibrationMap.from_points(POINTS)
