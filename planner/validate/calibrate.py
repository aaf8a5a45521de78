"""``planner calibrate``: the global constants fitted to one cluster's measured runs.

The shipped constants (``costmodel.calibration.DEFAULT``) were fitted on published runs of many
clusters. A user's few runs should move the constants they inform and leave the rest. The fit is
a MAP estimate (ridge regression's Bayesian reading, e.g. Bishop 2006 Sec. 3.3 / Murphy 2012
Sec. 7.5): the error of each run is Laplace with scale ``ERROR_SCALE`` (capped at ``fit.CLIP`` as
the shipped fit does, so one run the model lacks a mechanism for cannot drag every constant),
and each constant has a Gaussian prior centred on its shipped value with standard deviation
``PRIOR_SD_FRACTION`` of its plausible range (``fit.FIT_RANGES``, read as a ~95% interval).
Minus the log posterior, divided by n / b, is the objective

    J = mean_i min(|e_i|, CLIP) + (b / n) * sum_k ((v_k - shipped_k) / sd_k)^2 / 2

so a constant no run is sensitive to stays at its shipped value, and three runs that agree
move what they inform. J is minimised over a grid twice as fine as ``FIT_RANGES`` by coordinate
descent and one-step moves of two and three constants at once, until none lowers it (``fit_map``). The interval of a constant is the 90% posterior interval with the others at
the fit: the values whose minus log posterior is within chi2(1, 0.90) / 2 = 1.35 of the best (edges
read off linearly between grid values).

Honest error: leave one source out when the runs come from several sources, else leave one
run out: each held-out row is predicted by constants fitted without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from costmodel.calibration import DEFAULT, Calibration
from planner.validate.fit import CLIP, FIT_RANGES, Predictor, error_stats, first_joint_move, grid_neighbours

ERROR_SCALE = 0.05
"""b: typical |error| of one run under the shipped constants (their median held-out error on the
reference set, leave one source out, is 4-5%: tests/test_cross_validation.py)."""
PRIOR_SD_FRACTION = 0.25
"""A constant's prior standard deviation, as a fraction of its plausible range (range = 4 sd)."""
INTERVAL_HALF_CHI2 = 1.353
"""chi2(1 dof, 0.90) / 2: the rise in minus log posterior bounding a 90% interval."""
LOCAL = 3
"""Grid steps either side of a constant's value that rounds after the first scan try."""
MEANING = {
    "gemm_efficiency_bf16": "BF16 GEMM speed",
    "gemm_efficiency_fp8": "FP8 GEMM speed",
    "attention_efficiency": "attention kernel speed",
    "native_attention_speedup": "FlashAttention-3 / cuDNN attention over FlashAttention-2",
    "memory_bound_efficiency": "HBM efficiency of norms, activations and the optimizer",
    "kernel_overhead_us": "fixed cost per kernel launch",
    "sustained_clock_fraction": "tensor-core clock held through training",
    "comm_sm_fraction": "compute lost beside overlapped collectives",
}


def grid(name: str) -> np.ndarray:
    """The values tried for a constant: ``FIT_RANGES`` and the midpoints between them, and the
    shipped value."""
    values = np.asarray(FIT_RANGES[name], dtype=float)
    mids = (values[1:] + values[:-1]) / 2
    return np.unique(np.round(np.concatenate([values, mids, [getattr(DEFAULT, name)]]), 6))


def prior_sd(name: str) -> float:
    values = FIT_RANGES[name]
    return PRIOR_SD_FRACTION * float(values.max() - values.min())


def prior_penalty(calib: Calibration) -> float:
    """sum_k ((v_k - shipped_k) / sd_k)^2 / 2: minus the log of the Gaussian prior."""
    return 0.5 * sum(((getattr(calib, n) - getattr(DEFAULT, n)) / prior_sd(n)) ** 2 for n in FIT_RANGES)


def objective(predictor: Predictor, weights: np.ndarray, calib: Calibration) -> float:
    """J: capped mean |error| over the weighted runs + (b / n) x the prior penalty."""
    n = float(np.sum(weights))
    data = float(np.sum(weights * np.minimum(np.abs(predictor.errors(calib)), CLIP))) / n
    return data + ERROR_SCALE / n * prior_penalty(calib)


def informed(predictor: Predictor, weights: np.ndarray) -> list[str]:
    """The constants some weighted run is sensitive to at the shipped values (the others'
    optimum is their shipped value: only the prior sees them)."""
    return [n for n in FIT_RANGES if np.abs(sensitivity(predictor, DEFAULT, n)[weights > 0]).max() > 1e-6]


