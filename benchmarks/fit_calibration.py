"""Fit the global constants of costmodel/calibration.py on the reference set.

    python benchmarks/fit_calibration.py [--runs FILE] [--rounds 3]

Coordinate descent over a few constants, each within a physically plausible range (see the
docstrings in calibration.py), minimising the mean absolute error of tokens/s/GPU over the
high-confidence rows with each row's error capped at CLIP (robust to rows whose mechanism the
model lacks, while still rewarding rows brought inside the 10% band). Prints the constants
found and the error before/after; copy them into calibration.py by hand with the date.
About a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from costmodel.calibration import DEFAULT  # noqa: E402
from planner.validate import load_runs, map_run, predict_run  # noqa: E402

RANGES = {
    "gemm_efficiency_bf16": np.round(np.arange(0.56, 0.90, 0.02), 3),
    "gemm_efficiency_fp8": np.round(np.arange(0.40, 0.80, 0.02), 3),
    "attention_efficiency": np.round(np.arange(0.20, 0.76, 0.05), 3),
    "native_attention_speedup": np.round(np.arange(1.0, 2.01, 0.1), 3),
    "memory_bound_efficiency": np.round(np.arange(0.40, 0.91, 0.05), 3),
    "kernel_overhead_us": np.array([0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0]),
    "sustained_clock_fraction": np.round(np.arange(0.80, 1.001, 0.02), 3),
    "comm_sm_fraction": np.round(np.arange(0.0, 0.241, 0.03), 3),
}


CLIP = 0.20
"""Errors count up to this much: rows whose mechanism the model lacks (see the validate
note) weigh like any row that misses by 20%, so they cannot drag every constant."""


def objective(s) -> float:
    """Mean absolute error, each row's clipped at CLIP (a capped L1 loss): it rewards bringing
    rows inside the 10% band, which the median alone does not see."""
    return s[3]


def score(runs, calib):
    errs = []
    for run in runs:
        r = predict_run(run, calib)
        if r.error is not None:
            errs.append(abs(r.error))
    errs = np.asarray(errs)
    # Robust objective: median + half the mean error clipped at 30%, so the few rows whose
    # mechanism the model lacks (see the validate note) cannot drag every constant.
    return float(np.median(errs)), float(np.percentile(errs, 90)), float(np.mean(errs)), float(np.mean(np.minimum(errs, CLIP)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    rows = [r for r in load_runs(args.runs) if r.get("confidence") == "high"]
    runs = []
    for row in rows:
        try:
            runs.append(map_run(row))
        except Exception as err:  # unmapped rows are reported by `planner validate`
            print(f"skip {row['id']}: {err}")
    calib = DEFAULT
    t0 = time.time()
    best = score(runs, calib)
    print(f"start: median {best[0]:.4f} p90 {best[1]:.4f} mape {best[2]:.4f}")
    for rnd in range(args.rounds):
        for name, values in RANGES.items():
            for v in values:
                trial = calib.with_(**{name: float(v)})
                s = score(runs, trial)
                if objective(s) < objective(best) - 1e-6:
                    best, calib = s, trial
            print(f"round {rnd} {name}={getattr(calib, name)}: median {best[0]:.4f} p90 {best[1]:.4f} mape {best[2]:.4f}")
    print(f"done in {time.time() - t0:.0f} s")
    for name in RANGES:
        print(f"{name} = {getattr(calib, name)}")


if __name__ == "__main__":
    main()
