"""An 80% interval on every prediction: parameter uncertainty and structural error, combined.

* **Parameter uncertainty**: the constants the cost model fits (``costmodel.calibration``) move
  when the data moves. The layout is priced under each leave-one-source-out fold's constants
  (``planner validate --cross-validate``: for each source, the constants fitted on all the
  others), so a layout that leans on a poorly pinned constant gets a wider spread.
* **Structural error**: what no constant fixes (a mechanism priced too simply, a framework
  detail). Measured by the held-out errors of the same cross-validation: each reference row
  predicted by constants that never saw its source, e = (predicted - published) / published.

Every (fold, held-out error) pair gives one sample of what would be measured,
``predicted_under_fold / (1 + e)``; the interval is the 10th, 50th and 90th percentile of the
samples. Outside the validated envelope (``search.envelope``) the interval is a floor: no
reference run measured that regime.

The numbers live in ``search/data/uncertainty.json`` with the date and command that produced
them (``planner validate --cross-validate --write-uncertainty search/data/uncertainty.json``).
Pricing a few hundred layouts under the folds' constants takes milliseconds, so the search
computes intervals only for its top rows.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Optional

import numpy as np

QUANTILES = (10, 50, 90)
"""The interval's percentiles: an 80% interval and its median."""


@dataclass(frozen=True)
class Uncertainty:
    folds: dict
    """Source left out -> the constants fitted without it (``Calibration`` field -> value)."""
    residuals: np.ndarray
    """Held-out relative errors (predicted - published) / published, one per reference row."""
    provenance: dict


def default_path() -> Path:
    return Path(str(resources.files("search").joinpath("data/uncertainty.json")))


@functools.lru_cache(maxsize=4)
def load(path: Optional[str] = None) -> Uncertainty:
    """The uncertainty file (default: the shipped one)."""
    p = Path(path) if path else default_path()
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as err:
        from hardware_catalog.errors import PlannerInputError

        raise PlannerInputError(f"uncertainty file {p}: cannot read ({err})") from None
    residuals = np.array([r["error"] for r in data["held_out_errors"]], dtype=np.float64)
    provenance = {k: v for k, v in data.items() if k not in ("fold_constants", "held_out_errors")}
    return Uncertainty(folds=data["fold_constants"], residuals=residuals, provenance=provenance)


def fold_throughputs(model, cluster, gpu, batch, data: Optional[Uncertainty] = None) -> np.ndarray:
    """Tokens/s/GPU of each layout of ``batch`` under each fold's constants: (folds, layouts)."""
    from costmodel import collectives, evaluate_batch
    from costmodel.calibration import DEFAULT

    data = data or load()
    out = []
    with collectives.remembered():  # the folds change compute constants only
        for constants in data.folds.values():
            res = evaluate_batch(model, cluster, batch, gpu=gpu, calib=DEFAULT.with_(**constants))
            out.append(np.asarray(res.tokens_per_s_per_gpu, dtype=np.float64))
    return np.array(out)


def combine(fold_tps: np.ndarray, residuals: np.ndarray) -> np.ndarray:
    """(3, layouts): the 10th / 50th / 90th percentile of fold x residual samples of
    measured = predicted_fold / (1 + error)."""
    samples = fold_tps[:, None, :] / (1.0 + residuals[None, :, None])
    return np.percentile(samples.reshape(-1, fold_tps.shape[1]), QUANTILES, axis=0)


def tokens_interval(model, cluster, gpu, batch, data: Optional[Uncertainty] = None,
                    predicted: Optional[np.ndarray] = None) -> np.ndarray:
    """(3, layouts): p10, p50, p90 of tokens/s/GPU for every layout of ``batch``.

    ``predicted``: the layouts' own tokens/s/GPU as the caller priced them. Priced with other
    constants than the shipped ones (a ``planner calibrate`` profile), the interval keeps its
    spread relative to the shipped prediction and moves with the layout's prediction: the folds
    say how far the shipped constants may be off, not where the profile's runs put them."""
    data = data or load()
    q = combine(fold_throughputs(model, cluster, gpu, batch, data), data.residuals)
    if predicted is not None:
        from costmodel import evaluate_batch
        from costmodel.calibration import DEFAULT

        shipped = np.asarray(evaluate_batch(model, cluster, batch, gpu=gpu, calib=DEFAULT).tokens_per_s_per_gpu,
                             dtype=np.float64)
        q = q * (np.asarray(predicted, dtype=np.float64) / shipped)[None, :]
    return q


def interval_fields(record: dict, q) -> dict:
    """The JSON fields of one record's interval (q: its p10, p50, p90 tokens/s/GPU): tokens/s/GPU
    and step time (p10 of step time is the fast end: it goes with p90 of throughput)."""
    tps, step = record["tokens_per_s_per_gpu"], record["step_time_s"]
    lo, mid, hi = (float(x) for x in q)
    return {
        "tokens_per_s_per_gpu_interval": {"p10": lo, "p50": mid, "p90": hi},
        "step_time_s_interval": {"p10": step * tps / hi, "p50": step * tps / mid, "p90": step * tps / lo},
    }
