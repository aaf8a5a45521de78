"""The ``planner calibrate`` command: map the runs, fit (``calibrate.calibrate``), report, and
write the profile (``planner.calibration_profile``)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Optional

from hardware_catalog.errors import PlannerInputError
from planner.reports import counted
from planner.validate.calibrate import ERROR_SCALE, PRIOR_SD_FRACTION, Calibrated, calibrate

METHOD = (f"MAP: capped-L1 (Laplace, b = {ERROR_SCALE:g}) error on the runs + Gaussian prior on the shipped constants "
          f"(sd = {PRIOR_SD_FRACTION:g} x plausible range); 90% posterior intervals, others at the fit")


def _map_rows(runs_file: Path, confidence: str, skip_invalid: bool = False):
    """(mapped runs at ``confidence``, [(id, reason)] not mapped, [ids] left out by confidence).
    ``skip_invalid``: rows the runs format refuses are left out (listed on stderr), as validate's
    --skip-invalid does; without it any such row is an error naming them all."""
    import typer

    from planner.validate.predict import _unmapped
    from planner.validate.runs import map_run, parse_row, read_runs

    wanted = {"high": ("high",), "medium": ("high", "medium")}.get(confidence)
    mapped, unmapped, left_out = [], [], []
    valid, skipped = read_runs(runs_file, skip_invalid=skip_invalid)
    for line in skipped:
        typer.echo(f"skipped {line}", err=True)
    for i, raw in enumerate(valid, 1):
        row = parse_row(raw, i)
        if wanted is not None and row.confidence not in wanted:
            left_out.append(row.id)
            continue
        try:
            mapped.append(map_run(row, Path(runs_file).parent))
        except (PlannerInputError, KeyError, TypeError, ValueError) as err:
            res = _unmapped(raw, i, err)  # its reason names the fields the row did not read, as validate's
            unmapped.append((res.id, res.reason))
    return mapped, unmapped, left_out


def _pct(stats: Optional[dict]) -> str:
    if not stats or not stats["rows"]:
        return f"{'-':>8}{'-':>10}{'-':>13}{'-':>13}"
    mape = f"{stats['mape'] * 100:.1f}%"
    return (f"{stats['median_abs_error'] * 100:>7.1f}%{mape:>10}{stats['capped_mape'] * 100:>12.1f}%"
            f"{round(stats['mean_signed_error'] * 100, 1) + 0.0:>+12.1f}%")  # + 0.0: no '-0.0%'


def better_held_out(stats: dict) -> Optional[bool]:
    """Whether the runs held out are predicted better (capped mean |error|) than by the shipped
    constants; None without a held-out estimate."""
    held = stats.get("held_out")
    return None if not held else held["capped_mape"] < stats["shipped"]["capped_mape"]


def _alone(stats: dict, configurations: int) -> str:
    """What there is no leave-one-out estimate for, said from the number of configurations
    (0: not counted, taken as one) and runs: "one run", "one configuration" (copies of one run),
    or how many configurations."""
    runs = stats["shipped"]["rows"]
    n = configurations or 1
    if n > 1:
        return f"{n} configurations"
    return "one configuration" if runs > 1 else "one run"


def verdict(stats: dict, configurations: int = 0) -> str:
    """Whether the fit predicts runs it did not see better than the shipped constants, judged as
    the fit judges: the mean |error| with each run's capped at ``fit.CLIP`` (a unit slip off by
    1,000% would otherwise decide it alone; it is warned about separately). ``configurations``:
    distinct configurations among the runs (``Calibrated.configurations``), which word the verdict
    when there is no held-out estimate."""
    held, shipped, unit = stats.get("held_out"), stats["shipped"], stats["loo_unit"]
    if not held:
        alone = _alone(stats, configurations)
        if alone.startswith("one "):
            what = alone.removeprefix("one ")
            return f"{alone}: no leave-one-out estimate; the fit is what this {what} alone says"
        return f"{alone}: no leave-one-out estimate"
    before, after = shipped["capped_mape"] * 100, held["capped_mape"] * 100
    judged = (f"leaving one {unit} out, mean |error| capped at {_clip():.0%} per run (as the fit counts it) "
              f"{before:.1f}% -> {after:.1f}%")
    if better_held_out(stats):
        return f"{judged}: expect the profile to predict new runs of this cluster better than the shipped constants"
    return (f"{judged}: no better than the shipped constants; these runs disagree in a way no global constant "
            "explains, and the shipped constants are the better guess")


def _clip() -> float:
    from planner.validate.fit import CLIP

    return CLIP


def _capped(result: Calibrated) -> list:
    """(id, error with the shipped constants) of the runs off by more than the fit's cap."""
    return [(rid, (a - rep) / rep) for rid, _, rep, a, *_ in result.rows if abs(a - rep) / rep > _clip()]


