"""``--from-launch`` on ``planner evaluate`` and ``export`` (``search``: ``planner.cli.from_launch.reference``).

The command hands over a ``LaunchRequest`` (the file, and the job flags given next to it), its
``Pricing`` and ``Outputs`` (``planner.job``). Layout flags the user typed (click's parameter
source is the command line) override the file; the others keep the file's values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import typer

from costmodel.options import OPTIONS_BY_NAME


@dataclass(frozen=True)
class LaunchRequest:
    """A launch file to start from, and what the command line says next to it."""

    path: Path
    """The launch file (``planner.launch.read_launch``)."""
    format: Optional[str] = None
    """megatron | torchtitan | deepspeed | nemo; None: detected."""
    model: Optional[str] = None
    """--model: replaces the file's model (DeepSpeed files name none)."""
    gpus: Optional[int] = None
    """--gpus: replaces the file's GPU count."""
    gpu: Optional[str] = None
    """--gpu: the GPU type, where the file does not say it or to replace it."""
    cluster: Optional[str] = None
    """--cluster: the cluster (fixes the GPU type)."""
    tokens_per_batch: Optional[int] = None
    """--tokens-per-batch: replaces the file's global batch."""
    allow_cross_node_tp: bool = False
    """Allow TP groups wider than the scale-up domain."""
    given: dict = field(default_factory=dict)
    """Layout options typed on the command line (checked values): they replace the file's."""

    @classmethod
    def of(cls, path, fmt, model, gpus, gpu, cluster, tokens_per_batch, allow_cross_node_tp, layout: dict):
        """The request of a command: ``layout`` its layout options, of which the typed ones count."""
        return cls(Path(path), fmt, model, gpus, gpu, cluster, tokens_per_batch, bool(allow_cross_node_tp),
                   typed(layout))

    def job_keywords(self, given: Optional[dict] = None, gpus=None) -> dict:
        """Keywords of ``planner.cli.from_launch.resolve.launch_job`` (``given``: other overrides)."""
        return dict(gpus=gpus if gpus is not None else self.gpus, gpu=self.gpu, cluster=self.cluster,
                    tokens_per_batch=self.tokens_per_batch, given=self.given if given is None else given,
                    allow_cross_node_tp=self.allow_cross_node_tp)


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


def read(request: LaunchRequest):
    """The launch file read (``planner.launch.read_launch``), and the --model spec or None."""
    from hardware_catalog import get_model
    from planner.launch import read_launch

    model = get_model(request.model) if request.model else None
    return read_launch(request.path, request.format, model=model), model


def resolve_request(request: LaunchRequest, pricing, outputs, given: Optional[dict] = None, gpus=None):
    """The file read and priced (``planner.cli.from_launch.resolve.resolve``)."""
    from planner.cli.from_launch.resolve import resolve

    launch, model = read(request)
    return resolve(launch, pricing, outputs, model=model, **request.job_keywords(given, gpus))


def evaluate_from_launch(request: LaunchRequest, pricing, outputs) -> None:
    """``planner evaluate --from-launch FILE``: what was read, then the evaluation."""
    from planner.cli.common import show_evaluation
    from planner.cli.from_launch.resolve import describe
    from planner.outputs import check_output_file
    from planner.reports.plots import check_plot_path

    from dataclasses import replace

    outputs = replace(outputs, plot=check_output_file(check_plot_path(outputs.plot), "--plot", outputs.force))
    r = resolve_request(request, pricing, outputs)
    show_evaluation(r, outputs, before="" if outputs.as_json else describe(r))


def export_from_launch(request: LaunchRequest, pricing, outputs, target) -> None:
    """``planner export --from-launch FILE --format F``: the file's layout in another launcher's
    files (with the refusals export has); what was read goes to stderr."""
    from planner.cli.common import write_export
    from planner.cli.from_launch.resolve import describe

    r = resolve_request(request, pricing, outputs)
    typer.echo(describe(r), err=True)
    write_export(target, r.record, r.setup.model, r.setup.cluster, outputs.command)
