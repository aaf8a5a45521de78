"""``--from-launch`` on ``planner evaluate``, ``export`` and ``search``.

The commands in ``planner.cli`` hand over their arguments as one dict
(``dict(locals())`` at the top of the command) when ``--from-launch`` is given. Layout flags the
user typed (click's parameter source is the command line) override the file; the others keep the
file's values.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from costmodel.options import OPTIONS_BY_NAME
from hardware_catalog.errors import PlannerInputError


def typed(layout: dict) -> dict:
    """The layout options the user typed on the command line (checked values), not the defaults."""
    get_context, ParameterSource = _click()
    ctx = get_context(silent=True)
    out = {}
    for name, value in (layout or {}).items():
        source = ctx.get_parameter_source(name) if ctx is not None else None
        if value is not None and (ctx is None or source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)):
            out[name] = OPTIONS_BY_NAME[name].parse(value)
    return out


def _click():
    """(get_current_context, ParameterSource) from click, or from the copy typer >= 0.25 vendors."""
    try:
        from click import get_current_context
        from click.core import ParameterSource
    except ImportError:
        from typer._click.core import ParameterSource
        from typer._click.globals import get_current_context
    return get_current_context, ParameterSource


def _read(a: dict):
    from hardware_catalog import get_model
    from planner.launch import read_launch

    model = get_model(a["model"]) if a.get("model") else None
    return read_launch(a["from_launch"], a.get("launch_format"), model=model), model


def calib_of(a: dict):
    """The command's ``--calibration`` profile as constants (None: the shipped ones)."""
    from planner.calibration_profile import calibration_option

    return calibration_option(a.get("calibration"))


def _resolve(a: dict, given: dict, gpus=None):
    from planner.launch.run import resolve

    launch, model = _read(a)
    return resolve(launch, calib=calib_of(a), model=model, gpus=gpus if gpus is not None else a.get("gpus"),
                   gpu=a.get("gpu"), cluster=a.get("cluster"), tokens_per_batch=a.get("tokens_per_batch"),
                   given=given, allow_cross_node_tp=bool(a.get("allow_cross_node_tp")))


def _stamp(record: dict, a: dict) -> dict:
    from planner.cli_common import planner_version
    from planner.cli_errors import command_line

    record["planner_version"] = planner_version()
    record["command"] = command_line()
    if a.get("calibration") is not None:
        record["calibration"] = str(a["calibration"])
    return record


def evaluate_from_launch(a: dict) -> None:
    """``planner evaluate --from-launch FILE``: what was read, then the evaluation."""
    from planner.cli_common import add_interval_and_envelope, cluster_line
    from planner.cli_errors import EXIT_NOTHING_FITS, say
    from planner.launch.run import describe
    from planner.outputs import check_output_file
    from planner.plots import check_plot_path

    plot = check_output_file(check_plot_path(a.get("plot")), "--plot", bool(a.get("force")))
    r = _resolve(a, typed(a["layout"]))
    record = _stamp(r.record, a)
    if plot is not None:  # files first, as plain evaluate does
        from planner.plots import plot_evaluation

        say(f"wrote {plot_evaluation(record, r.setup, plot)}")
    add_interval_and_envelope(r.setup, record)
    if a.get("as_json"):
        typer.echo(json.dumps(record, indent=2))
    else:
        from planner.report import format_evaluation

        typer.echo(describe(r))
        typer.echo("")
        typer.echo(format_evaluation(record, cluster_line(r.setup)))
    if not record["fits"]:
        raise typer.Exit(EXIT_NOTHING_FITS)


def export_from_launch(a: dict, options: dict) -> None:
    """``planner export --from-launch FILE --format F``: the file's layout in another launcher's
    files (with the refusals export has); what was read goes to stderr."""
    from planner.export import export_layout
    from planner.launch.run import describe

    if a.get("from_file") is not None:
        raise PlannerInputError("give --from (a planner JSON result) or --from-launch (a launch file), not both")
    r = _resolve(a, typed(a["layout"]))
    typer.echo(describe(r), err=True)
    record = _stamp(r.record, a)
    report = export_layout(record, r.setup.model, r.setup.cluster, a["fmt"], Path(a["out"]), force=a["force"],
                           entrypoint=a["entrypoint"], command=record["command"], options=options)
    for path in report.written:
        typer.echo(f"wrote {path}")
    for name, reason in report.skipped.items():
        typer.echo(f"skipped {name}: {reason}")