def warnings(result: Calibrated) -> list[str]:
    """What makes a profile untrustworthy, each said once: a fit to one run (nothing checks it),
    runs the fit caps (``fit.CLIP``: its error counts no further, so a unit slip there goes
    unnoticed and can leave the profile worse on these very runs), and a profile that predicts
    the runs it was fitted on, or those it did not see, worse than the shipped constants."""
    clip = _clip()
    s, out = result.stats, []
    if (result.configurations or len(result.rows)) < 2 and result.moved:
        many = len(result.moved) > 1
        copies = (f" ({len(result.rows)} runs of one configuration: copies of a run add no evidence)"
                  if len(result.rows) > 1 else "")
        out.append(f"fitted to 1 run{copies}: {len(result.moved)} constant{'s' if many else ''} moved to match one "
                   f"number, and no run it did not see checks {'them' if many else 'it'}; give at least 2 runs of "
                   "different configurations before using the profile")
    from planner.validate.measure import suspect_runs_warning

    many = len(_capped(result)) > 1
    slip = suspect_runs_warning([(rid, (a - rep) / rep) for rid, _, rep, a, *_ in result.rows], clip,
                                against=" with the shipped constants",
                                consequence=f"the fit counts each error only up to {clip:.0%}, yet "
                                f"{'such runs still pull' if many else 'such a run still pulls'} on the constants "
                                f"{'they depend' if many else 'it depends'} on")
    if slip:
        out.append(slip)
    if result.moved and s["fitted"]["capped_mape"] > s["shipped"]["capped_mape"]:
        out.append(f"the profile predicts the runs it was fitted on worse than the shipped constants (mean |error| "
                   f"capped at {clip:.0%}: {s['shipped']['capped_mape'] * 100:.1f}% -> "
                   f"{s['fitted']['capped_mape'] * 100:.1f}%)")
    if result.moved and better_held_out(s) is False:
        out.append("the profile predicts runs it did not see no better than the shipped constants (see the verdict)")
    return out


