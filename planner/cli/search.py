"""``planner search``: the fastest layouts that fit, as an aligned table (or JSON / CSV).

Registered on the main app by ``planner.cli.main`` through ``register(app)``. Imports stay lazy:
the search package (and through it ortools / optuna) loads only when the command runs.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import typer

from planner.cli.errors import EXIT_NOTHING_FITS
from planner.cli.options import calibration_flag, layout_options, run_options, tokens_per_batch_flag
from planner.cli.from_launch.options import FromLaunchOpt, KeepOpt, LaunchFormatOpt
from planner.reports import counted
from planner.reports.search_notes import ranked_by, table_rows
from planner.reports.search import (check_outputs, format_nothing_fits, format_summary, format_table, json_default,
                                   sampled_note, write_csv)


def register(app: typer.Typer) -> None:
    """Add the ``search`` command to ``app``."""

    @app.command("search")
    @layout_options("search")
    @run_options("search")
    def search_cmd(
        ctx: typer.Context,
        model: Optional[str] = typer.Option(None, "--model", help="Model preset (e.g. 405b) or a model / HF config.json file. Required unless --from-launch names one."),
        gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU count; or a list 4096,8192; or A..B (doubling from A to B); or A..B:S (steps of S). Required unless --from-launch states it."),
        gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU type (h100, b200, ...) or a comma list h100,b200, each on its default cluster."),
        cluster: Optional[str] = typer.Option(None, "--cluster", help="Cluster preset name or TOML/YAML/JSON file (fixes the GPU type)."),
        tokens_per_batch: Optional[str] = tokens_per_batch_flag(),
        stage_splits: bool = typer.Option(False, "--stage-splits", help="Also search uneven first/last stage layer counts."),
        top: int = typer.Option(10, "--top", help="How many layouts to show."),
        method: str = typer.Option("auto", "--method", help="auto | exhaustive | optuna (auto: exhaustive when enumerating the valid layouts takes at most 15 s, else optuna; the table's header says when a result is sampled)."),
        trials: int = typer.Option(300, "--trials", help="Optuna trials."),
        seed: int = typer.Option(0, "--seed", help="Optuna seed."),
        sampler: Optional[str] = typer.Option(None, "--sampler", help="Optuna sampler: tpe | random | nsga2 (default tpe; nsga2 with --pareto)."),
        pareto: bool = typer.Option(False, "--pareto", help="Show the Pareto front: time vs memory (vs cost with --price-per-gpu-hour)."),
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
        calibration: Optional[Path] = calibration_flag(),
        rank_by: str = typer.Option("median", "--rank-by", help="median (the point prediction) | p10: re-rank the best by the point prediction (256, or 4 x --top if more) by the pessimistic end of their 80% interval, for a safe pick."),
        objective: str = typer.Option("step-time", "--objective", help="What the top list ranks by: step-time | tokens-per-gpu | cost | time-to-train | energy (they differ over a GPU-count range; the last three in wall time with failures, checkpoints and restarts)."),
        within_envelope: bool = typer.Option(False, "--within-envelope", help="Only layouts whose every mechanism lies where the reference runs measured it (the validated envelope)."),
        framework: Optional[str] = typer.Option(None, "--framework", help="Framework release whose profile sets how every candidate runs (attention kernel, loss, gradient dtype, ZeRO-3 gathers, ...), as validate prices its runs; flags you type win. 'planner catalog frameworks' lists them."),
        layout: dict = None,
        run: dict = None,
    ):
        """Find the fastest parallel layouts that fit in memory (exit 3 if none fits)."""
        from costmodel.goodput import refuse_unused_run_settings
        from hardware_catalog.errors import PlannerInputError
        from planner.cli.common import check_fp8_recipe_use, check_framework_use
        from planner.cli.errors import command_line
        from planner.cli.options import run_inputs, run_settings_given
        from planner.job import Outputs

        run_in = run_inputs(run)  # bad values fail before any work
        train_tokens = run_in.train_tokens if run_in else None
        # as typed (run_inputs read its form): search.api reads it with the search's GPU types, each
        # needing a price and no other type named (costmodel.goodput.parse_prices)
        prices = run["price_per_gpu_hour"]
        if not train_tokens and objective not in ("time-to-train", "cost", "energy"):  # no goodput computed
            refuse_unused_run_settings(run_settings_given(run), "search",
                                       "--train-tokens, or --objective time-to-train, cost or energy")

        check_framework_use(framework, None, from_launch)
        if method == "exhaustive":  # as --storage: the sampler's settings mean nothing there
            from planner.cli.common import typed_flags

            typed = typed_flags(ctx, ("trials", "sampler", "seed"))
            if typed:
                raise PlannerInputError(f"--{next(iter(typed))} sets the optuna sampler: use it with --method optuna "
                                        "(or auto), not exhaustive")
        # The command line is stamped on the launch file's priced row only (a plain search's
        # --export asks for it itself): shell-quoting it loads the exporters.
        outputs = Outputs(command_line() if from_launch is not None else None, as_json, plot, force)
        files = SearchFiles(csv_file, export_dir)
        if from_launch is None and (keep is not None or model is None or gpus is None):
            raise PlannerInputError("--keep goes with --from-launch" if keep is not None
                                    else "give --model and --gpus, or --from-launch FILE")
        if from_launch is None:
            check_fp8_recipe_use(ctx, layout)
            _check_window_cp_comm_type(ctx, model, layout)
        checked = check_outputs(files.csv, files.export, plot, force) if from_launch is None else None
        from planner.calibration_use import as_applied

        calibration = as_applied(calibration)  # the profile read once: its constants price and stamp every row
        framework_info, request = _request(ctx, framework, layout, model, gpus, gpu, cluster, tokens_per_batch, allow_cross_node_tp,
                           options=dict(stage_splits=stage_splits, method=method, trials=trials, seed=seed,
                                        sampler=sampler, memory_headroom=memory_headroom,
                                        progress=_progress_mode(progress), storage=storage, study_name=study_name),
                           ranking=dict(top=top, pareto=pareto, price_per_gpu_hour=prices,
                                        train_tokens=train_tokens, objective=objective, rank_by=rank_by,
                                        within_envelope=within_envelope, run=run_in),
                           calibration=calibration, from_launch=from_launch is not None)
        if from_launch is not None:
            from planner.cli.from_launch.commands import LaunchRequest
            from planner.cli.from_launch.reference import run_reference_search

            launch = LaunchRequest.of(from_launch, launch_format, model, gpus, gpu, cluster, tokens_per_batch,
                                      allow_cross_node_tp, layout)
            # the file's problem, its layout as the reference row
            return run_reference_search(launch, request, keep, calibration, outputs, files, bool(progress))
        _run_search(request, framework_info, calibration, outputs, checked, force,
                    bool(layout["pp_first_layers"] or layout["pp_last_layers"]), run_in)


def _check_window_cp_comm_type(ctx, model, layout: dict) -> None:
    """--cp-comm-type p2p typed for a sliding-window model: TransformerEngine refuses it under CP,
    and the search would price the CP rows as a2a / allgather (search.rules.windowed_cp_comm_type)
    against the flag, so it is refused, as evaluate refuses it, unless --cp 1 keeps CP off."""
    from planner.cli.common import typed_flags

    if typed_flags(ctx, ("cp_comm_type",)).get("cp_comm_type") != "p2p" or layout.get("cp") == 1:
        return
    from hardware_catalog import get_model
    from hardware_catalog.errors import PlannerInputError
    from planner.frameworks import window_text

    spec = get_model(model)
    if spec.sliding_window is not None:
        raise PlannerInputError(
            f"--cp-comm-type p2p: {spec.name} has {window_text(spec)}, which "
            "TransformerEngine runs under context parallelism only as a2a or allgather: leave the flag out "
            "(the search takes a2a where the heads split, else allgather), type one of those, or pin --cp 1")


@dataclass(frozen=True)
class SearchFiles:
    """What ``planner search`` writes besides what it prints (``--plot``: ``planner.job.Outputs``)."""

    csv: Optional[Path] = None
    """--csv: the results as CSV."""
    export: Optional[Path] = None
    """--export: a directory for the best layout's launch files."""


