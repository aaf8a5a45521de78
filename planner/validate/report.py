"""Reporting: accuracy summaries, the text table, the Llama 3 405B production check, the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np

from hardware_catalog.errors import PlannerInputError
from planner.reports import counted
from planner.validate.predict import RowResult, validate_rows
from planner.validate.runs import read_runs

NOTHING_MAPPED = 3
"""Exit status when a runs file is well formed but none of its rows could be mapped (a GPU or
model the catalog lacks, no layout the rules allow): the input is valid, planner cannot use it."""


def _counted(r: RowResult, confidence: str) -> bool:
    return confidence == "all" or r.confidence == confidence or (confidence == "medium" and r.confidence == "high")


def summarize(results: list[RowResult], confidence: str = "high", state_filter: bool = False) -> dict:
    """Accuracy over the predicted rows at ``confidence``. ``state_filter``: also list the
    predicted rows the filter leaves out (``not_counted``), so none drops out unsaid."""
    keep = [r for r in results if r.error is not None and _counted(r, confidence)]

    def stats(rs):
        errs = np.abs([r.error for r in rs])
        if len(errs) == 0:
            return {"rows": 0, "median_abs_error": None, "p90_abs_error": None, "mape": None}
        return {
            "rows": len(rs),
            "median_abs_error": float(np.median(errs)),
            "p90_abs_error": float(np.percentile(errs, 90)),
            "mape": float(np.mean(errs)),
            "mean_signed_error": float(np.mean([r.error for r in rs])),
        }

    def memory_stats(rs):
        mem = [r for r in rs if r.memory_error is not None]
        return {"rows": len(mem), "median_abs_error": float(np.median(np.abs([r.memory_error for r in mem]))) if mem else None}

    from planner.validate.families import RowTraits, family_stats

    summary = stats(keep)
    summary["confidence"] = confidence
    summary["per_source"] = {src: stats([r for r in keep if r.source == src]) for src in sorted({r.source for r in keep})}
    for src, st in summary["per_source"].items():
        st["memory"] = memory_stats([r for r in results if r.source == src])
    summary["memory"] = memory_stats(results)
    summary["families"] = family_stats([RowTraits(**r.traits) for r in keep if r.traits],
                                       [r.error for r in keep if r.traits])
    from planner.validate.trend import scale_trends

    summary["scale_trends"] = scale_trends([r for r in results if r.error is not None])
    summary["unmapped"] = [{"id": r.id, "reason": r.reason} for r in results if r.error is None]
    left_out = [{"id": r.id, "confidence": r.confidence} for r in results if r.error is not None and not _counted(r, confidence)]
    if state_filter and left_out:
        summary["not_counted"] = left_out
    return summary


def _filter_text(summary: dict) -> str:
    """'high-confidence rows' and, where the filter left rows out, which and how to count them."""
    text = f"{summary['confidence']}-confidence rows"
    left = summary.get("not_counted")
    if left:
        ids = ", ".join(r["id"] for r in left[:5]) + (", ..." if len(left) > 5 else "")
        text += (f"; {len(left)} predicted row{'s' if len(left) > 1 else ''} of lower confidence not counted: {ids}; "
                 "--confidence all counts them")
    return text


def format_notes(results: list[RowResult]) -> str:
    """Each predicted row's assumptions (how it was read, converted, searched), indented."""
    lines = ["how each row was read (--json: \"assumptions\"):"]
    for r in results:
        if r.error is not None and r.assumptions:
            lines.append(f"  {r.id}:")
            lines += [f"    - {a}" for a in r.assumptions]
    return "\n".join(lines)


