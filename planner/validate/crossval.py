"""``planner validate --cross-validate``: accuracy on sources the constants never saw.

Loads a runs file, maps its rows at the chosen confidence, and runs ``fit.cross_validate``
(and, with ``--bootstrap N``, ``fit.bootstrap``); prints per source the in-sample errors (the
shipped constants, fitted on every source) next to the held-out ones (constants fitted without
that source), and the constants each fold chose.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from costmodel.calibration import DEFAULT, PRIOR
from hardware_catalog.errors import PlannerInputError
from planner.validate.fit import FIT_RANGES, Predictor, bootstrap, cross_validate, error_stats, prepare
from planner.validate.runs import load_runs, map_run, parse_row

SHORT = {
    "gemm_efficiency_bf16": "gemm bf16", "gemm_efficiency_fp8": "gemm fp8", "attention_efficiency": "attn",
    "native_attention_speedup": "fa3 x", "memory_bound_efficiency": "hbm", "kernel_overhead_us": "kernel us",
    "sustained_clock_fraction": "clock", "comm_sm_fraction": "comm SMs",
}
"""Column titles of the constants."""


FAMILIES: tuple = (
    ("MoE", lambda row: row.run.model.moe is not None),
)
"""Named row families the cross-validation also reports on their own: (name, predicate over a
``fit.PreparedRow``). A new family is one more pair."""


def family_stats(predictor: Predictor, cv: dict) -> dict:
    """Family name -> in-sample and held-out error stats of its rows (``FAMILIES``)."""
    out = {}
    for name, member in FAMILIES:
        keep = [member(r) for r in predictor.rows]
        rows = [e for e, k in zip(cv["rows"], keep) if k]
        out[name] = {"in_sample": error_stats([e["in_sample_error"] for e in rows]),
                     "held_out": error_stats([e["held_out_error"] for e in rows])}
    return out


def prepared_rows(runs_file: Optional[Path], confidence: str = "high"):
    """The rows of a runs file at ``confidence`` (high, medium = high + medium, all), mapped and
    reduced to what a calibration changes."""
    wanted = {"high": ("high",), "medium": ("high", "medium")}.get(confidence)
    mapped = []
    base_dir = Path(runs_file).parent if runs_file else None
    for i, raw in enumerate(load_runs(runs_file), 1):
        row = parse_row(raw, i)  # a row without "confidence" is high
        if wanted is not None and row.confidence not in wanted:
            continue
        try:
            mapped.append(map_run(row, base_dir))
        except (PlannerInputError, KeyError, TypeError, ValueError):
            continue  # `planner validate` lists unmapped rows with the reason
    return prepare(mapped)


def _pct(stats: dict) -> str:
    if not stats["rows"]:
        return "-"
    return f"{stats['median_abs_error'] * 100:4.1f}% / {stats['p90_abs_error'] * 100:4.1f}%"


def format_cross_validation(cv: dict, intervals: Optional[dict] = None) -> str:
    lines = ["leave one source out: the constants are fitted from PRIOR on every other source (costmodel/calibration.py),",
             "then that source is predicted; in-sample = the shipped constants, fitted on every source",
             "",
             f"{'source':<24}{'rows':>5}  {'in-sample median / p90':>24}  {'held-out median / p90':>24}  {'held-out MAPE':>13}"]
    for source, fold in cv["per_source"].items():
        h = fold["held_out"]
        lines.append(f"{source:<24}{h['rows']:>5}  {_pct(fold['in_sample']):>24}  {_pct(h):>24}  {h['mape'] * 100:>12.1f}%")
    s, h = cv["in_sample"], cv["held_out"]
    lines.append(f"{'all':<24}{h['rows']:>5}  {_pct(s):>24}  {_pct(h):>24}  {h['mape'] * 100:>12.1f}%")
    for name, fam in cv.get("families", {}).items():
        fh = fam["held_out"]
        mape = f"{fh['mape'] * 100:>12.1f}%" if fh["rows"] else f"{'-':>13}"
        lines.append(f"{'family: ' + name:<24}{fh['rows']:>5}  {_pct(fam['in_sample']):>24}  {_pct(fh):>24}  {mape}")
    lines += ["", "constants fitted without each source:",
              f"{'':<24}" + "".join(f"{SHORT[n]:>10}" for n in FIT_RANGES)]
    for source, fold in cv["per_source"].items():
        lines.append(f"{source:<24}" + "".join(f"{fold['constants'][n]:>10g}" for n in FIT_RANGES))
    lines.append(f"{'shipped (all sources)':<24}" + "".join(f"{getattr(DEFAULT, n):>10g}" for n in FIT_RANGES))
    lines.append(f"{'prior (before any fit)':<24}" + "".join(f"{getattr(PRIOR, n):>10g}" for n in FIT_RANGES))
    if intervals:
        lines += ["", f"bootstrap over sources ({intervals['resamples']} resamples): 5th-95th percentile of each constant",
                  f"{'':<24}" + "".join(f"{SHORT[n]:>10}" for n in FIT_RANGES),
                  f"{'p5':<24}" + "".join(f"{intervals['constants'][n]['p5']:>10g}" for n in FIT_RANGES),
                  f"{'p95':<24}" + "".join(f"{intervals['constants'][n]['p95']:>10g}" for n in FIT_RANGES)]
    return "\n".join(lines)


def run_cross_validation(runs_file: Optional[Path], confidence: str = "high", resamples: int = 0,
                         as_json: bool = False, seed: int = 0, write_uncertainty: Optional[Path] = None,
                         command: str = "") -> None:
    import typer

    if confidence not in ("high", "medium", "all"):
        raise PlannerInputError(f"--confidence={confidence}: allowed high, medium, all")
    if resamples < 0:
        raise PlannerInputError(f"--bootstrap={resamples}: must be >= 0 (resamples)")
    predictor = Predictor(prepared_rows(runs_file, confidence))
    if len({r.source for r in predictor.rows}) < 2:
        raise PlannerInputError("--cross-validate needs rows from at least two sources")
    cv = cross_validate(predictor)
    cv["families"] = family_stats(predictor, cv)
    intervals = None
    if resamples:
        intervals = {"resamples": resamples, "seed": seed, "constants": bootstrap(predictor, resamples, seed)}
    if as_json:
        typer.echo(json.dumps({**cv, "bootstrap": intervals}, indent=2))
    else:
        typer.echo(format_cross_validation(cv, intervals))
    if write_uncertainty is not None:
        from planner.validate.envelope import uncertainty_data, write_json

        data = uncertainty_data(cv, runs_file, confidence, command)
        typer.echo(f"wrote {write_json(write_uncertainty, data, '--write-uncertainty')}", err=True)
