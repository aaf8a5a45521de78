"""The ``planner`` command line. Thin: parse, call the library, print.

Heavy imports (optuna, ortools) happen inside commands so ``planner --help`` starts fast.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Optional

import typer

from hardware_catalog.errors import PlannerInputError
from planner.cli.common import (carry_framework, check_fp8_recipe_use, check_framework_use, show_evaluation, typed_flags,
                                write_export)
from planner.common import planner_version
from planner.cli.errors import PlannerGroup, command_line, say
from planner.cli.options import calibration_flag, layout_options, run_options, tokens_per_batch_flag
from planner.cli.from_launch.options import FromLaunchOpt, LaunchFormatOpt
from planner.outputs import check_output_dir, check_output_file
from planner.reports.plots import check_plot_path

app = typer.Typer(
    name="planner",
    help="Find and explain parallel layouts (DP/TP/PP/CP/EP, ZeRO, recompute) for LLM training.\n\n"
         "Exit status: 0 done, 2 bad input (one line on stderr), 3 nothing fits, 1 internal error "
         "(--debug anywhere on the line prints its traceback), 130 interrupted. Existing files are replaced only "
         "with --force.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=PlannerGroup,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"planner {planner_version()}")
        raise typer.Exit()


@app.callback()
def _planner(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                          help="Print planner's version and exit.")) -> None:
    """Options before the command (``planner --version``)."""

# Options shared by evaluate and export; the layout options come from their declarations
# (costmodel.options) through planner.cli.options.layout_options.
ModelOpt = typer.Option(None, "--model", help="Model preset (e.g. 405b, llama3-70b, mixtral-8x7b) or a model / HF config.json file. Required unless --from or --from-launch.")
GpusOpt = typer.Option(None, "--gpus", help="Total GPUs in the job. Required unless --from or --from-launch states it.")
GpuOpt = typer.Option(None, "--gpu", help="GPU type (h100, a100, b200, ...); picks its default cluster.")
ClusterOpt = typer.Option(None, "--cluster", help="Cluster preset name or a TOML/YAML/JSON cluster file (overrides --gpu's default).")
TokensOpt = tokens_per_batch_flag()
CrossNodeTpOpt = typer.Option(False, "--allow-cross-node-tp", help="Allow TP groups larger than the scale-up domain.")
FromOpt = typer.Option(None, "--from", help="A layout planner wrote: 'planner evaluate --json', or 'planner search --json' / '--csv' with --rank. Flags given with it replace the record's values (a note says so).")
RankOpt = typer.Option(None, "--rank", help="With --from a search result: the rank of the layout to take (1 = the best).")
ForceOpt = typer.Option(False, "--force", help="Overwrite existing files.")
_JOB_FLAGS = ("model", "gpus", "gpu", "cluster", "tokens_per_batch")
CalibrationOpt = calibration_flag()
FrameworkOpt = typer.Option(None, "--framework", help="Framework release whose profile sets how the layout runs (attention kernel, loss, gradient dtype, ZeRO-3 gathers, ...), as validate prices its runs; flags you type win. 'planner catalog frameworks' lists them (e.g. megatron-core-0.13, nemo-24.07, torchtitan-0.2, deepspeed-0.5).")


def _job(ctx: typer.Context, from_file, rank, typed: dict) -> tuple:
    """(the problem, the layout values, the record read from --from FILE, whether the job must be
    priced again): the flags as typed, or the record with the flags given next to it put over
    it (a note for each)."""
    from planner.job import ProblemRequest

    if from_file is None:
        if rank is not None:
            raise PlannerInputError("--rank picks a layout of a search result: give it with --from FILE")
        if not typed["model"] or typed["gpus"] is None:
            raise PlannerInputError("give --model and --gpus (with the layout flags), --from FILE or --from-launch FILE")
        layout = typed["layout"]
        return (ProblemRequest(typed["model"], typed["gpus"], typed["gpu"], typed["cluster"], gbs=layout.get("gbs"),
                               seq_len=layout.get("seq_len"), tokens_per_batch=typed["tokens_per_batch"],
                               allow_cross_node_tp=typed["allow_cross_node_tp"]), layout, None, True)
    from planner.records import load_record, merge

    record, from_csv = load_record(from_file, rank)
    values, notes = merge(record, typed_flags(ctx, _JOB_FLAGS + tuple(typed["layout"])), from_file)
    for note in notes:
        say(note)
    layout = {**{k: None for k in typed["layout"]}, **values["layout"]}
    # The record's own TP was priced already (maybe by a search with --allow-cross-node-tp); a --tp
    # typed next to it is the user's, judged as evaluate judges it.
    typed_tp = typed_flags(ctx, ("tp",)).get("tp")
    cross_node = (bool(typed["allow_cross_node_tp"]) or typed_tp is None
                  or typed_tp == (record.get("layout") or {}).get("tp"))
    problem = ProblemRequest(values["model"], values["gpus"], values.get("gpu"), values.get("cluster"),
                             gbs=layout.get("gbs"), seq_len=layout.get("seq_len"),
                             tokens_per_batch=values.get("tokens_per_batch"), allow_cross_node_tp=cross_node)
    return problem, layout, record, bool(notes) or from_csv


def _record_calibration(record: dict, from_file) -> Optional[Path]:
    """The calibration profile a record was priced with, when it names one that is still there."""
    named = record.get("calibration")
    if not named:
        return None
    path = Path(named)
    if not path.is_absolute() and not path.exists():
        path = Path(from_file).parent / named
    if path.is_file():
        return path
    say(f"note: --from {from_file} was priced with calibration profile {named}, which is not there: "
        f"priced again with the shipped constants")
    return None


def _calibration_for(record: Optional[dict], from_file, given):
    """(what prices a --from record, whether that differs from what the record states): the
    constants it states it was priced with (``calibration_constants``; an older record naming only
    a profile: that file, when still there). ``--calibration P`` next to --from replaces them, as
    any flag replaces the record's value: priced again with P, and a note says so."""
    if record is None:
        return given, False
    from planner.calibration_use import AppliedCalibration

    stated = AppliedCalibration.from_record(record, f"--from {from_file}")
    if given is None:
        return (stated if stated is not None else _record_calibration(record, from_file)), False
    applied = AppliedCalibration.from_path(given)
    if stated is not None and stated.constants == applied.constants:
        return applied, False  # the same constants under another name: nothing changes
    was = (f"calibration={record['calibration']}" if record.get("calibration")
           else "the shipped constants it was priced with")
    say(f"note: --calibration {given} replaces {was} from {from_file}")
    return applied, True