def format_calibration(result: Calibrated, head: list[str]) -> str:
    s = result.stats
    unit = s["loo_unit"]
    capped = f"MAPE <={_clip():.0%}"
    lines = head + ["", f"{'error on these runs':<38}{'median':>8}{'MAPE':>10}{capped:>13}{'mean signed':>13}",
                    f"  {'shipped constants':<36}{_pct(s['shipped'])}",
                    f"  {'fitted (in sample)':<36}{_pct(s['fitted'])}",
                    f"  {'fitted, leave one ' + (unit or 'run') + ' out':<36}{_pct(s['held_out'])}"
                    + ("" if unit else "  (needs at least 2 configurations)"),
                    f"({capped}: each run's |error| counted up to {_clip():.0%}, as the fit counts it; the verdict "
                    "is judged on it" + ("; each configuration counts once, each of its k copies 1/k, as in the fit"
                                         if 0 < result.configurations < len(result.rows) else "") + ")",
                    f"-> {verdict(s, result.configurations)}", ""]
    if result.moved:
        lines.append("constants that moved (90% interval):")
        for m in result.moved:
            lines.append(f"  {m.name} {m.shipped:g} -> {m.value:g} [{m.interval[0]:.3g}, {m.interval[1]:.3g}]: {m.why}")
    elif len(_capped(result)) == len(result.rows):
        lines.append(f"no constant moved: every run is off by more than {_clip():.0%} with the shipped constants, "
                     "past what the fit counts (see the warning)")
    elif _capped(result):
        lines.append(f"no constant moved: the runs within {_clip():.0%} agree with the shipped constants within their "
                     f"prior; those off by more are past what the fit counts (see the warning)")
    else:
        lines.append("no constant moved: the runs agree with the shipped constants within their prior")
    if result.unchanged:
        lines.append("unchanged (kept at the shipped value):")
    for name, why in result.unchanged.items():
        lines.append(f"  {name} {getattr(result.calib, name):g}: {why}")
    lines += ["", f"{'run':<40}{'reported':>10}{'shipped':>10}{'fitted':>10}{'held out':>10}  tokens/s/GPU"]
    for rid, _, rep, a, b, h in result.rows:
        lines.append(f"{rid[:39]:<40}{rep:>10.1f}{a:>10.1f}{b:>10.1f}{'-' if h is None else f'{h:.1f}':>10}")
    return "\n".join(lines)


def profile_text(result: Calibrated, runs_file: Path, version: str, fitted_on: Optional[dict] = None) -> str:
    from planner.calibration_profile import render_profile

    s = result.stats
    tables = {"profile": {"created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                          "planner_version": version, "runs_file": str(runs_file),
                          "runs": [r[0] for r in result.rows], "method": METHOD,
                          **(fitted_on or {})},  # gpus / models of the runs: --calibration warns on another GPU
              "fit": {f"{k}_{m}": s[k][m] for k in ("shipped", "fitted", "held_out") if s.get(k)
                      for m in ("median_abs_error", "mape", "capped_mape", "mean_signed_error")}}
    tables["fit"]["leave_one_out"] = s["loo_unit"] or f"none ({_alone(s, result.configurations)})"
    tables["fit"]["verdict"] = verdict(s, result.configurations)
    tables["fit"]["warnings"] = warnings(result) or None
    # Always a [constants] table, empty when nothing moved: --calibration then reads the profile
    # as the shipped constants instead of refusing it.
    tables["constants"] = {}
    for m in result.moved:
        tables[f"constants.{m.name}"] = {"value": m.value, "shipped": m.shipped, "interval": list(m.interval), "why": m.why}
    header = ("planner calibration profile, written by `planner calibrate`.\n"
              "Use it with --calibration FILE on evaluate, search, export, sweep and validate. The constants below\n"
              "replace the shipped ones (costmodel/calibration.py); every other constant keeps its shipped value.")
    return render_profile(tables, header)


