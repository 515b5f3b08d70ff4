"""The packaged calibration map (raw SymbolicGuard score -> probability the answer is right).

Written by bench/bench_calibration.py; see docs/workflows.md for the data and the fit."""

from sits.pipeline.fusion.calibration import CalibrationMap

POINTS: tuple[tuple[float, float], ...] = (
    (0.0, 0.2611),
    (0.8182, 0.2611),
    (0.8333, 0.3023),
    (0.8571, 0.3023),
    (0.875, 0.31),
    (0.9333, 0.31),
    (1.0, 0.8838),
)


def default_calibration() -> CalibrationMap:
    return CalibrationMap.from_points(POINTS)
