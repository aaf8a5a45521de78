"""``planner search``: the fastest layouts that fit, as an aligned table (or JSON / CSV).

Registered on the main app by ``planner.cli`` through ``register(app)``. Imports stay lazy:
the search package (and through it ortools / optuna) loads only when the command runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from planner.cli_errors import EXIT_NOTHING_FITS
from planner.cli_options import layout_options
from planner.launch.options import FromLaunchOpt, KeepOpt, LaunchFormatOpt
from planner.search_notes import ranked_by, table_rows

COLUMNS = ("rank", "DP", "TP", "PP", "VPP", "CP", "EP", "ZeRO", "mbs", "GA", "recompute",
           "step time", "tok/s/GPU", "80% range", "env", "MFU", "mem/GPU", "headroom", "largest term")


def _fmt_seconds(s: float) -> str:
    if s >= 100:
        return f"{s:.0f} s"
    if s >= 1:
        return f"{s:.2f} s"
    return f"{s * 1e3:.0f} ms"


def _fmt_duration(s: float) -> str:
    if s >= 86400:
        return f"{s / 86400:.1f} d"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    return _fmt_seconds(s)


def _row(rec: dict, multi_hw: bool, extra_cols: list[str], splits: bool = False, env: str = "") -> list[str]:
    lay = rec["layout"]
    mem = rec["memory_gib"]
    row = [str(rec.get("rank", "")) + ("≈" if rec.get("ties_best") else "")]
    if multi_hw:
        row += [rec["gpu"], str(rec["gpus"])]
    row += [str(lay[k]) for k in ("dp", "tp", "pp", "vpp", "cp", "ep", "zero", "mbs", "grad_accum")]
    if splits:
        st = lay.get("stage_layers")
        row.append(f"{st[0]}/{st[1] if len(st) > 2 else '-'}/{st[-1]}" if st else "-")
    from planner.report import recompute_label

    row.append(recompute_label(lay) + (" fp8" if lay.get("precision") == "fp8" else ""))
    row += [
        _fmt_seconds(rec["step_time_s"]),
        f"{rec['tokens_per_s_per_gpu']:,.0f}",
        _fmt_interval(rec.get("tokens_per_s_per_gpu_interval")),
        env,
        f"{rec['mfu'] * 100:.1f}%",
        f"{mem['peak']:.1f}/{mem['capacity']:.0f} GiB",
        f"{rec.get('headroom_gib', mem['capacity'] - mem['peak']):.1f} GiB",  # the JSON's headroom_gib
        rec.get("largest_term", ""),
    ]
    for c in extra_cols:
        v = rec.get(c)
        if v is None:
            row.append("-")
        elif c.endswith("_usd"):
            row.append(f"${v:,.2f}" if v < 1000 else f"${v:,.0f}")
        elif c == "run_time_s":
            row.append(_fmt_duration(v))
        else:
            row.append(f"{v:g}")
    return row


EXTRA_LABELS = {"cost_per_step_usd": "$/step", "run_time_s": "run time", "run_cost_usd": "run cost"}


def _fmt_interval(q: Optional[dict]) -> str:
    return f"{q['p10']:,.0f}-{q['p90']:,.0f}" if q else "-"


def format_table(records: list[dict], multi_hw: bool = False, splits: bool = False,
                 env: Optional[list[str]] = None) -> str:
    """The results as a plain aligned table (``splits``: add the first/middle/last stage layers;
    ``env``: each record's envelope footnote marks)."""
    extra = [c for c in ("cost_per_step_usd", "run_time_s", "run_cost_usd") if any(c in r for r in records)]
    head = list(COLUMNS)
    if splits:
        i = head.index("GA") + 1
        head = head[:i] + ["layers f/m/l"] + head[i:]
    if multi_hw:
        head = head[:1] + ["GPU", "GPUs"] + head[1:]
    head += [EXTRA_LABELS[c] for c in extra]
    env = env or [""] * len(records)
    rows = [head] + [_row(r, multi_hw, extra, splits, e) for r, e in zip(records, env)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    left = {"recompute", "largest term", "GPU", "env"}
    lines = []
    for r in rows:
        cells = [c.ljust(w) if h in left else c.rjust(w) for c, w, h in zip(r, widths, head)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def format_summary(stats: dict) -> str:
    method = stats["method"]
    how = stats.get("engine", "")
    if method == "optuna":
        how = f"{stats.get('sampler')}, {stats.get('trials')} trials, seed {stats.get('seed')}"
        if stats.get("trials_requested"):
            how = (f"{stats.get('sampler')}, {stats['trials_requested']:,} trials asked for: capped at the "
                   f"{stats['space_cores']:,} degree cores of the space, each priced once")
        if stats.get("storage"):
            how += f"; study {stats['study_name']!r} in {stats['storage']}: {stats['study_trials']} trials in all"
    auto = " (auto)" if stats.get("method_requested") == "auto" else ""
    outside = f" ({stats['outside_envelope']:,} outside the envelope)" if stats.get("within_envelope") else ""
    line = (f"enumerated {stats['enumerated']:,}, feasible {stats['feasible']:,}, fitting memory "
            f"{stats['fits']:,}{outside}, {stats['seconds']:.2f} s, method {method}{auto} ({how}), "
            f"memory headroom {stats['memory_headroom'] * 100:g}%")
    from costmodel.layout import IMPLEMENTATION_DEFAULTS

    impl = {k: v for k, v in (stats.get("implementation") or {}).items() if v != IMPLEMENTATION_DEFAULTS.get(k)}
    if stats.get("recompute_modules"):
        impl["recompute_modules"] = "+".join(stats["recompute_modules"])
    if impl:
        line += "\npriced with " + ", ".join(f"{k}={v}" for k, v in impl.items())
    if stats.get("calibration"):
        line += f"\nconstants from calibration profile {stats['calibration']}"
    return line


def format_nothing_fits(result) -> str:
    lines = [f"nothing fits: {result.message}"]
    if result.closest:
        lines.append("")
        lines.append("closest layouts (least memory per GPU):")
        multi = len(result.stats.get("gpu_types", [])) > 1 or len(result.stats.get("gpu_counts", [])) > 1
        lines.append(format_table(result.closest, multi))
        lines.append("")
        for rec in result.closest:
            lines.append(f"  #{rec['rank']}: {rec['exceeds_gib']:+.1f} GiB over the limit; stopped by {rec['stopped_by']}")
    removed = result.stats.get("removed_by_rule") or {}
    if removed:
        lines.append("")
        lines.append("candidates removed by rule:")
        for name, n in sorted(removed.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {name:<42}{n:>12,}")
    return "\n".join(lines)


def _csv_rows(records: list[dict]) -> tuple[list[str], list[list]]:
    from costmodel.result import MEMORY_TERMS, TIME_TERMS

    from costmodel.options import OPTIONS

    lay_keys = ["gpus", "grad_accum"] + [o.name for o in OPTIONS]
    head = (["rank", "model", "gpu", "cluster"] + lay_keys
            + ["step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "fits", "largest_term"]
            + [f"mem_{k}_gib" for k in list(MEMORY_TERMS) + ["peak", "capacity"]]
            + [f"time_{k}_s" for k in TIME_TERMS]
            + ["cost_per_step_usd", "run_time_s", "run_cost_usd", "memory_limit_gib", "headroom_gib"])
    rows = []
    for r in records:
        lay = r["layout"]
        row = [r.get("rank"), r["model"], r["gpu"], r["cluster"]]
        row += [_csv_value(lay.get(k, r.get(k))) if k != "gpus" else r["gpus"] for k in lay_keys]
        row += [r["step_time_s"], r["tokens_per_s"], r["tokens_per_s_per_gpu"], r["mfu"], r["hfu"], r["fits"], r["largest_term"]]
        row += [r["memory_gib"].get(k) for k in list(MEMORY_TERMS) + ["peak", "capacity"]]
        row += [r["breakdown"].get(k) for k in TIME_TERMS]
        row += [r.get("cost_per_step_usd"), r.get("run_time_s"), r.get("run_cost_usd"), r.get("memory_limit_gib"),
                r.get("headroom_gib")]
        rows.append(row)
    return head, rows


def _csv_value(value):
    """A layout value as one CSV cell (a module list as core_attn+mlp)."""
    return "+".join(value) if isinstance(value, (list, tuple)) else value


def write_csv(path: Path, records: list[dict], flag: str = "--csv") -> None:
    """The records as CSV (one row each, every layout option in its ``Layout`` unit), written
    atomically."""
    import csv
    import io

    from planner.outputs import write_text_atomically

    head, rows = _csv_rows(records)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(head)
    w.writerows(rows)
    write_text_atomically(path, buf.getvalue(), flag)


def register(app: typer.Typer) -> None:
    """Add the ``search`` command to ``app``."""

    @app.command("search")
    @layout_options("search")
    def search_cmd(
        model: Optional[str] = typer.Option(None, "--model", help="Model preset (e.g. 405b) or a model / HF config.json file. Required unless --from-launch names one."),
        gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU count; or a list 4096,8192; or A..B (doubling from A to B); or A..B:S (steps of S). Required unless --from-launch states it."),
        gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU type (h100, b200, ...) or a comma list h100,b200, each on its default cluster."),
        cluster: Optional[str] = typer.Option(None, "--cluster", help="Cluster preset name or TOML/YAML/JSON file (fixes the GPU type)."),
        tokens_per_batch: Optional[int] = typer.Option(None, "--tokens-per-batch", help="Global batch in tokens (instead of --gbs)."),
        stage_splits: bool = typer.Option(False, "--stage-splits", help="Also search uneven first/last stage layer counts."),
        top: int = typer.Option(10, "--top", help="How many layouts to show."),
        method: str = typer.Option("auto", "--method", help="auto | exhaustive | optuna (auto: exhaustive up to 5M candidates)."),
        trials: int = typer.Option(300, "--trials", help="Optuna trials."),
        seed: int = typer.Option(0, "--seed", help="Optuna seed."),
        sampler: Optional[str] = typer.Option(None, "--sampler", help="Optuna sampler: tpe | random | nsga2 (default tpe; nsga2 with --pareto)."),
        pareto: bool = typer.Option(False, "--pareto", help="Show the Pareto front: time vs memory (vs cost with --price-per-gpu-hour)."),
        price_per_gpu_hour: Optional[float] = typer.Option(None, "--price-per-gpu-hour", help="USD per GPU-hour: adds cost per step (and per run)."),
        train_tokens: Optional[float] = typer.Option(None, "--train-tokens", help="Tokens of the whole run (e.g. 15e12): adds run time (and cost)."),
        memory_headroom: float = typer.Option(0.05, "--memory-headroom", help="Fraction of HBM kept free (0.05 = a layout must fit in 95%)."),
        allow_cross_node_tp: bool = typer.Option(False, "--allow-cross-node-tp", help="Allow TP larger than the scale-up domain."),
        as_json: bool = typer.Option(False, "--json", help="Print {\"results\": [...], \"stats\": {...}}."),
        csv_file: Optional[Path] = typer.Option(None, "--csv", help="Also write the results to this CSV file."),
        export_dir: Optional[Path] = typer.Option(None, "--export", help="Write launch files for the best layout into this directory."),
        progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="Progress on stderr for searches over 1 s. Default: a bar on a terminal, else a line every 10 s."),
        plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw step time vs memory (vs cost with --price-per-gpu-hour) of the layouts, the Pareto front, and for several GPU counts the scaling curves, to FILE (.png, .svg or .html). An exhaustive search is asked again for more points, for the plot only."),
        storage: Optional[str] = typer.Option(None, "--storage", help="Optuna: share the study with other processes/machines: journal:///PATH.log | PATH.log | sqlite:///PATH.db | PATH.db | postgresql://USER:PASS@HOST:PORT/DB (pip install psycopg2-binary). --trials is then the study's total."),
        study_name: Optional[str] = typer.Option(None, "--study-name", help="Study in --storage (default planner-search); every process of one search gives the same."),
        from_launch: Optional[Path] = FromLaunchOpt,
        launch_format: Optional[str] = LaunchFormatOpt,
        keep: Optional[str] = KeepOpt,
        force: bool = typer.Option(False, "--force", help="Overwrite existing files (--csv, --export, --plot)."),
        calibration: Optional[Path] = typer.Option(None, "--calibration", help="Calibration profile (TOML from 'planner calibrate'): its fitted constants replace the shipped ones."),
        rank_by: str = typer.Option("median", "--rank-by", help="median (the point prediction) | p10: re-rank the 256 best by the pessimistic end of their 80% interval, for a safe pick."),
        objective: str = typer.Option("step-time", "--objective", help="What the top list ranks by: step-time | tokens-per-gpu | cost | time-to-train (they differ over a GPU-count range)."),
        within_envelope: bool = typer.Option(False, "--within-envelope", help="Only layouts whose every mechanism lies where the reference runs measured it (the validated envelope)."),
        layout: dict = None,
    ):
        """Find the fastest parallel layouts that fit in memory (exit 3 if none fits)."""
        from hardware_catalog.errors import PlannerInputError

        if from_launch is not None:
            from planner.launch.cli import search_from_launch

            return search_from_launch(dict(locals()))
        if keep is not None or model is None or gpus is None:
            raise PlannerInputError("--keep goes with --from-launch" if keep is not None
                                    else "give --model and --gpus, or --from-launch FILE")

        from costmodel.options import IMPLEMENTATION_OPTIONS, OPTIONS_BY_NAME, SEARCHED
        from planner.plots import RecordedCall

        outputs = _check_outputs(csv_file, export_dir, plot, force)
        pins = {k: v for k, v in layout.items() if OPTIONS_BY_NAME[k].search == SEARCHED}
        implementation = {k: layout[k] for k in IMPLEMENTATION_OPTIONS}
        from planner.calibration_profile import calibration_option
        from search.api import search

        calib = calibration_option(calibration)
        search = RecordedCall(search) if plot is not None else search  # the plot asks it again
        result = search(
            model, gpus, gpu, cluster, gbs=layout["gbs"], tokens_per_batch=tokens_per_batch, seq_len=layout["seq_len"],
            pins=pins, top=top, method=method, trials=trials, seed=seed, sampler=sampler,
            memory_headroom=memory_headroom, allow_cross_node_tp=allow_cross_node_tp, pareto=pareto,
            price_per_gpu_hour=price_per_gpu_hour, train_tokens=train_tokens,
            stage_splits=stage_splits, progress=_progress_mode(progress),
            implementation=implementation, recompute_modules=layout["recompute_modules"],
            storage=storage, study_name=study_name, calib=calib, rank_by=rank_by, objective=objective,
            within_envelope=within_envelope,
        )
        if calibration is not None:
            result.stats["calibration"] = str(calibration)
        from planner.recipes import reference_recipes

        recipes = reference_recipes(result)
        written = _write_outputs(result, search, outputs, force, recipes)  # before printing: `| head` still gets them
        _print_result(result, as_json, pareto, bool(layout["pp_first_layers"] or layout["pp_last_layers"]), recipes)
        for line in written:
            typer.echo(line, err=as_json)
        if not result.results:
            raise typer.Exit(EXIT_NOTHING_FITS)


def _progress_mode(progress: Optional[bool]):
    """--progress: a bar; --no-progress: nothing; default: a bar on a terminal, else a plain line
    every few seconds for a long search (``search.exhaustive.Progress``)."""
    if progress is None:
        return True if sys.stderr is not None and sys.stderr.isatty() else "lines"
    return progress


def _check_outputs(csv_file, export_dir, plot, force: bool) -> dict:
    """Every file the search will write, checked before it runs (``planner.outputs``)."""
    from planner.outputs import check_output_dir, check_output_file
    from planner.plots import check_plot_path

    names = []
    if export_dir is not None:
        from planner.export import FILES

        names = [name for files in FILES.values() for name in files]
    return {"csv": check_output_file(csv_file, "--csv", force),
            "export": check_output_dir(export_dir, "--export", force, names),
            "plot": check_output_file(check_plot_path(plot), "--plot", force)}


def _write_outputs(result, search, outputs: dict, force: bool, recipes: Optional[list] = None) -> list[str]:
    """Write the CSV, the best layout's launch files and the plot; the lines that say so."""
    lines = []
    if outputs["csv"] is not None:
        write_csv(outputs["csv"], result.results or result.closest)
    if outputs["export"] is not None and result.results:
        from planner.cli_errors import command_line
        from planner.export import export_layout

        m, c, _ = result.specs[0]
        report = export_layout(result.results[0], m, c, "all", Path(outputs["export"]), force=force,
                               command=command_line())
        lines += [f"wrote {p}" for p in report.written]
        lines += [f"skipped {n}: {why}" for n, why in report.skipped.items()]
    if outputs["csv"] is not None:
        lines.append(f"wrote {outputs['csv']}")
    if outputs["plot"] is not None:
        from planner.cli_errors import say
        from planner.plots import plot_search

        say(f"wrote {plot_search(result, outputs['plot'], search, recipes)}")
    return lines


def _print_result(result, as_json: bool, pareto: bool, pinned_splits: bool, recipes: list) -> None:
    if as_json:
        typer.echo(json.dumps({**result.to_dict(), "reference_recipes": recipes}, indent=2, default=_json_default))
        return
    stats = result.stats
    if result.results:
        multi = len(stats.get("gpu_types", [])) > 1 or len(stats.get("gpu_counts", [])) > 1
        title = f"{stats['model']}, gbs {stats['gbs']} x seq {stats['seq_len']}"
        if pareto:
            a, b = stats["objectives"]
            title += f" -- Pareto front, {a} vs {b} ({stats['pareto_front_size']} points)"
        else:
            title += f" -- top {len(result.results)} layouts {ranked_by(stats)}"
        typer.echo(title)
        rows, marks, notes = table_rows(result.results, recipes, stats)
        typer.echo(format_table(rows, multi, bool(stats.get("stage_splits") or pinned_splits), marks))
        typer.echo("\n".join(notes))
    else:
        typer.echo(format_nothing_fits(result))
    typer.echo("")
    typer.echo(format_summary(stats))


def _json_default(o):
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
