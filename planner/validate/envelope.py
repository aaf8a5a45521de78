"""The validated envelope and the interval data, derived from the reference runs, with provenance.

* ``planner validate --write-envelope FILE``: for each mechanism of ``search.envelope``, what the
  high-confidence rows of the runs file cover, read off the layouts ``planner validate`` maps
  (or, where a row leaves knobs unstated, chooses) for them.
* ``planner validate --cross-validate --write-uncertainty FILE``: the leave-one-source-out folds'
  constants and held-out errors that ``search.uncertainty`` turns into intervals.

Both files carry the date, the command, the runs file and its SHA-256, so a reader can tell
which reference set they describe; the shipped ones live in ``search/data/``.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Optional

from hardware_catalog.errors import PlannerInputError

WANTED = {"high": ("high",), "medium": ("high", "medium")}
"""--confidence -> the row confidences kept (all: every row)."""


def runs_provenance(runs_file: Optional[Path], confidence: str, command: str) -> dict:
    """Date, command, runs file and its SHA-256, confidence."""
    if runs_file is None:
        text = resources.files("planner").joinpath("data/published_runs.json").read_bytes()
        name = "planner/data/published_runs.json (shipped)"
    else:
        text, name = Path(runs_file).read_bytes(), str(runs_file)
    return {"generated": datetime.date.today().isoformat(), "command": command, "runs_file": name,
            "runs_sha256": hashlib.sha256(text).hexdigest(), "confidence": confidence}


def observations(rows: list[dict], confidence: str = "high") -> list[tuple]:
    """(search.envelope.Job, one-layout columns) of every row at ``confidence`` that
    ``planner validate`` predicts (its layout, stated or chosen)."""
    from costmodel.layout import LayoutBatch
    from costmodel.options import RECORDED_OPTIONS, Layout
    from planner.validate.predict import predict_run
    from planner.validate.runs import map_run
    from search.envelope import Job, columns_of

    wanted = WANTED.get(confidence)
    out = []
    for row in rows:
        if wanted is not None and row.get("confidence") not in wanted:
            continue
        try:
            run = map_run(row)
        except (PlannerInputError, KeyError, TypeError, ValueError):
            continue  # `planner validate` lists it with the reason
        res = predict_run(run)
        if res.error is None:
            continue
        lay = Layout(**{o.name: res.values[o.name] for o in RECORDED_OPTIONS})
        job = Job(run.model, run.gpu, run.gpus, lay.seq_len)
        out.append((job, columns_of(LayoutBatch.from_layouts([lay]))))
    return out


def derive_envelope(runs_file: Optional[Path] = None, confidence: str = "high", command: str = "") -> dict:
    """The envelope file's content for a runs file."""
    from planner.validate.runs import load_runs
    from search.envelope import derive

    obs = observations(load_runs(runs_file), confidence)
    if not obs:
        raise PlannerInputError("--write-envelope: no row of the runs file could be predicted")
    prov = runs_provenance(runs_file, confidence, command)
    prov["rows"] = len(obs)
    prov["about"] = ("What the reference runs cover, per mechanism (search/envelope.py): min..max or the "
                     "values seen, over the layouts planner validate maps or chooses for them.")
    return {"provenance": prov, "mechanisms": derive(obs)}


def uncertainty_data(cv: dict, runs_file: Optional[Path], confidence: str, command: str) -> dict:
    """The uncertainty file's content from a ``fit.cross_validate`` result."""
    import numpy as np

    errors = np.array([r["held_out_error"] for r in cv["rows"]])
    prov = runs_provenance(runs_file, confidence, command)
    return {
        **prov,
        "about": ("Leave-one-source-out cross-validation (planner/validate/fit.py): the constants fitted without "
                  "each source, and each row's error when predicted by them. search/uncertainty.py prices a layout "
                  "under every fold and divides by (1 + each error): p10/p50/p90 of the samples."),
        "rows": len(errors),
        "held_out": {k: cv["held_out"][k] for k in ("median_abs_error", "p90_abs_error", "mean_signed_error")},
        "residual_quantiles": {f"p{q}": float(np.percentile(errors, q)) for q in (10, 50, 90)},
        "fold_constants": {s: f["constants"] for s, f in cv["per_source"].items()},
        "held_out_errors": [{"id": r["id"], "source": r["source"], "error": round(r["held_out_error"], 5)}
                            for r in cv["rows"]],
    }


def write_json(path: Path, data: dict, flag: str) -> Path:
    """Write ``data`` to ``path``; one-line error naming ``flag``."""
    try:
        Path(path).write_text(json.dumps(data, indent=1) + "\n")
    except OSError as err:
        raise PlannerInputError(f"{flag} {path}: cannot write ({err.strerror})") from None
    return Path(path)
