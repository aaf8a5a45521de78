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


def cross_validation_families(predictor: Predictor, cv: dict) -> list[dict]:
    """Per family (``planner.validate.families.FAMILIES``): in-sample and held-out error stats
    over the rows it matches."""
    from planner.validate.families import family_stats, row_traits

    traits = [row_traits(r.run) for r in predictor.rows]
    ins = family_stats(traits, [row["in_sample_error"] for row in cv["rows"]])
    held = family_stats(traits, [row["held_out_error"] for row in cv["rows"]])
    return [{"family": i["family"], "in_sample": i, "held_out": h} for i, h in zip(ins, held)]


def _pct(stats: dict) -> str:
    if not stats["rows"]:
        return "-"
    return f"{stats['median_abs_error'] * 100:4.1f}% / {stats['p90_abs_error'] * 100:4.1f}%"


def format_cross_validation(cv: dict, intervals: Optional[dict] = None) -> str:
    lines = ["leave one source out: the constants are fitted from PRIOR on every other source (costmodel/calibration.py),",
             "then that source is predicted; in-sample = the shipped constants (costmodel/calibration.py)",
             "",
             f"{'source':<24}{'rows':>5}  {'in-sample median / p90':>24}  {'held-out median / p90':>24}  {'held-out MAPE':>13}"]
    for source, fold in cv["per_source"].items():
        h = fold["held_out"]
        lines.append(f"{source:<24}{h['rows']:>5}  {_pct(fold['in_sample']):>24}  {_pct(h):>24}  {h['mape'] * 100:>12.1f}%")
    s, h = cv["in_sample"], cv["held_out"]
    lines.append(f"{'all':<24}{h['rows']:>5}  {_pct(s):>24}  {_pct(h):>24}  {h['mape'] * 100:>12.1f}%")
    if cv.get("families"):
        lines += ["", "by family (rows of every source that stress one mechanism; held out = each row under its own source's fold):"]
        for fam in cv["families"]:
            ins, held = fam["in_sample"], fam["held_out"]
            lines.append(f"{fam['family']:<24}{held['rows']:>5}  {_pct(ins):>24}  {_pct(held):>24}")
    lines += ["", "constants fitted without each source:",
              f"{'':<24}" + "".join(f"{SHORT[n]:>10}" for n in FIT_RANGES)]
    for source, fold in cv["per_source"].items():
        lines.append(f"{source:<24}" + "".join(f"{fold['constants'][n]:>10g}" for n in FIT_RANGES))
    lines.append(f"{'shipped':<24}" + "".join(f"{getattr(DEFAULT, n):>10g}" for n in FIT_RANGES))
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
    cv["families"] = cross_validation_families(predictor, cv)
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
