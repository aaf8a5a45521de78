"""``planner search --from-launch FILE``: search the file's problem and rank the file's own layout.

The file's model, global batch, sequence length, GPU count and type are the problem; its
implementation settings (how its framework runs: attention kernel, fused loss, overlaps, gradient
dtype) and precision are applied to every candidate, so the comparison is with the same framework.
``--keep tp,pp`` pins those knobs at the file's values. The reference row is the file's layout,
priced by the same cost model; its rank is its place among every layout that fits, by step time.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from costmodel.options import IMPLEMENTATION_OPTIONS, OPTIONS, OPTIONS_BY_NAME, SEARCHED
from hardware_catalog.errors import PlannerInputError

RANK_POOL = 200
"""The search keeps this many layouts (or --top, if more) so the reference's rank is exact within it."""
KNOBS = tuple(o.name for o in OPTIONS if o.search == SEARCHED) + ("recompute_layers", "recompute_modules")
"""What a layout changes between candidates (the searched options)."""
DISPLAYED = ("dp", "tp", "pp", "vpp", "cp", "ep", "etp", "zero", "mbs", "recompute", "recompute_layers",
             "recompute_modules", "precision", "sequence_parallel", "pp_first_layers", "pp_last_layers")


def parse_keep(keep: str | None) -> tuple[str, ...]:
    """--keep tp,pp -> ("tp", "pp"); one-line error naming an unknown knob and the allowed ones."""
    if not keep:
        return ()
    names = tuple(k.strip().replace("-", "_") for k in keep.split(",") if k.strip())
    allowed = tuple(o.name for o in OPTIONS if o.search == SEARCHED)
    for name in names:
        if name not in allowed:
            raise PlannerInputError(f"--keep {name}: not a searched knob (allowed: {', '.join(allowed)})")
    return names


def _single_count(gpus) -> int | None:
    if gpus is None:
        return None
    from search.api import parse_gpu_counts

    counts = parse_gpu_counts(gpus)
    if len(counts) != 1:
        raise PlannerInputError(f"--gpus {gpus}: with --from-launch give one GPU count (the reference runs on one)")
    return counts[0]


def search_request(r, request, given: dict, keep: tuple, progress: bool):
    """The search request (``search.request``) for the file's problem: its model, GPUs, batch and
    implementation settings, its precision unless typed, the --keep knobs at its values, and
    enough rows that the reference's rank is exact (``RANK_POOL``)."""
    from dataclasses import replace

    lay = r.layout
    pins = {k: getattr(lay, k) for k in keep}
    pins.update({k: v for k, v in given.items() if OPTIONS_BY_NAME[k].search == SEARCHED})
    pins.setdefault("precision", lay.precision)  # the file's numerics, unless --precision says otherwise
    problem = replace(request.problem, model=r.setup.model, gpus=r.gpus, gpu=r.setup.gpu, cluster=r.setup.cluster,
                      gbs=lay.gbs, seq_len=lay.seq_len, tokens_per_batch=None)
    options = replace(request.options, pins=pins, implementation={k: getattr(lay, k) for k in IMPLEMENTATION_OPTIONS},
                      recompute_modules=lay.recompute_modules if lay.recompute == "selective" else None,
                      progress=progress)
    ranking = replace(request.ranking, top=max(request.ranking.top, RANK_POOL))
    return replace(request, problem=problem, options=options, ranking=ranking)


def changes(ref: dict, other: dict) -> list[str]:
    """"knob old->new" for every searched knob two records' layouts set differently."""
    out = []
    for k in DISPLAYED:
        a, b = ref["layout"].get(k), other["layout"].get(k)
        if k in ("pp_first_layers", "pp_last_layers") and ref["layout"]["pp"] == other["layout"]["pp"] == 1:
            continue
        if _norm(a) != _norm(b):
            show = _layers if k == "recompute_layers" else _show
            out.append(f"{k} {show(a)}->{show(b)}")
    return out


def _norm(v):
    return tuple(v) if isinstance(v, list) else v


def _layers(v) -> str:
    """recompute_layers as a reader sees it: all, or N layers per stage."""
    return str(v) if v else "all"


def _show(v) -> str:
    from planner.cli.from_launch.resolve import show

    return "-" if v is None else show(v)