def _request(ctx, framework, layout: dict, model, gpus, gpu, cluster, tokens_per_batch, allow_cross_node_tp, *,
             options: dict, ranking: dict, calibration, from_launch: bool):
    """(the stats' ``framework`` entry or None, the search request of the flags): the problem, the
    search's options (the profile of --framework applied to the layout flags first), the ranking
    and the constants (``calibration``: an ``AppliedCalibration`` or None, read by the caller;
    ``search.request``). With --from-launch the file's problem replaces the
    request's (``planner.cli.from_launch.reference``)."""
    from costmodel.options import IMPLEMENTATION_OPTIONS, OPTIONS_BY_NAME, SEARCHED
    from search.request import ProblemRequest, Ranking, SearchOptions, SearchRequest

    framework_info = None if from_launch else _apply_framework(ctx, framework, model, gpu, cluster, layout)
    if framework_info is not None:  # the layouts the release's launch formats can write (planner.export.domain)
        from planner.cli.common import typed_flags
        from planner.export.domain import launch_domain
        from planner.frameworks.releases import get_release

        # None for a release planner writes no files for (llm-foundry): its search ranks as before.
        typed = typed_flags(ctx, tuple(layout))
        options = {**options, "domain": launch_domain(get_release(framework), typed)}
    problem = ProblemRequest(model, gpus, gpu, cluster, gbs=layout["gbs"], seq_len=layout["seq_len"],
                             tokens_per_batch=tokens_per_batch, allow_cross_node_tp=allow_cross_node_tp)
    choices = SearchOptions(pins={k: v for k, v in layout.items() if OPTIONS_BY_NAME[k].search == SEARCHED},
                            implementation={k: layout[k] for k in IMPLEMENTATION_OPTIONS},
                            recompute_modules=layout["recompute_modules"], **options)
    request = SearchRequest(problem, choices, Ranking(**ranking), calibration.calib() if calibration is not None else None)
    return framework_info, request