def _note_repriced(stated: dict, record: dict, from_file) -> None:
    """One note when what a --from file states differs from what planner prices for its layout."""
    def num(rec, *keys):
        for key in keys:
            rec = rec.get(key) if isinstance(rec, dict) else None
        return rec if isinstance(rec, (int, float)) and not isinstance(rec, bool) else None

    changed = []
    for label, keys in (("step time", ("step_time_s",)), ("tokens/s/GPU", ("tokens_per_s_per_gpu",)),
                        ("peak memory", ("memory_gib", "peak"))):
        old, new = num(stated, *keys), num(record, *keys)
        if old is not None and new is not None and abs(old - new) > 1e-6 * max(abs(new), 1e-12):
            changed.append(f"{label} {old:.4g} -> {new:.4g}")
    if "fits" in stated and stated.get("fits") != record.get("fits"):
        changed.append(f"fits {stated.get('fits')} -> {record.get('fits')}")
    if changed:
        say(f"note: --from {from_file} states other numbers than planner prices for its layout "
            f"({'; '.join(changed)}): the files state planner's")


def _warn_calibration_gpu(record: dict) -> None:
    """One line on stderr when the record's calibration profile was fitted on other GPU types."""
    from planner.calibration_use import record_calibration

    applied = record_calibration(record)
    warning = applied.gpu_warning(record.get("gpu")) if applied is not None else None
    if warning:
        say(warning)


