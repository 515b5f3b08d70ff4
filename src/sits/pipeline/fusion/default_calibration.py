"""The packaged calibration map (raw SymbolicGuard score -> probability the answer is right).

Written by bench/bench_calibration.py; see docs/workflows.md for the data and the fit."""

from sits.pipeline.fusion.calibration import CalibrationMap

POINTS: tuple[tuple[float, float], ...] = (
    (0.0, 0.1667),
    (0.3333, 0.1667),
    (0.5, 0.2108),
    (0.8462, 0.2108),
    (0.8571, 0.2768),
    (0.9333, 0.2768),
    (1.0, 0.8883),
)


def default_calibration() -> CalibrationMap:
    return CalibrationMap.from_points(POINTS)