def rank_of(ref: dict, results: list[dict], pool: int, fits: int) -> dict:
    """The reference's place among the search's layouts by step time."""
    step = ref["step_time_s"]
    faster = [x for x in results if x["step_time_s"] < step * (1 - 1e-9)]
    same = next((x for x in results if not changes(ref, x)), None)
    exact = len(faster) < len(results) or len(results) < pool
    out = {"rank": len(faster) + 1 if exact else None, "of": fits, "faster_shown": len(faster),
           "same_as": same["rank"] if same else None}
    if results:
        best = results[0]
        out["best_gain"] = ref["step_time_s"] / best["step_time_s"] - 1.0
        out["best_changes"] = changes(ref, best)
    if faster:
        small = min(faster, key=lambda x: (len(changes(ref, x)), x["step_time_s"]))
        out["smallest"] = {"rank": small["rank"], "gain": step / small["step_time_s"] - 1.0, "changes": changes(ref, small)}
    return out


def _table(results: list[dict], ref: dict, rank: dict, top: int, splits: bool, stats: dict) -> str:
    """The best rows with the file's (``ref``) at its place, and the interval and envelope notes."""
    from planner.reports.search import format_table
    from planner.reports.search_notes import table_notes

    shown = results[:top]
    row = dict(ref, rank="ref")
    at = rank["rank"] - 1 if rank["rank"] is not None and rank["rank"] <= len(shown) else len(shown)
    rows = shown[:at] + [row] + shown[at:]
    if not shown:
        return format_table(rows, False, splits)
    marks, notes = table_notes(rows, shown, stats)
    return "\n".join([format_table(rows, False, splits, marks)] + notes)


def summary_lines(ref: dict, rank: dict, fits_ref: bool, limit: float) -> list[str]:
    if not fits_ref:
        where = f"not ranked: it does not fit ({rank['of']:,} layouts do)"
    elif rank["rank"] is not None:
        where = f"#{rank['rank']} of {rank['of']:,} fitting layouts"
    else:
        where = f"slower than the {rank['faster_shown']} best of {rank['of']:,} fitting layouts"
    if rank.get("same_as"):
        where += f" (it is row #{rank['same_as']})"
    mem = ref["memory_gib"]
    fit = "fits" if fits_ref else f"DOES NOT FIT the {limit:.1f} GiB limit"
    lines = [f"reference (the file's layout): {where}; {ref['step_time_s']:.3f} s/step, "
             f"{ref['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, {mem['peak']:.1f} GiB ({fit})"]
    if "best_gain" in rank:
        gain = rank["best_gain"]
        what = ", ".join(rank["best_changes"]) or "the same layout"
        lines.append(f"best alternative #1: {gain:+.1%} tokens/s ({what})")
    if "smallest" in rank:
        s = rank["smallest"]
        lines.append(f"smallest change that is faster, #{s['rank']}: {s['gain']:+.1%} tokens/s ({', '.join(s['changes'])})")
    elif rank.get("rank") == 1 and fits_ref and rank["of"]:
        lines.append("no layout that fits is faster than the file's")
    return lines