def run_calibrate(runs_file: Path, out: Optional[Path], confidence: str = "high", as_json: bool = False,
                  force: bool = False, version: str = "", skip_invalid: bool = False) -> None:
    import typer

    from planner.calibration_profile import write_profile
    from planner.validate.fit import Predictor, prepare
    from planner.validate.report import NOTHING_MAPPED

    if confidence not in ("high", "medium", "all"):
        raise PlannerInputError(f"--confidence={confidence}: allowed high, medium, all")
    if out is not None:  # before the fit: a path that cannot be written is said at once
        from planner.calibration_profile import check_profile_path

        check_profile_path(out, force)
    mapped, unmapped, left_out = _map_rows(runs_file, confidence, skip_invalid)
    rows = prepare(mapped)
    kept = {r.id for r in rows}
    from planner.validate.predict import _first_broken_rule

    unmapped += [(m.id, "no layout satisfies the published knobs and the planner's rules" + _first_broken_rule(m))
                 for m in mapped if m.id not in kept]  # the rule, as validate says it
    notes = [f"not mapped: {rid}: {why}" for rid, why in unmapped]
    memory = [r.id for r in rows if r.run.reported_memory_gib is not None]
    if memory:  # validate compares it; no fitted constant changes a memory figure
        notes.append(f"peak memory given for {counted(len(memory), 'run')} ({', '.join(memory[:4])}"
                     f"{', ...' if len(memory) > 4 else ''}): not fitted (no fitted constant changes memory; "
                     "planner validate --runs compares it)")
    notes += [f"{r.id}: no layout fits in memory by planner's count; priced with the one needing the least "
              "(as validate does: '(nothing fits; least-memory layout)')" for r in rows if not r.fits]
    if left_out:
        notes.append(f"left out by --confidence {confidence}: {', '.join(left_out)} (--confidence all fits them too)")
    if not rows:
        if as_json:  # --json: JSON on stdout whatever happens (the reasons as notes)
            typer.echo(json.dumps({"constants": {}, "rows": [], "notes": notes, "profile": None}, indent=2))
        for line in [] if as_json else notes:
            typer.echo(line)
        typer.echo(f"error: no row of {runs_file} could be used to calibrate", err=True)
        raise typer.Exit(NOTHING_MAPPED)
    result = calibrate(Predictor(rows))
    fitted_on = {"gpus": sorted({r.run.gpu.name for r in rows}), "models": sorted({r.run.model.name for r in rows})}
    text = profile_text(result, runs_file, version, fitted_on)
    if out is not None:
        write_profile(Path(out), text, force=force)
    _print(result, runs_file, out, notes, as_json, confidence,
           given=len(rows) + len(unmapped) + len(left_out), unmapped=len(unmapped), left_out=len(left_out))


def _print(result: Calibrated, runs_file, out, notes, as_json: bool, confidence: str, given: int = 0,
           unmapped: int = 0, left_out: int = 0) -> None:
    import typer

    if as_json:
        typer.echo(json.dumps({
            "constants": {m.name: {"value": m.value, "shipped": m.shipped, "interval": list(m.interval), "why": m.why}
                          for m in result.moved},
            "unchanged": result.unchanged, "errors": result.stats, "configurations": result.configurations, "verdict": verdict(result.stats, result.configurations), "method": METHOD,
            "rows": [dict(zip(("id", "source", "reported", "shipped", "fitted", "held_out"), r)) for r in result.rows],
            "notes": notes, "warnings": warnings(result), "profile": str(out) if out else None}, indent=2))
        return
    sources = {r[1] for r in result.rows}
    n = len(result.rows)
    of = f"{n} of {given} runs" if given > n else counted(n, "run")
    why = [f"{unmapped} not mapped"] * bool(unmapped) + [f"{left_out} left out by --confidence"] * bool(left_out)
    copies = (f", {counted(result.configurations, 'distinct configuration')}"
              if 0 < result.configurations < n else "")
    head = [f"calibrating on {of} of {runs_file} ({confidence}-confidence{', ' if why else ''}{', '.join(why)}), "
            f"{counted(len(sources), 'source')}{copies}", f"fit: {METHOD}"] + notes
    typer.echo(format_calibration(result, head))
    typer.echo("")
    for line in warnings(result):  # on stderr too, so a script that keeps only stderr sees them
        typer.echo(f"warning: {line}", err=True)
    if out is not None and result.moved and better_held_out(result.stats) is False:
        typer.echo(f"wrote {out}, though the verdict above finds it no better than the shipped constants on runs it "
                   "did not see: keep the shipped constants (no --calibration) unless you know why")
    elif out is not None:
        typer.echo(f"wrote {out}: use it with --calibration {out} on evaluate, search, export, sweep and validate")
    else:
        typer.echo("(give --out PROFILE.toml to write these constants as a profile)")