def _pricing(ctx: typer.Context, calibration, framework, layout: dict):
    """The command's pricing request: calibration, framework and the layout flags typed."""
    from planner.job import Pricing

    return Pricing(calibration, framework, frozenset(typed_flags(ctx, tuple(layout))))


@app.command()
@layout_options("evaluate")
@run_options("evaluate")
def evaluate(
    ctx: typer.Context,
    model: Optional[str] = ModelOpt,
    gpus: Optional[int] = GpusOpt,
    gpu: Optional[str] = GpuOpt,
    cluster: Optional[str] = ClusterOpt,
    tokens_per_batch: Optional[str] = TokensOpt,
    allow_cross_node_tp: bool = CrossNodeTpOpt,
    from_file: Optional[Path] = FromOpt,
    rank: Optional[int] = RankOpt,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw the pipeline schedule and the time and memory breakdowns to FILE (.png, .svg or .html)."),
    from_launch: Optional[Path] = FromLaunchOpt,
    launch_format: Optional[str] = LaunchFormatOpt,
    force: bool = ForceOpt,
    calibration: Optional[Path] = CalibrationOpt,
    framework: Optional[str] = FrameworkOpt,
    layout: dict = None,
    run: dict = None,
):
    """Explain one layout: step time, throughput, MFU, time and memory breakdown, fits or not (exit 3 if not);
    with --train-tokens, the whole run: failures, checkpoints, goodput, days, MWh, $."""
    from planner.cli.options import run_inputs
    from planner.job import Job, Outputs, price

    run_in = run_inputs(run)  # bad values fail before any work
    check_framework_use(framework, from_file, from_launch)
    # the price as typed (run_inputs read its form): show_evaluation reads it with the GPU evaluated
    outputs = Outputs(command_line(), as_json, plot, force, run_in, run["price_per_gpu_hour"])
    if from_launch is not None:
        from planner.cli.from_launch.commands import LaunchRequest, evaluate_from_launch

        return evaluate_from_launch(LaunchRequest.of(from_launch, launch_format, model, gpus, gpu, cluster,
                                                     tokens_per_batch, allow_cross_node_tp, layout),
                                    _pricing(ctx, calibration, None, layout), outputs)
    plot = check_output_file(check_plot_path(plot), "--plot", force)
    problem, values, record, _ = _job(ctx, from_file, rank, dict(
        model=model, gpus=gpus, gpu=gpu, cluster=cluster, tokens_per_batch=tokens_per_batch,
        allow_cross_node_tp=allow_cross_node_tp, layout=layout))
    calibration, _ = _calibration_for(record, from_file, calibration)
    carried = _run_of_record(record, from_file) if run_in is None else {}
    if carried:  # a row priced over a token budget: the same run, unless a run flag was typed
        run = {**run, **carried}
        outputs = Outputs(command_line(), as_json, plot, force, run_inputs(run), run["price_per_gpu_hour"])
    check_fp8_recipe_use(ctx, values)
    job = Job(problem, _pricing(ctx, calibration, framework, layout), outputs)
    try:
        priced = price(job, values)
    except PlannerInputError:
        if from_file is not None or typed_flags(ctx, tuple(layout) + ("tokens_per_batch",)):
            raise
        values = _searched_layout(ctx, problem, values, layout, calibration, framework)
        priced = price(job, values)
    carry_framework(record, priced.record)  # --from a --framework record: the release that priced it
    if framework is not None:  # priced as the release runs it: say when the release cannot run it
        from planner.export.expressible import release_refusal_note
        from planner.frameworks import get_release

        note = release_refusal_note(priced.record, priced.setup.model, priced.setup.cluster, get_release(framework))
        if note:
            say(note)
    if as_json:  # the text report says it under its calibration line
        _warn_calibration_gpu(priced.record)
    show_evaluation(priced, outputs)