def run_reference_search(launch, request, keep: str | None, calibration, outputs, files, progress: bool) -> None:
    """The search command's work with ``--from-launch``: ``launch`` the file and the flags next to
    it (``planner.cli.from_launch.commands.LaunchRequest``), ``request`` the search request of the
    flags (its problem replaced by the file's), ``files`` what --csv / --export write."""
    from dataclasses import replace

    from planner.cli.common import add_interval_and_envelope
    from planner.cli.errors import EXIT_NOTHING_FITS
    from planner.cli.from_launch.commands import resolve_request
    from planner.job import Pricing
    from planner.reports.search import check_outputs
    from search.api import search
    from search.exhaustive import memory_limit_gib

    if request.ranking.pareto:  # the file's layout has a place in a ranking, not on a front
        from hardware_catalog.errors import PlannerInputError

        raise PlannerInputError("--pareto shows a front, where the file's layout has no rank: give --from-launch "
                                "without --pareto (or search the front with --model)")
    checked = check_outputs(files.csv, files.export, outputs.plot, outputs.force)
    keep = parse_keep(keep)
    problem_given = {k: v for k, v in launch.given.items() if OPTIONS_BY_NAME[k].search != SEARCHED}
    r = resolve_request(launch, Pricing(calibration), replace(outputs, plot=None), given=problem_given,
                        gpus=_single_count(launch.gpus))
    ref = r.record
    add_interval_and_envelope(r.setup, ref)
    top = request.ranking.top
    request = search_request(r, request, launch.given, keep, progress)
    result = search(request)
    from planner.cli.search import stamp_calibration
    from planner.calibration_use import as_applied

    stamp_calibration(result, as_applied(calibration))
    limit = memory_limit_gib(r.setup.gpu.memory_gib, request.options.memory_headroom)
    ref["memory_limit_gib"], ref["headroom_gib"] = limit, limit - ref["memory_gib"]["peak"]  # as search rows
    # Cost and run figures as the ranked rows carry them (price, token budget, objective).
    ref.update(result.objectives.extras(ref["step_time_s"], ref["tokens_per_s"], ref["gpus"], ref.get("gpu")))
    rank = rank_of(ref, result.results, request.ranking.top, result.stats.get("fits", len(result.results)))
    fits_ref = ref["memory_gib"]["peak"] <= limit
    if not fits_ref:
        rank["rank"] = None
    written = _write_files(top, checked, result, ref, request, outputs)  # before printing, as plain search does
    _outputs(top, outputs.as_json, result, ref, rank, fits_ref, limit, r, keep)
    for line in written:
        typer.echo(line, err=outputs.as_json)
    if not result.results:
        raise typer.Exit(EXIT_NOTHING_FITS)


def _write_files(top: int, checked: dict, result, ref: dict, request, outputs) -> list[str]:
    """--csv (the file's row first, as 'ref'), --export (the best layout) and --plot."""
    from planner.cli.errors import say
    from planner.reports.search import write_csv

    lines = []
    if checked["csv"] is not None:
        write_csv(checked["csv"], [dict(ref, rank="ref")] + result.results[:top])
        lines.append(f"wrote {checked['csv']}")
    if checked["export"] is not None and result.results:
        from planner.export import export_layout

        m, c, _ = result.specs[0]
        report = export_layout(result.results[0], m, c, "all", Path(checked["export"]), force=outputs.force,
                               command=outputs.command)
        lines += [f"wrote {p}" for p in report.written]
        lines += [f"skipped {n}: {why}" for n, why in report.skipped.items()]
    if checked["plot"] is not None:
        from planner.reports.plots import plot_search
        from planner.reports.search import more_points

        say(f"wrote {plot_search(result, checked['plot'], more_points(request, result))}")
    return lines


def _outputs(top: int, as_json: bool, result, ref, rank, fits_ref, limit, r, keep) -> None:
    """The table (the file's row as 'ref' among the best) and what it would gain, or JSON."""
    from planner.cli.from_launch.resolve import describe
    from planner.reports.search import format_summary, sampled_note

    if as_json:
        out = result.to_dict()
        out["results"] = out["results"][:top]
        out["reference"] = {"record": ref, **rank, "fits_limit": fits_ref, "keep": list(keep)}
        from planner.reports.search import json_default

        typer.echo(json.dumps(out, indent=2, default=json_default))
        return
    typer.echo(describe(r))
    typer.echo("")
    stats = result.stats
    kept = f"; kept from the file: {', '.join(keep)}" if keep else ""
    typer.echo(f"{stats['model']}, gbs {stats['gbs']} x seq {stats['seq_len']} on {r.gpus} x {r.setup.gpu.name} -- "
               f"top {min(top, len(result.results))} layouts by step time, and the file's (ref){kept}"
               f"{sampled_note(stats)}")
    splits = bool(stats.get("stage_splits") or r.layout.pp > 1)
    typer.echo(_table(result.results, ref, rank, top, splits, stats))
    if not result.results:
        from planner.reports.search import format_nothing_fits

        typer.echo("")
        typer.echo(format_nothing_fits(result))
    typer.echo("")
    for line in summary_lines(ref, rank, fits_ref, limit):
        typer.echo(line)
    typer.echo(format_summary(stats))