def stamp_calibration(result, calibration) -> None:
    """Each result record (and the stats) states the calibration profile and its constants, so
    ``--from`` a search result (JSON or CSV) prices with them, wherever the profile file went."""
    if calibration is None:
        return
    calibration.stamp(result.stats)
    for rec in [*result.results, *result.closest]:
        calibration.stamp(rec)
    if result.best is not None:
        calibration.stamp(result.best)
    gpus = {r.get("gpu") for r in [*result.results, *result.closest]}
    warnings = [w for w in map(calibration.gpu_warning, sorted(g for g in gpus if g)) if w]
    if warnings:  # the profile's runs used other GPU types: its constants were fitted to theirs
        result.stats["calibration_warning"] = warnings[0]


def stamp_framework(result, framework_info: dict) -> None:
    """Each result record names the ``--framework`` release that priced it (as an evaluate record
    does), so its launch files target that release (torchtitan-0.2: the 0.2 files) and
    ``export --from`` / ``evaluate --from`` one row of the JSON or CSV keep to its formats."""
    stamp = {"name": framework_info["name"], "profile": framework_info.get("profile")}
    for rec in [*result.results, *result.closest, *([result.best] if result.best is not None else [])]:
        rec.setdefault("framework", dict(stamp))


def _run_search(request, framework_info, calibration, outputs, checked: dict, force: bool, pinned_splits: bool,
                run_in=None) -> None:
    """Search, write the files, print; exit 3 when nothing fits."""
    from search.api import search

    result = search(request)
    if run_in is not None:
        _add_run_blocks(result, run_in)
    stamp_calibration(result, calibration)
    if framework_info is not None:
        result.stats["framework"] = framework_info
        stamp_framework(result, framework_info)
    from planner.recipes import reference_recipes

    recipes = reference_recipes(result)
    if run_in is not None:  # a recipe's row beside the table's: its run fields from the same block
        specs = {(g.name, c.name): (m, c, g) for m, c, g in result.specs}
        for recipe in recipes:
            rec = recipe.get("record")
            spec = specs.get(((rec or {}).get("gpu"), (rec or {}).get("cluster")))
            if rec is not None and spec is not None:
                _with_run_block(rec, *spec, run_in, result)
    again = None
    if checked["plot"] is not None:
        from planner.reports.search import more_points

        again = more_points(request, result)  # the plot's extra points, asked here: the plot runs no search
    written = _write_outputs(result, again, checked, force, recipes)  # before printing: `| head` still gets them
    _print_result(result, outputs.as_json, request.ranking.pareto, pinned_splits, recipes)
    if outputs.as_json and result.stats.get("calibration_warning"):  # the text summary says it itself
        typer.echo(result.stats["calibration_warning"], err=True)
    for line in written:
        typer.echo(line, err=outputs.as_json)
    if not result.results:
        raise typer.Exit(EXIT_NOTHING_FITS)
    if checked.get("export_failed"):  # asked for launch files and got none: as planner export, exit 2
        from planner.cli.errors import EXIT_BAD_INPUT, say

        say(f"error: {checked['export_failed']}")
        raise typer.Exit(EXIT_BAD_INPUT)