def _run_of_record(record: Optional[dict], from_file) -> dict:
    """The token budget and price a --from record's run was priced with (its "run" block's inputs,
    as search --train-tokens writes them), as run flags; {} when it has none. Said in one note."""
    inputs = ((record or {}).get("run") or {}).get("inputs") or {}
    if inputs.get("train_tokens") is None:
        return {}
    carried = {"train_tokens": inputs["train_tokens"]}
    said = f"--train-tokens {inputs['train_tokens']:g}"
    if inputs.get("price_per_gpu_hour") is not None:
        carried["price_per_gpu_hour"] = f"{inputs['price_per_gpu_hour']:g}"
        said += f" --price-per-gpu-hour {inputs['price_per_gpu_hour']:g}"
    say(f"note: --from {from_file} was priced over a whole run: {said} (give a run flag to price another)")
    return carried


def _searched_layout(ctx, problem, values: dict, layout: dict, calibration, framework) -> dict:
    """No layout or batch flag given and the default layout (all data parallel) breaks a rule (a batch too
    small for every GPU, a model too large for one): the layout ``planner search`` ranks first
    for the same job, said in one line; nothing fits: exit 3 with the search's answer."""
    from planner.calibration_use import as_applied
    from planner.cli.search import _request
    from planner.reports import counted
    from planner.reports.evaluate import layout_summary
    from search.api import search

    typed = typed_flags(ctx, tuple(layout))  # evaluate's defaults are not pins: the search chooses those
    _, request = _request(ctx, framework, {k: (v if k in typed else None) for k, v in layout.items()}, problem.model, problem.gpus, problem.gpu, problem.cluster,
                          problem.tokens_per_batch, problem.allow_cross_node_tp, options={}, ranking=dict(top=1),
                          calibration=as_applied(calibration), from_launch=False)
    best = search(request).best
    if best is None:
        raise PlannerInputError(f"no layout flags given, the default layout (all data parallel) breaks a rule and "
                                f"no layout fits {counted(problem.gpus, 'GPU')}: run planner search for the closest ones")
    say(f"note: no layout flags given and the all-data-parallel default breaks a rule: evaluating planner search's "
        f"best layout ({layout_summary(best['layout'])})")
    return {**values, **{k: v for k, v in best["layout"].items() if k in values}}


@app.command()
def catalog(
    what: Optional[str] = typer.Argument(None, help="gpus | models | clusters | interconnects | frameworks"),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
):
    """List the GPUs, models, clusters, interconnects or framework releases (--framework) planner knows."""
    import hardware_catalog as hc
    from costmodel.params import count_params

    if what is None:  # typer's own line was "Missing argument 'what'."
        raise PlannerInputError("catalog: say what to list: gpus, models, clusters, interconnects or frameworks")
    if what == "frameworks":
        from planner.frameworks import catalog_rows, format_catalog

        rows = catalog_rows()
        typer.echo(json.dumps(rows, indent=2) if as_json else format_catalog(rows))
        return
    listers = {
        "gpus": hc.list_gpus,
        "models": hc.list_models,
        "clusters": hc.list_clusters,
        "interconnects": hc.list_interconnects,
    }
    if what not in listers:
        raise PlannerInputError(f"catalog '{what}': allowed {', '.join(listers)}, frameworks")
    items = listers[what]()
    rows = []
    for item in items:
        row = item.model_dump(exclude={"sources"}) if what != "models" else {
            "name": item.name,
            "aliases": item.aliases,
            "family": item.family,
            "params": count_params(item).total,
            "active_params": count_params(item).active,
            "layers": item.num_layers,
            "hidden": item.hidden_size,
            "heads": item.num_attention_heads,
            "kv_heads": item.kv_heads,
            "experts": item.moe.num_experts if item.moe else None,
            "seq_len": item.default_seq_len,
            "sliding_window": item.sliding_window,
            "windowed_layers": item.windowed_layers,
        }
        rows.append(row)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from planner.reports.evaluate import human_count

    if what == "models":
        typer.echo(f"{'name':<26}{'params':>9}{'active':>9}{'layers':>8}{'hidden':>8}{'heads':>7}{'kv':>5}{'experts':>9}"
                   f"{'window':>8}  aliases")
        for r in rows:
            typer.echo(
                f"{r['name']:<26}{human_count(r['params']):>9}{human_count(r['active_params']):>9}{r['layers']:>8}"
                f"{r['hidden']:>8}{r['heads']:>7}{r['kv_heads']:>5}{str(r['experts'] or '-'):>9}"
                f"{str(r['sliding_window'] or '-'):>8}  {', '.join(r['aliases'])}"
            )
    elif what == "gpus":
        typer.echo(f"{'name':<16}{'bf16 TF':>9}{'fp8 TF':>9}{'fp4 TF':>9}{'HBM GiB':>9}{'HBM GB/s':>10}{'link GB/s':>10}  aliases")
        for r in rows:
            typer.echo(
                f"{r['name']:<16}{r['bf16_tflops']:>9g}{str(r['fp8_tflops'] or '-'):>9}{str(r.get('fp4_tflops') or '-'):>9}{r['memory_gib']:>9g}"
                f"{r['memory_bandwidth_gbps']:>10g}{r['scaleup_bandwidth_gbps']:>10g}  {', '.join(r['aliases'])}"
            )
    elif what == "clusters":
        typer.echo(f"{'name':<18}{'gpu':<16}{'GPUs/node':>10}{'domain':>8}{'NICs':>6}  {'nic':<10}{'network':<9}  aliases")
        for r in rows:
            typer.echo(
                f"{r['name']:<18}{r['gpu']:<16}{r['gpus_per_node']:>10}{r['scaleup_domain_size']:>8}{r['nics_per_node']:>6}"
                f"  {r['nic']:<10}{r['network_topology']:<9}  {', '.join(r['aliases'])}"
            )
    else:
        typer.echo(f"{'name':<14}{'kind':<12}{'GB/s/dir':>10}{'latency us':>12}  aliases")
        for r in rows:
            typer.echo(f"{r['name']:<14}{r['kind']:<12}{r['bandwidth_gbps']:>10g}{r['latency_us']:>12g}  {', '.join(r['aliases'])}")