def fit_map(predictor: Predictor, weights: np.ndarray) -> Calibration:
    """Descent on ``objective`` from the shipped constants over the constants the runs inform:
    coordinate rounds (the first scans each constant's whole grid, later ones ``LOCAL`` grid steps
    around it) until a round moves none, then one-step moves of two and three constants at once
    (constants trade off along ridges, as in the shipped fit: ``planner.validate.fit.fit``),
    repeated until neither lowers the objective."""
    calib = DEFAULT
    best = objective(predictor, weights, calib)
    names = informed(predictor, weights)
    round_ = 0
    while True:
        moved = False
        for name in names:
            values = grid(name)
            if round_:
                i = int(np.searchsorted(values, getattr(calib, name)))
                values = values[max(i - LOCAL, 0):i + LOCAL + 1]
            for value in values:
                trial = calib.with_(**{name: float(value)})
                score = objective(predictor, weights, trial)
                if score < best - 1e-9:
                    best, calib, moved = score, trial, True
        round_ += 1
        if moved:
            continue
        step = _joint_step(predictor, weights, calib, best, names)
        if step is None:
            return calib
        calib, best = step


def _joint_step(predictor: Predictor, weights: np.ndarray, calib: Calibration, best: float, names: list[str]):
    """``first_joint_move`` over the informed ``names`` on their ``grid``, scored by ``objective``."""
    return first_joint_move(calib, names, lambda n, v: grid_neighbours(grid(n), v),
                            lambda trial: objective(predictor, weights, trial), best, 1e-9)


def interval(predictor: Predictor, weights: np.ndarray, calib: Calibration, name: str) -> tuple[float, float]:
    """90% posterior interval of one constant, the others at the fit (see the module doc)."""
    scale = float(np.sum(weights)) / ERROR_SCALE  # J -> minus log posterior
    values = grid(name)
    scores = np.array([objective(predictor, weights, calib.with_(**{name: float(v)})) for v in values]) * scale
    limit = scores.min() + INTERVAL_HALF_CHI2
    inside = np.flatnonzero(scores <= limit)
    lo, hi = int(inside.min()), int(inside.max())
    # Each edge lies between the last grid value inside and the first outside: read it off the
    # straight line between their scores, so a sharp posterior is not reported as one point.
    return _crossing(values, scores, limit, lo, lo - 1), _crossing(values, scores, limit, hi, hi + 1)


def _crossing(values: np.ndarray, scores: np.ndarray, limit: float, inside: int, outside: int) -> float:
    """Where the score, linear between grid points ``inside`` and ``outside``, reaches ``limit``."""
    if not 0 <= outside < len(values):
        return float(values[inside])
    rise = scores[outside] - scores[inside]
    t = (limit - scores[inside]) / rise if rise > 0 else 0.0
    return round(float(values[inside] + t * (values[outside] - values[inside])), 4)


def sensitivity(predictor: Predictor, calib: Calibration, name: str) -> np.ndarray:
    """Per run: relative change of the prediction when the constant moves across its whole
    plausible range (central difference on the grid around the fit)."""
    values = grid(name)
    i = int(np.argmin(np.abs(values - getattr(calib, name))))
    lo, hi = values[max(i - 1, 0)], values[min(i + 1, len(values) - 1)]
    base = predictor(calib)
    up, down = predictor(calib.with_(**{name: float(hi)})), predictor(calib.with_(**{name: float(lo)}))
    span = float(FIT_RANGES[name].max() - FIT_RANGES[name].min())
    return (up - down) / (hi - lo) * span / base


# ------------------------------------------------------------------- copies of one configuration


def configuration_keys(predictor: Predictor) -> np.ndarray:
    """Per run, a label shared by the runs of one configuration: the same model, cluster, GPU,
    GPU count and layout (pinned knobs, batch and sequence included, and the grids searched).
    Such runs get one prediction whatever the constants, and the model's error on them, what
    ``ERROR_SCALE`` describes, is one error: repeats add no evidence about the constants."""
    labels: dict = {}
    out = []
    for r in predictor.rows:
        run = r.run
        key = (run.model.model_dump_json(), run.cluster.model_dump_json(), run.gpu.name, run.gpus,
               repr(sorted(run.pins.items())), repr(sorted((k, list(v)) for k, v in run.searched.items())))
        out.append(labels.setdefault(key, len(labels)))
    return np.array(out)


def configuration_weights(keys: np.ndarray) -> np.ndarray:
    """1 / (runs of its configuration) per run: each configuration weighs as one run in the fit,
    its interval and its held-out folds, however often it was measured (their mean error counts)."""
    counts = np.bincount(keys)
    return 1.0 / counts[keys]


