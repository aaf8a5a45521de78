"""Fit the global constants of costmodel/calibration.py on the reference set.

    python benchmarks/fit_calibration.py [--runs FILE]

Runs ``planner.validate.fit.fit`` (descent from ``PRIOR`` over ``FIT_RANGES`` until no move of one
constant, nor of two or three one grid step at once, lowers the capped L1 objective) on the high-confidence rows and prints the constants found next to the shipped
ones, with the error of each. Copy them into calibration.py by hand with the date, after
checking ``planner validate --cross-validate`` (the accuracy that counts is held-out).
About a minute on one core.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from costmodel.calibration import DEFAULT, PRIOR  # noqa: E402
from planner.validate.crossval import prepared_rows  # noqa: E402
from planner.validate.fit import FIT_RANGES, Predictor, error_stats, fit  # noqa: E402


def _line(label, stats) -> str:
    return (f"{label:<10} median {stats['median_abs_error'] * 100:.2f}%  p90 {stats['p90_abs_error'] * 100:.2f}%  "
            f"MAPE {stats['mape'] * 100:.2f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=None)
    args = ap.parse_args()
    t0 = time.time()
    predictor = Predictor(prepared_rows(args.runs))
    fitted = fit(predictor, np.ones(len(predictor.rows)), start=PRIOR)
    print(f"{len(predictor.rows)} rows, {time.time() - t0:.0f} s")
    print(f"{'constant':<28}{'prior':>8}{'shipped':>9}{'fitted':>8}")
    for name in FIT_RANGES:
        print(f"{name:<28}{getattr(PRIOR, name):>8g}{getattr(DEFAULT, name):>9g}{getattr(fitted, name):>8g}")
    print(_line("prior", error_stats(predictor.errors(PRIOR))))
    print(_line("shipped", error_stats(predictor.errors(DEFAULT))))
    print(_line("fitted", error_stats(predictor.errors(fitted))))


if __name__ == "__main__":
    main()
