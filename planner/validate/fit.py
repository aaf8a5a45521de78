"""Fitting the global constants, and how well the fit generalizes.

The few global constants of the cost model (``costmodel.calibration.Calibration``) are fitted
on published runs by descent to a grid point that no move of one constant, nor a one-step move
of two or three at once, lowers (``fit``), each within the plausible range that public kernel
benchmarks give (``FIT_RANGES``), minimising the mean absolute throughput error with each row's
error capped at ``CLIP`` (a capped L1 loss: rows whose mechanism the model lacks weigh like
any 20% miss and cannot drag every constant).

An in-sample fit says little about runs the model never saw, so this module also measures:

* ``cross_validate``: leave one source out. For each source, fit on all the others, predict
  its rows; the per-source and overall errors are what planner reports as its accuracy.
* ``bootstrap``: the fit repeated on sources drawn with replacement (a block bootstrap: rows of
  one source share its framework and cluster, so they are not independent draws); the spread of
  each constant is its interval.

Why it is fast: a row's prediction is the fastest of its candidate layouts that fit in memory,
and memory does not depend on the fitted constants, so the candidates that fit are found once
(``prepare``); each trial calibration then prices only those, and the per-row predictions of a
calibration are remembered across folds and resamples (``Predictor``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from costmodel.calibration import DEFAULT, FIT_RANGES, PRIOR, Calibration

CLIP = 0.20
"""Errors count up to this much in the objective."""

# FIT_RANGES (the constants fitted and the values tried) lives with the constants: costmodel/calibration.py.


@dataclass
class PreparedRow:
    """One mapped runs-file row, reduced to what a calibration can change."""

    id: str
    source: str
    reported: float
    """Published tokens/s/GPU."""
    run: object
    """``MappedRun``."""
    batch: object
    """Candidates that can be the prediction: every one that fits in memory, or else the one
    needing the least memory (as ``predict_run`` picks)."""
    fits: bool = True
    """Whether some candidate fits in memory (else the least-memory one stands in, said by calibrate)."""


def prepare(runs) -> list[PreparedRow]:
    """Each run's candidates that can be its prediction (memory does not depend on the fitted
    constants: workspace and fragmentation are not fitted)."""
    from costmodel import evaluate_batch
    from planner.validate.predict import candidates

    out = []
    for run in runs:
        batch = candidates(run)
        if len(batch) == 0:
            continue
        res = evaluate_batch(run.model, run.cluster, batch, gpu=run.gpu, calib=DEFAULT)
        keep = np.nonzero(res.fits)[0] if res.fits.any() else np.array([int(np.argmin(res.memory_gib["peak"]))])
        out.append(PreparedRow(run.id, run.source, float(run.reported), run, batch.take(keep), bool(res.fits.any())))
    return out


@dataclass
class Predictor:
    """Per-row predicted tokens/s/GPU for a calibration, remembered by all its values. Rows
    with the same model and cluster are priced in one call."""

    rows: list
    memo: dict = field(default_factory=dict)
    groups: list = field(default_factory=list)
    """(first row's run, one batch of every row's candidates, row index per candidate)."""
    comm_memo: dict = field(default_factory=dict)
    """Collective times by their inputs, kept across calibrations (none of them changes one)."""

    def __post_init__(self):
        from costmodel.layout import LayoutBatch

        by_setup: dict = {}
        for i, r in enumerate(self.rows):
            # the cluster by its content: two users' cluster files may share a name (a file stem)
            key = (r.run.model.model_dump_json(), r.run.cluster.model_dump_json(), r.run.gpu.name)
            by_setup.setdefault(key, []).append(i)
        for members in by_setup.values():
            batch = LayoutBatch.concat([self.rows[i].batch for i in members])
            owner = np.repeat(members, [len(self.rows[i].batch) for i in members])
            self.groups.append((self.rows[members[0]].run, batch, owner))

    def __call__(self, calib: Calibration) -> np.ndarray:
        key = dataclasses.astuple(calib)
        if key not in self.memo:
            from costmodel import collectives, evaluate_batch

            best = np.full(len(self.rows), -np.inf)
            # No fitted constant changes a collective's time (``comm_sm_fraction`` scales the
            # compute beside it), so collectives are priced once per row.
            with collectives.remembered(self.comm_memo):
                for run, batch, owner in self.groups:
                    tps = evaluate_batch(run.model, run.cluster, batch, gpu=run.gpu, calib=calib).tokens_per_s_per_gpu
                    np.maximum.at(best, owner, tps)
            self.memo[key] = best
        return self.memo[key]

    @property
    def reported(self) -> np.ndarray:
        return np.array([r.reported for r in self.rows])

    def errors(self, calib: Calibration) -> np.ndarray:
        """Signed relative error per row."""
        return (self(calib) - self.reported) / self.reported


def objective(errors: np.ndarray, weights: np.ndarray) -> float:
    """Weighted mean absolute error, each row's capped at ``CLIP``."""
    return float(np.sum(weights * np.minimum(np.abs(errors), CLIP)) / np.sum(weights))