@app.command()
@layout_options("export")
def export(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", help="Directory to write the launch files into."),
    fmt: str = typer.Option("all", "--format", help="torchrun | megatron | deepspeed | torchtitan | slurm | "
                                                   "megatron-bridge | all"),
    from_file: Optional[Path] = FromOpt,
    rank: Optional[int] = RankOpt,
    model: Optional[str] = typer.Option(None, "--model", help="Model preset or file (with the layout flags, like evaluate)."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="Total GPUs."),
    gpu: Optional[str] = GpuOpt,
    cluster: Optional[str] = ClusterOpt,
    tokens_per_batch: Optional[str] = TokensOpt,
    allow_cross_node_tp: bool = CrossNodeTpOpt,
    entrypoint: str = typer.Option("pretrain_gpt.py", "--entrypoint", help="Training script torchrun runs."),
    force: bool = ForceOpt,
    torchtitan_version: Optional[str] = typer.Option(
        None, "--torchtitan-version",
        help="torchtitan release the torchtitan files target: 0.1, 0.2 or 0.3 (or an exact one, e.g. 0.2.1; "
             "torchtitan-0.2 as --framework names it; --framework torchtitan-0.2 alone targets 0.2). "
             "0.1/0.2 read torchtitan.toml only, 0.3 the command line only. Default: overrides for 0.3.0 and "
             "the TOML for 0.2.2."),
    from_launch: Optional[Path] = FromLaunchOpt,
    launch_format: Optional[str] = LaunchFormatOpt,
    calibration: Optional[Path] = CalibrationOpt,
    framework: Optional[str] = FrameworkOpt,
    layout: dict = None,
):
    """Write launch configs (torchrun, Megatron-LM args, DeepSpeed JSON, torchtitan, SLURM) for a layout."""
    from planner.job import ExportTarget, Job, Outputs, price

    check_output_dir(out, "--out", force=True)  # writable; existing files are checked once rendered
    check_framework_use(framework, from_file, from_launch)
    options = {}
    if torchtitan_version is not None:
        from planner.export.torchtitan import VERSION_OPTION, release_for

        options[VERSION_OPTION] = release_for(torchtitan_version).version  # unknown releases fail here
    target = ExportTarget(fmt, Path(out), entrypoint, options, force)
    outputs = Outputs(command_line(), force=force)
    if from_launch is not None:
        from planner.cli.from_launch.commands import LaunchRequest, export_from_launch

        if from_file is not None:
            raise PlannerInputError("give --from (a planner JSON result) or --from-launch (a launch file), not both")
        return export_from_launch(LaunchRequest.of(from_launch, launch_format, model, gpus, gpu, cluster,
                                                   tokens_per_batch, allow_cross_node_tp, layout),
                                  _pricing(ctx, calibration, None, layout), outputs, target)
    problem, values, record, price_again = _job(ctx, from_file, rank, dict(
        model=model, gpus=gpus, gpu=gpu, cluster=cluster, tokens_per_batch=tokens_per_batch,
        allow_cross_node_tp=allow_cross_node_tp, layout=layout))
    # A --from record is priced with the constants it states (a --calibration next to it replaces them).
    calibration, recalibrated = _calibration_for(record, from_file, calibration)
    stated = None
    if not (price_again or recalibrated):
        # A file's numbers are not trusted: the layout it names is priced again (with the constants
        # it was priced with), so a hand-edited step time or "fits": true never reaches a header.
        stated = record
    priced = price(Job(problem, _pricing(ctx, calibration, framework, layout), outputs), values)
    carry_framework(record, priced.record)  # --from a --framework search: its release's formats and files
    record, model_spec, cluster_spec = priced.record, priced.setup.model, priced.setup.cluster
    if stated is not None:
        _note_repriced(stated, record, from_file)
    _warn_calibration_gpu(record)
    write_export(target, record, model_spec, cluster_spec, outputs.command)