def _fold_keys(predictor: Predictor, configs: np.ndarray) -> tuple[np.ndarray, str]:
    """The held-out unit per run and its name: the source when the runs come from several (and
    they form at least 2 folds), else the run; in both, the runs of one configuration stay in one
    fold (sources sharing a configuration are held out together), so a copy never predicts its twin."""
    sources = [r.source for r in predictor.rows]
    unit = "configuration" if len(set(configs.tolist())) < len(configs) else "run"
    if len(set(sources)) > 1:
        # union-find over sources linked by a shared configuration
        parent = {s: s for s in sources}

        def root(s):
            while parent[s] != s:
                s = parent[s]
            return s

        first: dict = {}
        for s, c in zip(sources, configs.tolist()):
            parent[root(s)] = root(first.setdefault(c, s))
        linked = np.array([root(s) for s in sources])
        if len(set(linked.tolist())) > 1:
            return linked, "source"
        # shared configurations link every source into one fold: leave one configuration out
        # instead, which still keeps a copy from predicting its twin
    return configs, unit


# --------------------------------------------------------------------------- the whole calibration


@dataclass
class Moved:
    name: str
    shipped: float
    value: float
    interval: tuple
    why: str


@dataclass
class Calibrated:
    """What ``calibrate`` found."""

    calib: Calibration
    rows: list
    """(id, source, reported, shipped prediction, fitted prediction, held-out prediction or None)."""
    moved: list = field(default_factory=list)
    unchanged: dict = field(default_factory=dict)
    """Constant -> why it stayed."""
    stats: dict = field(default_factory=dict)
    """shipped / fitted / held_out: ``fit.error_stats`` plus ``capped_mape`` (the fit's yardstick);
    loo_unit: run, configuration, source or None."""
    configurations: int = 0
    """Distinct configurations among the runs (copies of one run count once; 0: not counted, each
    run taken as its own)."""


def _why(predictor: Predictor, calib: Calibration, name: str) -> str:
    """Which runs moved a constant, and their error before and after."""
    raw = np.abs(sensitivity(predictor, calib, name))
    # Runs off by more than CLIP with the shipped constants count only up to CLIP in the fit
    # (a unit slip, a mechanism the model lacks): they would swamp the mean said here, unless
    # they alone depend on the constant.
    counted = np.abs(predictor.errors(DEFAULT)) <= CLIP
    s = np.where(counted, raw, 0.0)
    only_capped = not s.max() > 0 and raw.max() > 0
    if only_capped:
        s = raw
    informed = np.nonzero(s >= 0.25 * s.max())[0] if s.max() > 0 else np.arange(len(s))
    before = float(np.mean(predictor.errors(DEFAULT)[informed]))
    # What this constant's own move does: the shipped constants with only it at the fitted value
    # (the fit moves several at once; crediting one with the sum would misattribute).
    # In percent, rounded once as printed (+ 0.0: no "-0.0%").
    alone = round(100 * float(np.mean(predictor.errors(DEFAULT.with_(**{name: getattr(calib, name)}))[informed])), 1) + 0.0
    together = round(100 * float(np.mean(predictor.errors(calib)[informed])), 1) + 0.0
    ids = ", ".join(predictor.rows[i].id for i in informed[:4]) + (", ..." if len(informed) > 4 else "")
    runs = f"the {len(informed)} runs that depend on it most ({ids}) were" if len(informed) > 1 \
        else f"run {ids}, which depends on it most, was"
    pace = "fast" if before > 0 else "slow"
    capped = f" (only runs off by more than {CLIP:.0%} depend on it)" if only_capped else ""
    head = (f"{MEANING[name]}: {runs} predicted {abs(before) * 100:.1f}% {pace} with the shipped "
            f"{getattr(DEFAULT, name):g}")
    if abs(alone) < abs(before) * 100:
        return f"{head}; this constant's move alone: {alone:+.1f}%{capped}"
    return (f"{head}; this constant's move alone does not bring {'them' if len(informed) > 1 else 'it'} closer "
            f"({alone:+.1f}%): it moved with the others (all the moves together: {together:+.1f}%){capped}")


def _stayed(predictor: Predictor, name: str) -> str:
    if np.abs(sensitivity(predictor, DEFAULT, name)).max() < 1e-3:
        if name == "gemm_efficiency_bf16" and all(r.run.gpu.gemm_efficiency_bf16 for r in predictor.rows):
            return "no run depends on it (their GPUs' own measured GEMM efficiency applies: hardware_catalog/data/gpus.toml)"
        return "no run depends on it"
    return "the runs do not outweigh its prior"


_FOLDS: tuple | None = None
"""(predictor, keys) the fold workers share (set before they fork)."""


def _fold(key) -> dict:
    predictor, keys, weights = _FOLDS
    fitted = fit_map(predictor, (keys != key) * weights)
    return {n: getattr(fitted, n) for n in FIT_RANGES}