def fit(predictor: Predictor, weights: np.ndarray, start: Calibration = PRIOR) -> Calibration:
    """The constants at a grid point no move lowers, on the rows with weight > 0 (weights: how
    many times each row counts), from ``start``: descent by two kinds of move, repeated until
    neither lowers the objective:

    * one constant anywhere on its grid (``FIT_RANGES``), the others held (coordinate descent);
    * two or three constants one grid step each at once (``_joint_moves``). Constants trade off
      against each other (the GEMM efficiency against the sustained clock, the clock against the
      native attention speed-up: a slower clock takes every tensor-core peak down), so coordinate
      descent alone stops on such a ridge; stopping after a fixed number of rounds left folds of
      ``cross_validate`` at points a three-constant move still lowered (2026-11-28: held out 4.2% /
      11.1% stopped, 4.0% / 10.8% converged).
    """
    calib, best = start, objective(predictor.errors(start), weights)
    while True:
        moved = False
        for name, values in FIT_RANGES.items():
            for value in values:
                trial = calib.with_(**{name: float(value)})
                score = objective(predictor.errors(trial), weights)
                if score < best - 1e-6:
                    best, calib, moved = score, trial, True
        if moved:
            continue
        step = _joint_moves(predictor, weights, calib, best)
        if step is None:
            return calib
        calib, best = step


def grid_neighbours(grid, value: float) -> list[float]:
    """The values of ``grid`` one step below and above the grid point nearest ``value``."""
    grid = np.asarray(grid, dtype=float)
    i = int(np.argmin(np.abs(grid - value)))
    return [float(grid[j]) for j in (i - 1, i + 1) if 0 <= j < len(grid)]


JOINT_MOVE_SIZES = (2, 3)
"""How many constants a joint move steps at once (``fit``; ``planner.validate.calibrate.fit_map``)."""


def first_joint_move(calib: Calibration, names, neighbours, score, best: float, tol: float):
    """The first move of two, then three (``JOINT_MOVE_SIZES``), of the constants ``names`` one
    grid step each (``neighbours(name, value)``) whose ``score`` is below ``best - tol``, as
    (calibration, score); None when none is (descent has converged). Shared by the shipped fit
    and ``planner calibrate``'s MAP fit."""
    from itertools import combinations, product

    for size in JOINT_MOVE_SIZES:
        for group in combinations(names, size):
            for values in product(*(neighbours(n, getattr(calib, n)) for n in group)):
                trial = calib.with_(**dict(zip(group, values)))
                trial_score = score(trial)
                if trial_score < best - tol:
                    return trial, trial_score
    return None


def _joint_moves(predictor: Predictor, weights: np.ndarray, calib: Calibration, best: float):
    """``first_joint_move`` over every fitted constant on ``FIT_RANGES``."""
    return first_joint_move(calib, list(FIT_RANGES), lambda n, v: grid_neighbours(FIT_RANGES[n], v),
                            lambda trial: objective(predictor.errors(trial), weights), best, 1e-6)


