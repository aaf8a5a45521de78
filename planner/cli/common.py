"""What several commands share: the planner version, the hardware line of an evaluation, an
evaluation's 80% interval and envelope flags (evaluate, ``--from-launch``, calibrate), how an
evaluation is shown and how launch files are written (evaluate / export, with or without
``--from-launch``).

Imported when the CLI starts: nothing heavy at module level.
"""

from __future__ import annotations

import sys

from typing import Optional


def add_interval_and_envelope(setup, record: dict) -> None:
    """The 80% interval and the validated-envelope flags (``search.ranking.annotate_batch``)."""
    from costmodel.layout import LayoutBatch
    from costmodel.options import RECORDED_OPTIONS, Layout
    from search.ranking import annotate_batch

    lay = Layout(**{o.name: record["layout"][o.name] for o in RECORDED_OPTIONS})
    annotate_batch(record, setup.model, setup.cluster, setup.gpu, LayoutBatch.from_layouts([lay]))


def cluster_line(setup) -> str:
    """The hardware line under evaluate's title: node, scale-up domain, NICs, network."""
    from hardware_catalog import get_interconnect
    from planner.reports import counted

    c = setup.cluster
    nic = get_interconnect(c.nic)
    return (
        f"{counted(c.gpus_per_node, 'GPU')}/node, {setup.gpu.scaleup_link} {setup.gpu.scaleup_bandwidth_gbps:g} GB/s/dir "
        f"in domains of {c.scaleup_domain_size}, {c.nics_per_node} x {nic.name} per node, {c.network_topology} network"
    )


def typed_flags(ctx, names) -> dict:
    """The flags of ``names`` the user typed (not left at their defaults), with their values."""
    out = {}
    for name in names:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT", "PROMPT"):
            out[name] = ctx.params[name]
    return out


def check_fp8_recipe_use(ctx, values: dict) -> None:
    """--fp8-recipe says how FP8 GEMMs are scaled; typed for a BF16 layout it prices nothing, yet
    evaluate's layout line showed it ('bf16 ... fp8-mxfp8'): refused, naming what goes with it."""
    typed = typed_flags(ctx, ("fp8_recipe",))
    precision = values.get("precision") or "bf16"
    if typed and precision != "fp8":
        from hardware_catalog.errors import PlannerInputError

        raise PlannerInputError(f"--fp8-recipe {typed['fp8_recipe']} scales FP8 GEMMs, and this layout trains in "
                                f"{precision}: give it with --precision fp8 (or leave it out)")


def check_framework_use(framework, from_file=None, from_launch=None) -> None:
    """--framework names a release (checked before any work) and goes with --model: a --from
    record keeps the settings it was priced with, a launch file states its own. --from and
    --from-launch are two sources of one layout: one at a time."""
    from hardware_catalog.errors import PlannerInputError

    if from_file is not None and from_launch is not None:
        raise PlannerInputError(f"--from {from_file} and --from-launch {from_launch}: give one (a layout planner "
                                "wrote, or a launch file), not both")
    if framework is None:
        return
    from planner.frameworks import get_release

    get_release(framework)
    if from_file is not None or from_launch is not None:
        raise PlannerInputError(f"--framework goes with --model: {'--from' if from_file is not None else '--from-launch'} "
                                "states its own settings (type the flags to change them)")


def show_evaluation(priced, outputs, before: str = "") -> None:
    """The evaluation of a priced layout: --plot first (a reader that stops early, | head, still
    gets the file), then JSON, or ``before`` (what a launch file said) and the report; exit 3
    when it does not fit."""
    import json

    import typer

    from planner.cli.errors import EXIT_NOTHING_FITS, say

    setup, record = priced.setup, priced.record
    run = outputs.run
    if run is not None and outputs.prices:
        from costmodel.goodput import parse_prices, price_for

        # the evaluated GPU's price, checked before anything is written: a price for another GPU
        # type, or none for this one, is refused as the search and the sweep refuse it
        prices = parse_prices(outputs.prices, (setup.gpu.name,), "this evaluation")
        run = run.with_(price_per_gpu_hour=price_for(prices, setup.gpu.name))
    if outputs.plot is not None:
        from planner.reports.plots import plot_evaluation

        say(f"wrote {plot_evaluation(record, setup, outputs.plot)}")
    add_interval_and_envelope(setup, record)
    from costmodel.params import count_params

    counts = count_params(setup.model)
    # total and per-token active weights as planner counts them (MTP modules excluded, as published)
    record["model_params"] = {"total": int(counts.total), "active": int(counts.active)}
    if setup.model.sliding_window is not None:  # what the attention FLOPs were priced with
        record["model_params"].update(sliding_window=setup.model.sliding_window,
                                      windowed_layers=setup.model.windowed_layers, layers=setup.model.num_layers)
    if run is not None:
        from costmodel.goodput import run_block

        record["run"] = run_block(record, setup.model, setup.cluster, setup.gpu, run)
    if outputs.as_json:
        typer.echo(json.dumps(record, indent=2))
    else:
        from planner.reports.evaluate import format_evaluation

        if before:
            typer.echo(before)
            typer.echo("")
        typer.echo(format_evaluation(record, cluster_line(setup)))
        if run is not None:
            from planner.reports.run import format_run

            typer.echo("")
            typer.echo(format_run(record["run"]))
    if not record["fits"]:
        raise typer.Exit(EXIT_NOTHING_FITS)


