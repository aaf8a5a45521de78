"""``planner sweep``: the best layout, time to train and cost of every scenario of a grid.

Registered on the main app by ``planner.cli.main`` through ``register(app)``; the work is in
``planner.sweep`` (study, workers, exactly-once claims) and ``planner.reports.sweep`` (output).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from planner.cli.options import calibration_flag, run_options

SWEEP_HELP = """Best layout, time to train and cost for every scenario of a grid: models x GPU types x
GPU counts x sequence lengths x batch sizes. Each scenario is one exhaustive search (a trial of an
Optuna study with a GridSampler); its result is stored in the study.

Example: planner sweep --model 8b,70b --gpus 1024..16384 --gpu h100,b200 --seq-len 4096,8192
--train-tokens 15e12 --price-per-gpu-hour h100=2.5,b200=4 --plot sweep.png

Many processes, many machines: give every worker the same --storage and --study-name (and the same
axes, or none to join the stored ones). Each scenario is searched exactly once; a re-run resumes
(scenarios done are not redone). --storage forms: journal:///PATH.log or PATH.log (journal file, one
machine); sqlite:///PATH.db or PATH.db (SQLite, one machine); postgresql://USER:PASS@HOST:PORT/DB or
mysql+pymysql://... (a server; every machine runs `pip install psycopg2-binary` or `pymysql`).
With SQLite/PostgreSQL/MySQL a scenario whose worker died (no heartbeat for 30 s) is redone by
another worker; a journal file has no heartbeat: stop all workers, then run once with
--reclaim-running."""


def register(app: typer.Typer) -> None:
    """Add the ``sweep`` command to ``app``."""

    @app.command("sweep", help=SWEEP_HELP)
    @run_options("sweep")
    def sweep_cmd(
        model: Optional[str] = typer.Option(None, "--model", help="Model presets or files, comma list: 8b,70b."),
        gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU counts: N, a list 1024,4096, A..B (doubling) or A..B:S (steps of S)."),
        gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU types, comma list: h100,b200 (each on its default cluster)."),
        seq_len: Optional[str] = typer.Option(None, "--seq-len", help="Sequence lengths, comma list (default: the model's)."),
        gbs: Optional[str] = typer.Option(None, "--gbs", help="Global batch sizes in sequences, comma list."),
        tokens_per_batch: Optional[str] = typer.Option(None, "--tokens-per-batch", help="Global batches in tokens, comma list (instead of --gbs; default: the model's)."),
        memory_headroom: float = typer.Option(0.05, "--memory-headroom", help="Fraction of HBM kept free."),
        allow_cross_node_tp: bool = typer.Option(False, "--allow-cross-node-tp", help="Allow TP larger than the scale-up domain."),
        storage: Optional[str] = typer.Option(None, "--storage", help="Shared study storage: journal:///PATH.log | PATH.log | sqlite:///PATH.db | PATH.db | postgresql://USER:PASS@HOST:PORT/DB (default: in memory, this process only)."),
        study_name: Optional[str] = typer.Option(None, "--study-name", help="Study in --storage (default planner-sweep)."),
        wait: float = typer.Option(60.0, "--wait", help="With nothing left to start, wait this many seconds (from the last scenario done anywhere) for scenarios running in other workers."),
        report_only: bool = typer.Option(False, "--report-only", help="Print the study's table; run nothing."),
        reclaim_running: bool = typer.Option(False, "--reclaim-running", help="Fail the study's RUNNING trials first, so they are redone (only when no worker is alive: journal files have no heartbeat)."),
        as_json: bool = typer.Option(False, "--json", help="Print {\"scenarios\": [...], \"stats\": {...}}."),
        csv_file: Optional[Path] = typer.Option(None, "--csv", help="Also write one row per scenario to this CSV file."),
        plot: Optional[Path] = typer.Option(None, "--plot", help="Write a picture (.png, .svg or .html): tokens/s/GPU and cost (or time to train) vs GPU count."),
        progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="Progress bar on stderr. Default: when stderr is a terminal."),
        force: bool = typer.Option(False, "--force", help="Overwrite existing files (--csv, --plot)."),
        objective: Optional[str] = typer.Option(None, "--objective", help="Mark each series' best GPU count by step-time | tokens-per-gpu | time-to-train | cost | energy (the last three need --train-tokens; wall time with failures, checkpoints and restarts), and where adding GPUs stops paying."),
        min_scaling_efficiency: Optional[float] = typer.Option(None, "--min-scaling-efficiency", help="With --objective: a step up in GPU count stops paying when less than this share of the GPUs added turns into speed (default 0.8)."),
        calibration: Optional[Path] = calibration_flag(),
        run: dict = None,
    ):
        from planner.cli.options import run_inputs, run_settings_given
        from planner.outputs import check_distinct, check_output_file

        check_distinct(("--csv", csv_file), ("--plot", plot))
        run_in = run_inputs(run)  # bad values fail before any work
        price = run["price_per_gpu_hour"]  # the flag every command declares (planner.cli.options.run_options)
        check_output_file(csv_file, "--csv", force)
        check_output_file(plot, "--plot", force)
        from planner.reports.plots import check_plot_path

        check_plot_path(plot)  # the picture's format too, before any work
        result = _run(model, gpus, gpu, seq_len, gbs, tokens_per_batch, run_in, price, memory_headroom,
                      allow_cross_node_tp, storage, study_name, wait, report_only, reclaim_running,
                      sys.stderr.isatty() if progress is None else progress, objective, min_scaling_efficiency,
                      run_settings_given(run), calibration)
        invalid = [r for r in result.rows if r.get("status") == "invalid"]
        if result.rows and len(invalid) == len(result.rows):  # bad input in every scenario: as search says it
            from hardware_catalog.errors import PlannerInputError

            raise PlannerInputError(f"every scenario is invalid: {invalid[0].get('reason')}")
        from planner.reports.sweep import not_plotted

        # A plot of no layout is not drawn, and says so; the CSV is still the answer (each
        # scenario with why nothing fits). Decided before any file is written.
        not_drawn = not_plotted(result.rows) if plot is not None else None
        _write_files(result, csv_file, None if not_drawn else plot)  # before printing: `| head` still gets them
        _print(result, as_json, csv_file, None if not_drawn else plot)
        if not_drawn:
            typer.echo(f"--plot: not drawn: {not_drawn}", err=True)
        if result.rows and not any(r.get("best") for r in result.rows):
            from planner.cli.errors import EXIT_NOTHING_FITS

            raise typer.Exit(EXIT_NOTHING_FITS)  # as search: no scenario found a layout


def _run(model, gpus, gpu, seq_len, gbs, tokens_per_batch, run_in, price, memory_headroom,
         allow_cross_node_tp, storage, study_name, wait, report_only, reclaim, progress, objective=None,
         min_scaling_efficiency=None, run_flags=(), calibration=None):
    from costmodel.goodput import parse_prices
    from hardware_catalog.errors import PlannerInputError
    from planner.sweep import build_spec, run_sweep

    axes = {"--model": model, "--gpus": gpus, "--gpu": gpu}
    given = [k for k, v in axes.items() if v is not None]
    others = [k for k, v in (("--seq-len", seq_len), ("--gbs", gbs), ("--tokens-per-batch", tokens_per_batch)) if v]
    if given and len(given) < 3:
        missing = [k for k in axes if k not in given]
        raise PlannerInputError(f"{', '.join(missing)} missing: give --model, --gpus and --gpu "
                                f"(or, with --storage, none of the axes to join the stored sweep)")
    if report_only and storage is None:  # an in-memory study starts empty: it would report "0 of N done"
        raise PlannerInputError("--report-only prints a stored sweep: give --storage (and --study-name) of one")
    if not given and (others or storage is None):
        raise PlannerInputError("give the scenario axes --model, --gpus and --gpu (e.g. --model 8b --gpus "
                                "8..64 --gpu h100), or --storage of an existing sweep")
    if calibration is not None and not given:  # a stored sweep keeps the constants it was started with
        raise PlannerInputError(f"--calibration {calibration} goes with the scenario axes (--model, --gpus, --gpu): "
                                f"a stored sweep prices with the constants it was started with (its output names them)")
    spec = build_spec(model, gpus, gpu, seq_len, gbs, tokens_per_batch, memory_headroom,
                      allow_cross_node_tp, calibration) if given else None
    prices = parse_prices(price, spec.gpu if spec is not None else (), "this sweep")
    return run_sweep(spec, storage=storage, study_name=study_name,
                     train_tokens=run_in.train_tokens if run_in else None, prices=prices or None, progress=progress,
                     wait_s=wait, report_only=report_only, reclaim=reclaim, run=run_in, objective=objective,
                     min_scaling_efficiency=min_scaling_efficiency, run_flags=run_flags)


def _write_files(result, csv_file, plot) -> None:
    """The CSV and the plot, or neither: the CSV's text is made first, then the plot is drawn and
    written (what can fail on the content), then the CSV; a plot this call created is removed
    if the CSV then cannot be written. Each file is renamed into place whole."""
    from planner.outputs import write_text_atomically
    from planner.reports import sweep as sweep_report

    text = sweep_report.csv_text(result.rows) if csv_file is not None else None
    created = plot is not None and not Path(plot).exists()
    if plot is not None:
        sweep_report.plot(plot, result.rows, f"planner sweep '{result.stats['study']}'", result.stats.get("objective"))
    if text is None:
        return
    try:
        write_text_atomically(csv_file, text, "--csv")
    except BaseException:
        if created:
            Path(plot).unlink(missing_ok=True)
        raise


def _print(result, as_json: bool, csv_file, plot) -> None:
    from planner.reports import sweep as sweep_report

    if as_json:
        out = sweep_report.to_json(result.rows, result.stats)
        typer.echo(json.dumps(out, indent=2))
        if out["stats"].get("calibration_warning"):  # as search --json: the text summary says it itself
            typer.echo(out["stats"]["calibration_warning"], err=True)
    else:
        from planner.sweep import SweepSpec

        spec = SweepSpec.from_dict(result.stats["spec"])
        typer.echo(f"sweep: {spec.describe()}, best layout each")
        if result.rows:
            typer.echo(sweep_report.format_table(result.rows))
        if result.stats.get("scaling"):
            typer.echo(sweep_report.format_scaling(result.stats))
        typer.echo("")
        typer.echo(sweep_report.format_summary(result.stats, result.stats.get("worker")))
    for path in (csv_file, plot):
        if path is not None:
            typer.echo(f"wrote {path}", err=as_json)