def _add_run_blocks(result, run_in) -> None:
    """Each result's "run" block (``costmodel.goodput.run_block``: failures, checkpoint, goodput,
    days, MWh, $) and the inputs in the stats."""
    from costmodel.goodput import prices_as_stored

    for rec, (m, c, g) in zip(result.results, result.specs):
        _with_run_block(rec, m, c, g, run_in, result)
    prices = result.objectives.prices  # one price as a number (as before per-type prices), else by type
    result.stats["run_inputs"] = {**run_in.to_dict(), "price_per_gpu_hour": prices_as_stored(prices) if prices else None}


def _with_run_block(rec: dict, m, c, g, run_in, result) -> None:
    """``rec``'s "run" block (``costmodel.goodput.run_block``), at its GPU type's price
    (--price-per-gpu-hour h100=2.5,b200=4), and the table's run columns from it."""
    from costmodel.goodput import run_block

    priced = run_in.with_(price_per_gpu_hour=result.objectives.price(g.name))
    run = rec["run"] = run_block(rec, m, c, g, priced)
    # The search ranked with a vectorized goodput (no rounding of the checkpoint interval to
    # whole steps), which can differ from the block by a tenth of a point.
    if "goodput" in rec:
        rec["goodput"] = run["goodput"]
    if "days" in run and "run_time_s" in rec:
        rec["run_time_s"], rec["run_time_days"] = run["days"] * 86400.0, run["days"]
    if "energy_mwh" in run and "run_energy_mwh" in rec:
        rec["run_energy_mwh"] = run["energy_mwh"]
    if "cost_usd" in run and "run_cost_usd" in rec:
        rec["run_cost_usd"] = run["cost_usd"]


def _apply_framework(ctx, framework, model, gpu, cluster, layout: dict):
    """--framework: the release's profile into ``layout`` (in place) where no flag was typed;
    the stats' ``framework`` entry, or None."""
    if framework is None:
        return None
    from hardware_catalog import get_gpu, get_model
    from planner.cli.common import typed_flags
    from planner.common import resolve_hardware
    from planner.frameworks import apply_framework, framework_settings

    model_spec = get_model(model)
    if cluster is not None:
        gpu_name = resolve_hardware(None, cluster)[0].name
    else:
        gpu_name = get_gpu(gpu).name if gpu and "," not in gpu else ""
    fw = framework_settings(framework, model_spec, gpu_name, layout.get("precision") or "bf16", layout.get("recompute"),
                            takes=set(layout))
    if "recompute" in fw.not_applied:  # the release's word for the typed mode needs knobs search does not take
        from hardware_catalog.errors import PlannerInputError

        whole = framework_settings(framework, model_spec, gpu_name, layout.get("precision") or "bf16",
                                   layout.get("recompute"))
        said = [a for a in whole.assumptions if "recompute" in a]
        raise PlannerInputError(
            f"--framework {framework} --recompute {layout.get('recompute')}: {said[0] if said else 'priced with a recompute share'}"
            f", which search does not try (it takes no share of layers); price it with planner evaluate, or search "
            f"--recompute full or none")
    given = set(typed_flags(ctx, tuple(layout)))
    info = apply_framework(fw, layout, given)
    from planner.frameworks.profiles import benchmark_only_lines

    left_out = benchmark_only_lines(fw.release, model_spec, gpu_name, layout.get("precision") or "bf16", given)
    if left_out:
        info["benchmark_only"] = left_out
    return info


def _progress_mode(progress: Optional[bool]):
    """--progress: a bar; --no-progress: nothing; default: a bar on a terminal, else a plain line
    every few seconds for a long search (``search.exhaustive.Progress``)."""
    if progress is None:
        return True if sys.stderr is not None and sys.stderr.isatty() else "lines"
    return progress


def search_release(stats: dict):
    """The ``--framework`` release a search was priced with (None: none)."""
    name = (stats.get("framework") or {}).get("name")
    if not name:
        return None
    from planner.frameworks.releases import get_release

    return get_release(name)


