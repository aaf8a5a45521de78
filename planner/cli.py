"""The ``planner`` command line. Thin: parse, call the library, print.

Heavy imports (optuna, ortools) happen inside commands so ``planner --help`` starts fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from hardware_catalog.errors import PlannerInputError
from planner.cli_options import layout_options
from planner.plots import check_plot_path

app = typer.Typer(
    name="planner",
    help="Find and explain parallel layouts (DP/TP/PP/CP/EP, ZeRO, recompute) for LLM training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Options shared by evaluate and export; the layout options come from their declarations
# (costmodel.options) through planner.cli_options.layout_options.
ModelOpt = typer.Option(..., "--model", help="Model preset (e.g. 405b, llama3-70b, mixtral-8x7b) or a model / HF config.json file.")
GpusOpt = typer.Option(..., "--gpus", help="Total GPUs in the job.")
GpuOpt = typer.Option(None, "--gpu", help="GPU type (h100, a100, b200, ...); picks its default cluster.")
ClusterOpt = typer.Option(None, "--cluster", help="Cluster preset name or a TOML/YAML/JSON cluster file (overrides --gpu's default).")
TokensOpt = typer.Option(None, "--tokens-per-batch", help="Global batch in tokens (instead of --gbs).")
CrossNodeTpOpt = typer.Option(False, "--allow-cross-node-tp", help="Allow TP groups larger than the scale-up domain.")


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _command_line() -> str:
    return "planner " + " ".join(sys.argv[1:])


def _evaluate_record(model, gpus, gpu, cluster, tokens_per_batch, allow_cross_node_tp, layout: dict):
    """Resolve, check (one rule set) and price one layout given as option values."""
    from costmodel import evaluate
    from costmodel.record import result_record
    from planner.common import build_layout, resolve_setup
    from search.rules import check_layout

    setup = resolve_setup(model, gpu, cluster, layout.get("seq_len"), layout.get("gbs"), tokens_per_batch)
    lay = build_layout(setup, gpus, **layout)
    check_layout(setup.model, setup.cluster, setup.gpu, lay, gpus=gpus, allow_cross_node_tp=allow_cross_node_tp)
    result = evaluate(setup.model, setup.cluster, lay, gpu=setup.gpu)
    record = result_record(setup.model, setup.cluster, setup.gpu, result, 0)
    record["planner_version"] = _version()
    record["command"] = _command_line()
    return setup, record


def _add_interval_and_envelope(setup, record: dict) -> None:
    """The 80% interval and the validated-envelope flags (``search.ranking.annotate_batch``)."""
    from costmodel.layout import LayoutBatch
    from costmodel.options import OPTIONS, Layout
    from search.ranking import annotate_batch

    lay = Layout(**{o.name: record["layout"][o.name] for o in OPTIONS})
    annotate_batch(record, setup.model, setup.cluster, setup.gpu, LayoutBatch.from_layouts([lay]))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("planner")
    except PackageNotFoundError:
        return "0+unknown"


def _cluster_line(setup) -> str:
    from hardware_catalog import get_interconnect

    c = setup.cluster
    nic = get_interconnect(c.nic)
    return (
        f"{c.gpus_per_node} GPUs/node, {setup.gpu.scaleup_link} {setup.gpu.scaleup_bandwidth_gbps:g} GB/s/dir "
        f"in domains of {c.scaleup_domain_size}, {c.nics_per_node} x {nic.name} per node, {c.network_topology} network"
    )


@app.command()
@layout_options("evaluate")
def evaluate(
    model: str = ModelOpt,
    gpus: int = GpusOpt,
    gpu: Optional[str] = GpuOpt,
    cluster: Optional[str] = ClusterOpt,
    tokens_per_batch: Optional[int] = TokensOpt,
    allow_cross_node_tp: bool = CrossNodeTpOpt,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw the pipeline schedule and the time and memory breakdowns to FILE (.png, .svg or .html)."),
    layout: dict = None,
):
    """Explain one layout: step time, throughput, MFU, time and memory breakdown, fits or not."""
    plot = check_plot_path(plot)
    setup, record = _evaluate_record(model, gpus, gpu, cluster, tokens_per_batch, allow_cross_node_tp, layout)
    _add_interval_and_envelope(setup, record)
    if as_json:
        typer.echo(json.dumps(record, indent=2))
    else:
        from planner.report import format_evaluation

        typer.echo(format_evaluation(record, _cluster_line(setup)))
    if plot is not None:
        from planner.plots import plot_evaluation

        typer.echo(f"wrote {plot_evaluation(record, setup, plot)}", err=True)


@app.command()
def catalog(
    what: str = typer.Argument(..., help="gpus | models | clusters | interconnects"),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
):
    """List the GPUs, models, clusters or interconnects planner knows."""
    import hardware_catalog as hc
    from costmodel.params import count_params

    listers = {
        "gpus": hc.list_gpus,
        "models": hc.list_models,
        "clusters": hc.list_clusters,
        "interconnects": hc.list_interconnects,
    }
    if what not in listers:
        raise PlannerInputError(f"catalog '{what}': allowed {', '.join(listers)}")
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
        }
        rows.append(row)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from planner.report import human_count

    if what == "models":
        typer.echo(f"{'name':<26}{'params':>9}{'active':>9}{'layers':>8}{'hidden':>8}{'heads':>7}{'kv':>5}{'experts':>9}  aliases")
        for r in rows:
            typer.echo(
                f"{r['name']:<26}{human_count(r['params']):>9}{human_count(r['active_params']):>9}{r['layers']:>8}"
                f"{r['hidden']:>8}{r['heads']:>7}{r['kv_heads']:>5}{str(r['experts'] or '-'):>9}  {', '.join(r['aliases'])}"
            )
    elif what == "gpus":
        typer.echo(f"{'name':<16}{'bf16 TF':>9}{'fp8 TF':>9}{'HBM GiB':>9}{'HBM GB/s':>10}{'link GB/s':>10}  aliases")
        for r in rows:
            typer.echo(
                f"{r['name']:<16}{r['bf16_tflops']:>9g}{str(r['fp8_tflops'] or '-'):>9}{r['memory_gib']:>9g}"
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
    out: Path = typer.Option(..., "--out", help="Directory to write the launch files into."),
    fmt: str = typer.Option("all", "--format", help="torchrun | megatron | deepspeed | torchtitan | slurm | all"),
    from_file: Optional[Path] = typer.Option(None, "--from", help="A JSON result of 'planner evaluate --json' or one entry of 'planner search --json'."),
    model: Optional[str] = typer.Option(None, "--model", help="Model preset or file (with the layout flags, like evaluate)."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="Total GPUs."),
    gpu: Optional[str] = GpuOpt,
    cluster: Optional[str] = ClusterOpt,
    tokens_per_batch: Optional[int] = TokensOpt,
    allow_cross_node_tp: bool = CrossNodeTpOpt,
    entrypoint: str = typer.Option("pretrain_gpt.py", "--entrypoint", help="Training script torchrun runs."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing files."),
    torchtitan_version: Optional[str] = typer.Option(
        None, "--torchtitan-version",
        help="torchtitan release the torchtitan files target: 0.1, 0.2 or 0.3 (or an exact one, e.g. 0.2.1). "
             "0.1/0.2 read torchtitan.toml only, 0.3 the command line only. Default: overrides for 0.3.0 and "
             "the TOML for 0.2.2."),
    layout: dict = None,
):
    """Write launch configs (torchrun, Megatron-LM args, DeepSpeed JSON, torchtitan, SLURM) for a layout."""
    from hardware_catalog import get_cluster, get_model
    from planner.export import export_layout

    options = {}
    if torchtitan_version is not None:
        from planner.export.torchtitan import VERSION_OPTION, release_for

        options[VERSION_OPTION] = release_for(torchtitan_version).version  # unknown releases fail here

    if from_file is not None:
        try:
            record = json.loads(Path(from_file).read_text())
        except FileNotFoundError:
            raise PlannerInputError(f"--from {from_file}: no such file")
        except json.JSONDecodeError as err:
            raise PlannerInputError(f"--from {from_file}: not valid JSON ({err.msg} at line {err.lineno})")
        if isinstance(record, dict) and "results" in record:
            if not record["results"]:
                raise PlannerInputError(f"--from {from_file}: the search result holds no layouts")
            record = record["results"][0]
        if not isinstance(record, dict) or "layout" not in record or "model" not in record:
            raise PlannerInputError(f"--from {from_file}: expected an object with 'model' and 'layout' (planner evaluate --json)")
        model_spec = get_model(model or record["model"])
        cluster_spec = get_cluster(cluster or record["cluster"])
    else:
        if not model or not gpus:
            raise PlannerInputError("give --from FILE, or --model and --gpus with the layout flags")
        setup, record = _evaluate_record(model, gpus, gpu, cluster, tokens_per_batch, allow_cross_node_tp, layout)
        model_spec, cluster_spec = setup.model, setup.cluster
    report = export_layout(
        record, model_spec, cluster_spec, fmt, Path(out), force=force, entrypoint=entrypoint, command=_command_line(),
        options=options,
    )
    for path in report.written:
        typer.echo(f"wrote {path}")
    for name, reason in report.skipped.items():
        typer.echo(f"skipped {name}: {reason}")


@app.command()
def validate(
    runs: Optional[Path] = typer.Option(None, "--runs", help="Runs file (published_runs.json format). Default: the reference set shipped with planner."),
    as_json: bool = typer.Option(False, "--json", help="Print rows and summary as JSON."),
    confidence: str = typer.Option("high", help="Rows used for the summary: high | medium | all."),
    cross_validate: bool = typer.Option(False, "--cross-validate", help="Leave one source out: fit the constants on every other source, predict the one left out (about a minute)."),
    bootstrap: int = typer.Option(0, "--bootstrap", help="With --cross-validate: refit on N resamples of the sources and print each constant's 5-95% interval (several minutes)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw predicted vs measured tokens/s/GPU per run to FILE (.png, .svg or .html)."),
    ranking: Optional[Path] = typer.Option(None, "--ranking", help="Ordering accuracy on a file of ablation groups (same model, cluster and batch under several layouts): per group Kendall tau, pairs > 3% apart ordered right, top-1; and overall."),
    write_uncertainty: Optional[Path] = typer.Option(None, "--write-uncertainty", help="With --cross-validate: write the folds' constants and held-out errors (the data of every interval) to FILE, e.g. search/data/uncertainty.json."),
    write_envelope: Optional[Path] = typer.Option(None, "--write-envelope", help="Write what the reference runs cover per mechanism (the validated envelope) to FILE, e.g. search/data/envelope.json."),
):
    """Compare predictions with real published training runs (throughput and peak memory)."""
    if cross_validate:
        if plot is not None or ranking is not None or write_envelope is not None:
            raise PlannerInputError("--cross-validate goes without --plot, --ranking and --write-envelope")
        from planner.validate.crossval import run_cross_validation

        run_cross_validation(runs, confidence=confidence, resamples=bootstrap, as_json=as_json,
                             write_uncertainty=write_uncertainty, command=_command_line())
        return
    if bootstrap or write_uncertainty is not None:
        raise PlannerInputError(f"{'--bootstrap' if bootstrap else '--write-uncertainty'} goes with --cross-validate")
    if ranking is not None:
        from planner.validate.ranking import run_ranking

        run_ranking(ranking, as_json=as_json)
        return
    if write_envelope is not None:
        from planner.validate.envelope import derive_envelope, write_json

        data = derive_envelope(runs, confidence, _command_line())
        typer.echo(f"wrote {write_json(write_envelope, data, '--write-envelope')}")
        return
    from planner.validate import run_validate

    run_validate(runs, as_json=as_json, confidence=confidence, plot=plot)


_COMM_HELP = (
    "Time of one collective or P2P on a topology: the algorithm chosen and why, steps, bytes per GPU, "
    "algbw and busbw (as nccl-tests reports them), and the formula with its source.\n\n"
    "One level: --topology ring|tree|switch|mesh2d|torus2d --gpus N --bandwidth B --latency alpha. B is all one "
    "GPU sends per direction: a ring GPU has two links of B/2, a mesh/torus GPU four of B/4; a tree is a "
    "switched (fat) tree, priced like a switch.\n\n"
    "Two levels: --topology hierarchical --gpus N --gpus-per-node G --bandwidth B1 --latency a1 "
    "--network-bandwidth B2 --network-latency a2 [--network-topology switch]: G GPUs per node on an "
    "NVSwitch-like switch, the nodes joined by the network (B2: each GPU's share of the NICs). "
    "Or --cluster NAME --gpus N: a catalog cluster's scale-up domains and network, times their efficiencies.\n\n"
    "Example: planner comm all-reduce --topology switch --gpus 64 --bandwidth 400GB/s --latency 2us "
    "--sweep 1KiB..4GiB --plot ar.png"
)


@app.command(help=_COMM_HELP)
def comm(
    op: str = typer.Argument(..., help="all-reduce | all-gather | reduce-scatter | broadcast | all-to-all | p2p (underscores too)."),
    size: Optional[str] = typer.Option(None, "--size", help="Message: 1GiB, 64MB, 4096 (B; KB MB GB TB = 10^3; KiB MiB GiB TiB = 2^10). All-gather: the gathered output; reduce-scatter: the input; all-to-all: all one GPU sends."),
    sweep: Optional[str] = typer.Option(None, "--sweep", help="Table of time vs size instead: A..B doubling (1KiB..16GiB) or A..B:xF (1KB..1GB:x10), with the crossovers."),
    topology: Optional[str] = typer.Option(None, "--topology", help="ring | tree | switch | mesh2d | torus2d (one level) | hierarchical (nodes + network)."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs taking part (N)."),
    dims: Optional[str] = typer.Option(None, "--dims", help="mesh2d / torus2d grid XxY (instead of --gpus; default: the most square grid of N). Hierarchical: the grid of nodes."),
    bandwidth: Optional[str] = typer.Option(None, "--bandwidth", help="B per GPU per direction, as achieved: 400GB/s, 400Gb/s (bits), 1TiB/s. Hierarchical: inside a node."),
    latency: Optional[str] = typer.Option(None, "--latency", help="alpha, per algorithm step: 2us, 2µs, 500ns, 1ms. Hierarchical: inside a node."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Catalog cluster (planner catalog clusters) or cluster file: its scale-up domain + network, with --gpus."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="Hierarchical: GPUs per node (G), joined by a switch."),
    network_bandwidth: Optional[str] = typer.Option(None, "--network-bandwidth", help="Hierarchical: B2 per GPU between nodes (its NIC share), e.g. 400Gb/s."),
    network_latency: Optional[str] = typer.Option(None, "--network-latency", help="Hierarchical: alpha2 per step between nodes, e.g. 5us."),
    network_topology: Optional[str] = typer.Option(None, "--network-topology", help="Hierarchical: switch (default) | tree | ring | mesh2d | torus2d between nodes."),
    algorithm: str = typer.Option("auto", "--algorithm", help="auto (the fastest) | ring | tree | hierarchical | direct | torus2d | mesh2d."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="With --sweep: write a log-log plot of time vs size (.png, .svg or .html)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """Time of one collective or P2P on a topology you describe (see --help)."""
    from planner.comm import CommArgs, run_comm

    typer.echo(run_comm(CommArgs(
        op=op, size=size, sweep=sweep, topology=topology, gpus=gpus, dims=dims, bandwidth=bandwidth,
        latency=latency, cluster=cluster, gpus_per_node=gpus_per_node, network_bandwidth=network_bandwidth,
        network_latency=network_latency, network_topology=network_topology, algorithm=algorithm,
        plot=plot, as_json=as_json,
    )))


def _register_optional_commands() -> None:
    try:
        from planner.cli_search import register
    except ImportError:  # pragma: no cover - search module missing in a partial checkout
        return
    register(app)
    from planner.cli_sweep import register as register_sweep

    register_sweep(app)


_register_optional_commands()


def main() -> None:
    """Console entry point: bad input -> one line on stderr, exit 2, never a traceback."""
    try:
        app()
    except PlannerInputError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(2)
    except BrokenPipeError:  # e.g. `planner search ... | head`
        sys.exit(0)


if __name__ == "__main__":
    main()