def format_table(results: list[RowResult], summary: dict, users: bool = False) -> str:
    """The table, the summaries and the rows not mapped. ``users``: a user's runs file, whose
    families without a row are left out (four 'no rows' lines say nothing about a few runs)."""
    lines = [f"{'run':<40}{'GPUs':>6}  {'layout (searched knobs chosen by planner)':<64}{'reported':>10}{'predicted':>11}{'error':>8}  mem GiB (rep/pred)"]
    for r in results:
        if r.error is None:
            continue
        mem = ""
        if r.reported_memory_gib:
            mem = f"{r.reported_memory_gib:.1f}/{r.predicted_memory_gib:.1f}"
        flag = "" if r.fits else " (nothing fits; least-memory layout)"
        err = f"{r.error * 100:>+7.1f}%"
        # past +/-999.9% the column is full: a space keeps it apart from the prediction
        err = err if err.startswith(" ") else f" {r.error * 100:+.0f}%"
        lines.append(
            f"{r.id[:39]:<40}{r.gpus:>6}  {r.layout[:63]:<64}{r.reported:>10.1f}{r.predicted:>11.1f}{err}  {mem}{flag}"
        )
    lines.append("")
    s = summary

    def fmt(st):
        if not st["rows"]:
            return "no rows"
        return (f"{counted(st['rows'], 'row')}: median |err| {st['median_abs_error'] * 100:.1f}%, "
                f"p90 {st['p90_abs_error'] * 100:.1f}%, MAPE {st['mape'] * 100:.1f}%, mean signed {st['mean_signed_error'] * 100:+.1f}%")

    def fmt_memory(st):
        mem = st.get("memory") or {}
        return f"; peak memory {counted(mem['rows'], 'row')}, median |err| {mem['median_abs_error'] * 100:.1f}%" if mem.get("rows") else ""

    lines.append(f"summary ({_filter_text(s)}) {fmt(s)}")
    width = max([24] + [len(src) + 2 for src in s["per_source"]])  # a long source name stays apart from its count
    for src, st in s["per_source"].items():
        lines.append(f"  {src:<{width}}{fmt(st)}{fmt_memory(st)}")
    if s["memory"]["rows"]:
        lines.append(f"peak memory: {counted(s['memory']['rows'], 'row')} with published peak, median |err| {s['memory']['median_abs_error'] * 100:.1f}%")
    families = [st for st in s.get("families") or [] if st["rows"] or not users]
    if families:
        from planner.validate.families import format_family_line

        lines.append("by family (rows of every source that stress one mechanism):")
        lines += [format_family_line(st) for st in families]
    if s.get("scale_trends"):
        from planner.validate.trend import MIN_GPU_COUNTS, MIN_SPAN, format_trend_line

        lines.append(f"error trend with GPU count (one source, model and framework at >= {MIN_GPU_COUNTS} GPU counts "
                     f"spanning >= {MIN_SPAN:g}x; rows of every confidence; slope of the signed error per tenfold GPUs, "
                     "least squares, +/- one standard error; a trend = over two):")
        lines += [format_trend_line(t) for t in s["scale_trends"]]
    for u in s["unmapped"]:
        lines.append(f"not mapped: {u['id']}: {u['reason']}")
    return "\n".join(lines)


def llama3_405b_production_check() -> dict:
    """The Llama 3 405B production layout (Llama 3 paper, Table 4: TP8 CP1 PP16 DP128 on
    16,384 H100, 8K sequences, 16M-token batches; Sec. 3.3.2: one layer fewer on the first and
    last stages, optimizer states and gradients sharded over data parallel, no activation
    checkpointing): peak memory per recompute setting, Megatron's ZeRO-1 and the paper's ZeRO-2."""
    from planner.job import Job, ProblemRequest, price

    job = Job(ProblemRequest("llama3-405b", 16384, cluster="dgx-h100", gbs=2048, seq_len=8192))
    out = {}
    variants = {
        "none, ZeRO-2, 7/8/7 layers (the paper's)": ("none", None, 1, None),
        "none": ("none", None, 1, None),
        "selective": ("selective", None, 1, None),
        # Megatron-Core's fine-grained selective recompute of the MLP (--recompute-modules mlp).
        "selective (mlp)": ("selective", None, 1, ("mlp",)),
        "full": ("full", None, 1, None),
        # Interleaved (the paper's schedule) with half (2 quarters) of each stage's layers recomputed.
        "full, half the layers, vpp 4": ("full", 2, 4, None),
    }
    for label, (rc, quarters, vpp, modules) in variants.items():
        paper = label.startswith("none, ZeRO-2")
        record = price(job, dict(tp=8, cp=1, pp=16, vpp=vpp, zero=2 if paper else 1, mbs=1, recompute=rc,
                                 recompute_share=quarters, recompute_modules=modules,
                                 pp_first_layers=7 if paper else None, pp_last_layers=7 if paper else None)).record
        out[label] = {
            "peak_gib": record["memory_gib"]["peak"],
            "capacity_gib": record["memory_gib"]["capacity"],
            "fits": record["fits"],
            "tokens_per_s_per_gpu": record["tokens_per_s_per_gpu"],
        }
    return out