def _write_outputs(result, again, outputs: dict, force: bool, recipes: Optional[list] = None) -> list[str]:
    """Write the CSV, the best layout's launch files and the plot; the lines that say so."""
    lines = []
    listed = result.results or result.closest
    if not listed:  # no layout obeys the rules: no row to list or draw, and an empty file is no answer
        return [f"{flag} {outputs[key]}: not written, no layout obeys the rules"
                for flag, key in (("--csv", "csv"), ("--plot", "plot")) if outputs[key] is not None]
    if outputs["csv"] is not None:
        write_csv(outputs["csv"], listed)
    if outputs["export"] is not None and result.results:
        from planner.cli.errors import command_line
        from planner.export import export_layout

        m, c, _ = result.specs[0]
        release = search_release(result.stats)
        if release is None:
            report = export_layout(result.results[0], m, c, "all", Path(outputs["export"]), force=force,
                                   command=command_line())
            skipped = report.skipped
        else:  # --framework: only the formats that launch that release, the others not tried
            from planner.export.expressible import refusals

            refused = refusals(result.results[0], m, c)
            skipped = {f: refused[f] for f in release.formats if f in refused}
            writable = [f for f in release.formats if f not in refused]
            report = None
            if writable:
                report = export_layout(result.results[0], m, c, writable, Path(outputs["export"]), force=force,
                                       command=command_line())
                skipped = {**skipped, **report.skipped}
        written = report.written if report is not None else []
        lines += [f"wrote {p}" for p in written]
        lines += [f"skipped {n}: {why}" for n, why in skipped.items()]
        if not written:
            from planner.cli.common import nothing_exported

            why = nothing_exported(outputs["export"])
            if release is not None:
                why = (f"no launch file written to {outputs['export']}: planner has no exporter for {release.name}"
                       if not release.formats else why.replace("every format", f"{release.name}'s "
                                                               f"format{'s' if len(release.formats) > 1 else ''} "
                                                               f"({', '.join(release.formats)})"))
            outputs["export_failed"] = f"--export: {why}"
    if outputs["csv"] is not None:
        lines.append(f"wrote {outputs['csv']}")
    if outputs["plot"] is not None:
        from planner.cli.errors import say
        from planner.reports.plots import plot_search

        say(f"wrote {plot_search(result, outputs['plot'], again, recipes)}")
    return lines


def _print_result(result, as_json: bool, pareto: bool, pinned_splits: bool, recipes: list) -> None:
    if as_json:
        typer.echo(json.dumps({**result.to_dict(), "reference_recipes": recipes}, indent=2, default=json_default))
        return
    stats = result.stats
    if result.results:
        multi = len(stats.get("gpu_types", [])) > 1 or len(stats.get("gpu_counts", [])) > 1
        title = f"{stats['model']}, gbs {stats['gbs']} x seq {stats['seq_len']}"
        if pareto:
            a, b = stats["objectives"]
            size, shown = stats["pareto_front_size"], len(result.results)
            title += (f" -- Pareto front, {a} vs {b} ({counted(size, 'point')}"
                      + (f"; {shown} shown, spread along it: --top sets how many" if shown < size else "") + ")")
            if b.endswith("_usd") and not multi:  # one price, one GPU count: cost = GPUs x time x price
                title += ("\n(one GPU type and count: cost is proportional to time, so the front is the fastest layout; "
                          "give several --gpus for a time/cost front, or leave out the price for time vs memory)")
            # A front is not a ranking: no row ties #1 (the JSON keeps the intervals).
            result = replace(result, results=[{**r, "ties_best": False} for r in result.results])
        else:
            title += f" -- top {counted(len(result.results), 'layout')} {ranked_by(stats)}"
        title += sampled_note(stats)
        typer.echo(title)
        rows, marks, notes = table_rows(result.results, recipes, stats)
        typer.echo(format_table(rows, multi, bool(stats.get("stage_splits") or pinned_splits), marks))
        typer.echo("\n".join(notes))
        from planner.export.expressible import launch_notes

        from planner.reports.search_notes import window_cp_lines

        window = window_cp_lines(result.results, result.specs)
        if window:
            typer.echo("\n".join(window))
        launch = launch_notes(result.results, result.specs, search_release(stats))
        if launch:
            typer.echo("\n".join(launch))
    else:
        typer.echo(format_nothing_fits(result))
    typer.echo("")
    typer.echo(format_summary(stats))