@app.command()
def validate(
    runs: Optional[Path] = typer.Option(None, "--runs", help="Runs file (the runs format: planner validate --schema; README 'Your own runs'). Default: the reference set shipped with planner."),
    as_json: bool = typer.Option(False, "--json", help="Print rows and summary as JSON."),
    confidence: str = typer.Option("high", help="Rows used for the summary: high | medium | all."),
    cross_validate: bool = typer.Option(False, "--cross-validate", help="Leave one source out: fit the constants on every other source, predict the one left out (about three minutes on 2 cores)."),
    bootstrap: int = typer.Option(0, "--bootstrap", help="With --cross-validate: refit on N resamples of the sources and print each constant's 5-95% interval (several minutes)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw predicted vs measured tokens/s/GPU per run to FILE (.png, .svg or .html)."),
    force: bool = ForceOpt,
    calibration: Optional[Path] = CalibrationOpt,
    schema: bool = typer.Option(False, "--schema", help="Print the JSON Schema of a runs file and exit."),
    ranking: Optional[Path] = typer.Option(None, "--ranking", help="Ordering accuracy on a file of ablation groups (same model, cluster and batch under several layouts): per group Kendall tau, pairs > 3% apart ordered right, top-1; and overall."),
    write_uncertainty: Optional[Path] = typer.Option(None, "--write-uncertainty", help="With --cross-validate: write the folds' constants and held-out errors (the data of every interval) to FILE, e.g. search/data/uncertainty.json."),
    write_envelope: Optional[Path] = typer.Option(None, "--write-envelope", help="Write what the reference runs cover per mechanism (the validated envelope) to FILE, e.g. search/data/envelope.json."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="With --runs: leave out the rows the runs format refuses (listed on stderr) and validate the rest."),
):
    """Compare predictions with real training runs (throughput and peak memory): the shipped
    reference set, or your own (--runs). Exit 2: a bad runs file; 3: no row could be mapped."""
    if schema:
        from planner.validate.schema import runs_json_schema

        typer.echo(json.dumps(runs_json_schema(), indent=2))
        return
    check_output_file(check_plot_path(plot), "--plot", force)
    with _reading_runs(runs):
        _validate(runs, as_json, confidence, cross_validate, bootstrap, plot, calibration, ranking, write_uncertainty,
                  write_envelope, skip_invalid)