def error_stats(errors) -> dict:
    """Median, p90 and mean of |error|, mean signed error, row count."""
    errors = np.asarray(errors, dtype=float)
    if len(errors) == 0:
        return {"rows": 0, "median_abs_error": None, "p90_abs_error": None, "mape": None, "mean_signed_error": None}
    a = np.abs(errors)
    return {"rows": int(len(a)), "median_abs_error": float(np.median(a)), "p90_abs_error": float(np.percentile(a, 90)),
            "mape": float(np.mean(a)), "mean_signed_error": float(np.mean(errors))}


_FOLD_PREDICTOR: Predictor | None = None
"""The predictor fit workers share (set before they fork)."""


def _fit_weights(weights: np.ndarray) -> dict:
    fitted = fit(_FOLD_PREDICTOR, weights, start=PRIOR)
    return {name: getattr(fitted, name) for name in FIT_RANGES}


def worker_ignores_sigint() -> None:
    """Pool initializer: a forked worker leaves Ctrl-C to the parent (a terminal sends SIGINT to
    the whole process group; each worker would print its own KeyboardInterrupt traceback). The
    parent's interrupt ends the pool (its context manager terminates the workers)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _fits(predictor: Predictor, weight_sets: list, jobs: int | None = None) -> list[dict]:
    """The constants fitted (from ``PRIOR``) under each weight vector, spread over ``jobs``
    forked processes (each keeps its own memo)."""
    import multiprocessing
    import os

    global _FOLD_PREDICTOR
    _FOLD_PREDICTOR = predictor
    jobs = jobs or os.cpu_count() or 1
    if jobs > 1 and len(weight_sets) > 1 and "fork" in multiprocessing.get_all_start_methods():
        with multiprocessing.get_context("fork").Pool(min(jobs, len(weight_sets)), worker_ignores_sigint) as pool:
            return pool.map(_fit_weights, weight_sets, chunksize=1)
    return [_fit_weights(w) for w in weight_sets]


def cross_validate(predictor: Predictor, calib: Calibration = DEFAULT, jobs: int | None = None) -> dict:
    """Leave one source out: per source, the constants fitted from ``PRIOR`` on every other
    source, and that source's errors under them; next to the in-sample errors under ``calib``
    (the shipped constants, fitted on every source)."""
    sources = np.array([r.source for r in predictor.rows])
    names = sorted(set(sources))
    constants = dict(zip(names, _fits(predictor, [(sources != s).astype(float) for s in names], jobs)))
    in_sample = predictor.errors(calib)
    held_out = np.empty(len(sources))
    folds = {}
    for source in names:
        mask = sources == source
        held_out[mask] = predictor.errors(calib.with_(**constants[source]))[mask]
        folds[source] = {"in_sample": error_stats(in_sample[mask]), "held_out": error_stats(held_out[mask]),
                         "constants": constants[source]}
    return {
        "in_sample": error_stats(in_sample),
        "held_out": error_stats(held_out),
        "per_source": folds,
        "rows": [{"id": r.id, "source": r.source, "in_sample_error": float(e), "held_out_error": float(h)}
                 for r, e, h in zip(predictor.rows, in_sample, held_out)],
    }


def bootstrap(predictor: Predictor, resamples: int = 20, seed: int = 0, jobs: int | None = None) -> dict:
    """Each constant's 5th-95th percentile over fits (from ``PRIOR``) on sources drawn with
    replacement, next to its shipped value."""
    rng = np.random.default_rng(seed)
    sources = np.array([r.source for r in predictor.rows])
    names = sorted(set(sources))
    weight_sets = []
    for _ in range(resamples):
        counts = np.bincount(rng.choice(len(names), size=len(names), replace=True), minlength=len(names))
        weight_sets.append(np.array([counts[names.index(s)] for s in sources], dtype=float))
    fits = _fits(predictor, weight_sets, jobs)
    return {name: {"value": getattr(DEFAULT, name), "prior": getattr(PRIOR, name),
                   "p5": float(np.percentile([f[name] for f in fits], 5)),
                   "p95": float(np.percentile([f[name] for f in fits], 95))}
            for name in FIT_RANGES}