def held_out(predictor: Predictor, jobs: int | None = None) -> tuple[np.ndarray, str | None]:
    """Each run's prediction from constants fitted without it (its source, when the runs come
    from several; with its copies: ``_fold_keys``); the unit left out. Folds run in ``jobs``
    forked processes."""
    import multiprocessing
    import os

    global _FOLDS
    configs = configuration_keys(predictor)
    keys, unit = _fold_keys(predictor, configs)
    out = np.full(len(keys), np.nan)
    folds = list(dict.fromkeys(keys.tolist()))
    if len(folds) < 2:
        return out, None
    _FOLDS = (predictor, keys, configuration_weights(configs))
    jobs = min(jobs or os.cpu_count() or 1, len(folds))
    if jobs > 1 and "fork" in multiprocessing.get_all_start_methods():
        from planner.validate.fit import worker_ignores_sigint

        with multiprocessing.get_context("fork").Pool(jobs, worker_ignores_sigint) as pool:
            constants = pool.map(_fold, folds, chunksize=1)
    else:
        constants = [_fold(k) for k in folds]
    for key, values in zip(folds, constants):
        mask = keys == key
        out[mask] = predictor(DEFAULT.with_(**values))[mask]
    return out, unit


def calibrate(predictor: Predictor) -> Calibrated:
    """Fit, intervals, reasons, and the errors before, after and held out."""
    configs = configuration_keys(predictor)
    weights = configuration_weights(configs)
    calib = fit_map(predictor, weights)
    moved, unchanged = [], {}
    for name in FIT_RANGES:
        if getattr(calib, name) == getattr(DEFAULT, name):
            unchanged[name] = _stayed(predictor, name)
            continue
        moved.append(Moved(name, getattr(DEFAULT, name), getattr(calib, name),
                           interval(predictor, weights, calib, name), _why(predictor, calib, name)))
    loo, unit = held_out(predictor)
    reported = predictor.reported
    shipped, fitted = predictor(DEFAULT), predictor(calib)
    rows = [(r.id, r.source, float(rep), float(a), float(b), None if np.isnan(h) else float(h))
            for r, rep, a, b, h in zip(predictor.rows, reported, shipped, fitted, loo)]
    # Each configuration counts once in the table and the verdict, as in the fit (copies 1/k each).
    stats = {"shipped": _stats((shipped - reported) / reported, configs),
             "fitted": _stats((fitted - reported) / reported, configs),
             "held_out": _stats((loo - reported) / reported, configs) if unit else None, "loo_unit": unit}
    return Calibrated(calib, rows, moved, unchanged, stats, len(set(configs.tolist())))


def _stats(errors: np.ndarray, configs: np.ndarray | None = None) -> dict:
    """``fit.error_stats`` and ``capped_mape``: the mean |error| with each run's capped at
    ``CLIP``, as the fit counts it (one unit slip cannot outweigh every other run). With
    ``configs`` (``configuration_keys``), each configuration weighs as one run, each of its k
    copies 1/k (``configuration_weights``, the fit's weights), in every figure but ``rows`` (the
    runs): measuring one configuration again moves neither the fit nor its error table."""
    errors = np.asarray(errors, dtype=float)
    if configs is None or not len(errors):
        out = error_stats(errors)
        out["capped_mape"] = float(np.mean(np.minimum(np.abs(errors), CLIP))) if len(errors) else None
        return out
    weights = configuration_weights(np.asarray(configs))
    a = np.abs(errors)

    def mean(x):
        return float(np.sum(weights * x) / np.sum(weights))

    return {"rows": int(len(a)), "median_abs_error": _weighted_percentile(a, configs, 50),
            "p90_abs_error": _weighted_percentile(a, configs, 90), "mape": mean(a),
            "mean_signed_error": mean(errors), "capped_mape": mean(np.minimum(a, CLIP))}


def _weighted_percentile(values: np.ndarray, configs: np.ndarray, q: float) -> float:
    """``np.percentile(values, q)`` (linear: Hyndman & Fan 1996 type 7) with each configuration
    weighing one value: a configuration's runs with equal values are one point of weight 1 (so
    exact copies give the percentile of the distinct configurations exactly); unequal repeats
    share its weight (1/k each). Point i of the sorted points sits at (weight before it) /
    (total weight - last point's weight), which is type 7's i / (n - 1) when all weigh 1."""
    points: dict = {}
    for v, c in zip(np.asarray(values, dtype=float).tolist(), np.asarray(configs).tolist()):
        points.setdefault((c, v), 0.0)
    counts = np.bincount(np.asarray(configs))
    for v, c in zip(np.asarray(values, dtype=float).tolist(), np.asarray(configs).tolist()):
        points[(c, v)] += 1.0 / counts[c]
    order = sorted(points.items(), key=lambda kv: kv[0][1])
    xs = np.array([v for (_, v), _ in order])
    ws = np.array([w for _, w in order])
    if len(xs) == 1:
        return float(xs[0])
    pos = (np.cumsum(ws) - ws) / (ws.sum() - ws[-1])
    return float(np.interp(q / 100.0, pos, xs))