@contextlib.contextmanager
def _reading_runs(runs: Optional[Path]):
    """A runs file the user gave that planner cannot read is bad input, whatever fails on it."""
    try:
        yield
    except (PlannerInputError, OSError):
        raise
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as err:
        if runs is None:
            raise  # the reference set shipped with planner: a bug, not the user's input
        detail = " ".join(str(err).split())[:160]
        raise PlannerInputError(f"--runs {runs}: not a runs file planner can read ({type(err).__name__}: {detail}); "
                                "see planner validate --schema for the format") from None


def _validate(runs, as_json, confidence, cross_validate, bootstrap, plot, calibration=None, ranking=None,
              write_uncertainty=None, write_envelope=None, skip_invalid=False) -> None:
    if skip_invalid and (runs is None or cross_validate or ranking is not None or write_envelope is not None):
        raise PlannerInputError("--skip-invalid goes with --runs FILE and the validate table")
    if cross_validate:
        if calibration is not None:
            raise PlannerInputError("--cross-validate fits its own constants; --calibration goes with the validate table")
        if plot is not None or ranking is not None or write_envelope is not None:
            raise PlannerInputError("--cross-validate goes without --plot, --ranking and --write-envelope")
        from planner.validate.crossval import run_cross_validation

        run_cross_validation(runs, confidence=confidence, resamples=bootstrap, as_json=as_json,
                             write_uncertainty=write_uncertainty, command=command_line())
        return
    if bootstrap or write_uncertainty is not None:
        raise PlannerInputError(f"{'--bootstrap' if bootstrap else '--write-uncertainty'} goes with --cross-validate")
    if calibration is not None and (ranking is not None or write_envelope is not None):
        # the ranking and the envelope are the shipped model's: a profile would be read and not used
        raise PlannerInputError(f"--calibration goes with the validate table, not with "
                                f"{'--ranking' if ranking is not None else '--write-envelope'}")
    if ranking is not None:
        from planner.validate.ranking import run_ranking

        run_ranking(ranking, as_json=as_json)
        return
    if write_envelope is not None:
        from planner.validate.envelope import derive_envelope, write_json

        data = derive_envelope(runs, confidence, command_line())
        typer.echo(f"wrote {write_json(write_envelope, data, '--write-envelope')}")
        return
    from planner.validate import run_validate

    from planner.calibration_profile import calibration_option

    run_validate(runs, as_json=as_json, confidence=confidence, plot=plot, calib=calibration_option(calibration),
                 skip_invalid=skip_invalid, calibration=None if calibration is None else str(calibration))


_COMM_HELP = (
    "Time of one collective or P2P on a topology: the algorithm chosen and why, steps, the bytes each GPU "
    "sends (bytes/GPU) and the bytes its links are charged at B (bytes at B), algbw and busbw (as nccl-tests "
    "reports them), and the formula with its source.\n\n"
    "One level: --topology ring|tree|switch|mesh2d|torus2d --gpus N --bandwidth B --latency alpha. B is all one "
    "GPU sends per direction: a ring GPU has two links of B/2, a mesh/torus GPU four of B/4. A switch links "
    "any two GPUs directly (one-shot 'direct' algorithms: all-reduce in 2 steps); a tree links each GPU to "
    "its parent and children (the seed's unpipelined tree all-reduce).\n\n"
    "Units: every bandwidth printed, and every *_gbps key of --json, is GB/s = 10^9 BYTES per second "
    "(not gigabits; type 400Gb/s for bits). Sizes print in the system typed: 1GB as GB, 1GiB as GiB.\n\n"
    "Two levels: --topology hierarchical --gpus N --gpus-per-node G --bandwidth B1 --latency a1 "
    "--network-bandwidth B2 --network-latency a2 [--network-topology switch]: G GPUs per node on an "
    "NVSwitch-like switch, the nodes joined by the network (B2: each GPU's share of the NICs). "
    "Or --cluster NAME --gpus N: a catalog cluster's scale-up domains and network, times their efficiencies.\n\n"
    "Example: planner comm all-reduce --topology switch --gpus 64 --bandwidth 400GB/s --latency 2us "
    "--sweep 1KiB..4GiB --plot ar.png"
)