def format_production_check(check: dict) -> str:
    lines = ["Llama 3 405B production layout (TP8 CP1 PP16 DP128, 16,384 x H100 80GB, seq 8192, gbs 2048 = 16M tokens):"]
    for rc, v in check.items():
        verdict = "fits" if v["fits"] else "does not fit"
        lines.append(f"  recompute {rc:<42} peak {v['peak_gib']:6.1f} of {v['capacity_gib']:.1f} GiB: {verdict:<13} "
                     f"{v['tokens_per_s_per_gpu']:.0f} tokens/s/GPU")
    fitting = [rc for rc, v in check.items() if v["fits"]]
    lines.append(f"  -> fits an 80 GB H100 with recompute: {'; '.join(fitting) if fitting else 'none of them'}")
    return "\n".join(lines)


def _suspect_runs(results: list[RowResult], calibration: Optional[str]) -> Optional[str]:
    """calibrate's warning on runs whose measurement looks wrong (``measure.suspect_runs_warning``),
    over the predicted rows: throughput off by more than the fit's cap, memory by a factor of 2."""
    from planner.validate.fit import CLIP
    from planner.validate.measure import suspect_runs_warning

    rows = [r for r in results if r.error is not None]
    return suspect_runs_warning([(r.id, r.error) for r in rows], CLIP,
                                [(r.id, r.reported_memory_gib, r.predicted_memory_gib) for r in rows],
                                against=" with the profile's constants" if calibration else "")


def _row_json(r) -> dict:
    """A row of --json: the result without the per-choice alternatives the trend report uses."""
    return {k: v for k, v in r.__dict__.items() if k != "alternatives"}


def run_validate(runs: Optional[Path], as_json: bool = False, confidence: str = "high", plot: Optional[Path] = None,
                 calib=None, skip_invalid: bool = False, calibration: Optional[str] = None) -> None:
    """The command. The shipped reference set's table is printed as published (its rows state
    their own notes); a user's runs file also gets each row's notes and the rows the confidence
    filter leaves out. Exit 3 when no row of the file could be mapped. ``calibration``: the
    profile ``calib`` was read from, said with the figures (as evaluate and search say it)."""
    import typer

    from costmodel.calibration import DEFAULT
    from planner.reports.plots import check_plot_path

    if confidence not in ("high", "medium", "all"):
        raise PlannerInputError(f"--confidence={confidence}: allowed high, medium, all")
    plot = check_plot_path(plot)
    rows, skipped = read_runs(runs, skip_invalid=skip_invalid)
    for line in skipped:  # --skip-invalid: what was left out, and why (stderr: the table stays clean)
        typer.echo(f"skipped {line}", err=True)
    results = validate_rows(rows, calib or DEFAULT, base_dir=Path(runs).parent if runs else None)
    users = runs is not None
    summary = summarize(results, confidence, state_filter=users)
    if not any(r.error is not None for r in results):
        typer.echo(json.dumps({"rows": [_row_json(r) for r in results], "summary": summary}, indent=2) if as_json
                   else format_table(results, summary, users))
        typer.echo(f"error: no row of {runs} could be mapped (the reasons are listed)", err=True)
        raise typer.Exit(NOTHING_MAPPED)
    # The Llama 3 405B production check belongs to the shipped reference set; a user's runs file
    # gets its own rows and notes only.
    check = None if users else llama3_405b_production_check()
    # A user's runs: the check calibrate makes (a unit slip would read as a model error); the
    # reference set's misses are the model's, reported in its families and trends instead.
    slip = _suspect_runs(results, calibration) if users else None
    if as_json:
        out = {"rows": [_row_json(r) for r in results], "summary": summary}
        if calibration is not None:
            out["calibration"] = calibration
        if check is not None:
            out["llama3_405b_production"] = check
        if skipped:
            out["skipped"] = skipped
        if slip:
            out["warnings"] = [slip]
        typer.echo(json.dumps(out, indent=2))
    else:
        typer.echo(format_table(results, summary, users))
        if calibration is not None:
            typer.echo(f"constants from calibration profile {calibration}")
        if users:
            typer.echo("")
            typer.echo(format_notes(results))
        if check is not None:
            typer.echo("")
            typer.echo(format_production_check(check))
    if slip:
        typer.echo(f"warning: {slip}", err=True)
    if plot is not None:
        from planner.reports.plots import plot_validation

        typer.echo(f"wrote {plot_validation(results, summary, plot, 'your' if users else 'published')}", err=True)