def write_export(target, record: dict, model_spec, cluster_spec, command: str) -> None:
    """The launch files of ``record`` in ``target``'s format(s), and a line per file."""
    import typer

    from planner.export import export_layout

    formats = release_formats(record, target.fmt, model_spec, cluster_spec)
    report = export_layout(record, model_spec, cluster_spec, formats, target.out, force=target.force,
                           entrypoint=target.entrypoint, command=command, options=target.options)
    for path in report.written:
        typer.echo(f"wrote {path}")
    for name, reason in report.skipped.items():
        typer.echo(f"skipped {name}: {reason}")
    if not report.written:  # every format refused it: exit 0 would read as files written
        from hardware_catalog.errors import PlannerInputError

        raise PlannerInputError(nothing_exported(target.out))


def record_release(record: dict):
    """The ``--framework`` release ``record`` was priced with (``planner.frameworks.releases.Release``),
    or None."""
    fw = record.get("framework")
    name = fw.get("name") if isinstance(fw, dict) else None
    if not name:
        return None
    from planner.frameworks.releases import get_release

    return get_release(name)


def release_formats(record: dict, fmt: str, model_spec, cluster_spec):
    """The formats ``planner export`` writes for ``record``: ``fmt`` as asked without --framework;
    with the release R the record was priced with, only ``R.formats`` (what launches R, as
    ``search --framework R --export`` writes). ``all`` means all of R's. A format outside them is
    refused (one line), as the search never writes it: its files would launch another framework
    than the one priced. When none of R's formats writes the layout: one line naming the rules
    (``planner.export.domain``'s words), nothing written."""
    release = record_release(record)
    if release is None:
        return fmt
    from hardware_catalog.errors import PlannerInputError

    names = [f.strip() for f in str(fmt).split(",") if f.strip()]
    if not release.formats:
        raise PlannerInputError(f"--framework {release.name}: planner has no exporter for it (it writes none of "
                                f"its files); price it without --framework to export another framework's files")
    if names != ["all"]:
        outside = [f for f in names if f not in release.formats]
        if outside:
            raise PlannerInputError(f"--format {outside[0]}: it does not launch {release.name} (allowed with "
                                    f"--framework {release.name}: {', '.join(release.formats)}, or all)")
        return names
    from planner.export.expressible import refusals, rule_names

    why = refusals(record, model_spec, cluster_spec, release.formats)
    if all(f in why for f in release.formats):
        from hardware_catalog.errors import DoesNotFit

        if all(str(why[f]).startswith("layout does not fit in GPU memory") for f in release.formats):
            raise DoesNotFit(why[release.formats[0]])  # exit 3, as without --framework
        rules = list(dict.fromkeys(rule_names(why[f]) for f in release.formats))
        others = f" (and {', '.join(rules[1:])})" if len(rules) > 1 else ""
        raise PlannerInputError(f"{release.name} cannot launch this layout: every format that launches it "
                                f"({', '.join(release.formats)}) refuses it{others}, {why[release.formats[0]]}; "
                                f"nothing written")
    for f in release.formats:  # a format of the release that refuses it (a flag its Megatron-LM lacks): said, not fatal
        if f in why:
            print(f"skipped {f}: {why[f]}", file=sys.stderr)
    return [f for f in release.formats if f not in why]


def carry_framework(stated: Optional[dict], record: dict) -> None:
    """A record read back with ``--from`` keeps the ``--framework`` release that priced it (its
    layout states what the release pinned), so the files target that release."""
    if stated and isinstance(stated.get("framework"), dict) and "framework" not in record:
        record["framework"] = dict(stated["framework"])


def nothing_exported(out) -> str:
    """Why no launch file was written (every format skipped the layout) and what to do."""
    return (f"no launch file written to {out}: every format refused the layout as priced (the reasons above); "
            f"price it again as they say and export that")