@app.command(help=_COMM_HELP)
def comm(
    op: str = typer.Argument(..., help="all-reduce | all-gather | reduce-scatter | broadcast | reduce | all-to-all | p2p (underscores too)."),
    size: Optional[str] = typer.Option(None, "--size", help="Message: 1GiB, 64MB, 4096 (B; KB MB GB TB = 10^3; KiB MiB GiB TiB = 2^10). All-gather: the gathered output; reduce-scatter: the input; all-to-all: all one GPU sends."),
    sweep: Optional[str] = typer.Option(None, "--sweep", help="Table of time vs size instead: A..B doubling (1KiB..16GiB) or A..B:xF (1KB..1GB:x10), with the crossovers."),
    topology: Optional[str] = typer.Option(None, "--topology", help="ring | tree | switch | mesh2d | torus2d (one level) | hierarchical (nodes + network)."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs taking part (N)."),
    dims: Optional[str] = typer.Option(None, "--dims", help="mesh2d / torus2d grid XxY (instead of --gpus; default: the most square grid of N). Hierarchical: the grid of nodes."),
    bandwidth: Optional[str] = typer.Option(None, "--bandwidth", help="B per GPU per direction, as achieved: 400GB/s (bytes), 400Gb/s (bits), 1TiB/s. Hierarchical: inside a node."),
    latency: Optional[str] = typer.Option(None, "--latency", help="alpha, per algorithm step: 2us, 2µs, 500ns, 1ms. Hierarchical: inside a node."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Catalog cluster (planner catalog clusters) or cluster file: its scale-up domain + network, with --gpus."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="Hierarchical: GPUs per node (G), joined by a switch."),
    network_bandwidth: Optional[str] = typer.Option(None, "--network-bandwidth", help="Hierarchical: B2 per GPU between nodes (its NIC share), e.g. 400Gb/s."),
    network_latency: Optional[str] = typer.Option(None, "--network-latency", help="Hierarchical: alpha2 per step between nodes, e.g. 5us."),
    network_topology: Optional[str] = typer.Option(None, "--network-topology", help="Hierarchical: switch (default) | tree (a fat tree of switches: full bisection, priced as switch) | ring | mesh2d | torus2d between nodes."),
    algorithm: str = typer.Option("auto", "--algorithm", help="auto (the fastest; across nodes what NCCL would pick: rings for all-gather and reduce-scatter) | ring | tree (NCCL's) | unpipelined_tree (the seed's) | hierarchical | direct (one-shot on a switch; all-to-all's pairwise exchange) | torus2d | mesh2d."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="With --sweep: write a log-log plot of time vs size (.png, .svg or .html)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    force: bool = ForceOpt,
):
    """Time of one collective or P2P on a topology you describe (see --help)."""
    from planner.comm import CommArgs, run_comm

    check_output_file(plot, "--plot", force)
    typer.echo(run_comm(CommArgs(
        op=op, size=size, sweep=sweep, topology=topology, gpus=gpus, dims=dims, bandwidth=bandwidth,
        latency=latency, cluster=cluster, gpus_per_node=gpus_per_node, network_bandwidth=network_bandwidth,
        network_latency=network_latency, network_topology=network_topology, algorithm=algorithm,
        plot=plot, as_json=as_json,
    )))


def _register_optional_commands() -> None:
    try:
        from planner.cli.search import register
    except ImportError:  # pragma: no cover - search module missing in a partial checkout
        return
    register(app)
    from planner.cli.sweep import register as register_sweep

    register_sweep(app)
    from planner.cli.calibrate import register as register_calibrate

    register_calibrate(app)


_register_optional_commands()


def main() -> None:
    """Console entry point. Every failure ends in ``PlannerGroup`` (planner.cli.errors): one line
    on stderr and the exit status of its kind, never a traceback."""
    app()


if __name__ == "__main__":
    main()
