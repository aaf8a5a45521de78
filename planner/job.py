"""One job pipeline: what a command asks planner to price, by concern, and the one function that
prices a layout for it.

* the problem (model, GPUs, hardware, batch): ``search.request.ProblemRequest``, the same object a
  search is asked with;
* pricing (calibration profile, framework profile): ``Pricing``;
* outputs (the command that asked, JSON or text, plot): ``Outputs``; launch files: ``ExportTarget``.

``price(job, layout)`` resolves the problem, applies the framework profile, builds the layout
(``planner.common.build_layout``), judges it with the rules (``search.rules.check_layout``),
evaluates it (``costmodel.evaluate``), makes the record (``costmodel.record.result_record``) and
stamps it (planner version, command, calibration, framework). ``planner evaluate``, ``export``,
``--from-launch`` (``planner.cli.from_launch``) and the Python API (``planner.evaluate``) go through
it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from search.request import ProblemRequest

__all__ = ["ExportTarget", "Job", "Outputs", "Priced", "Pricing", "ProblemRequest", "price", "resolve", "stamp"]


@dataclass(frozen=True)
class Pricing:
    """How the layout is priced: which constants, and which framework release runs it."""

    calibration: Any = None
    """Calibration profile (TOML from ``planner calibrate``, or a
    ``planner.calibration_use.AppliedCalibration``: what a ``--from`` record states) whose fitted
    constants replace the shipped ones; None: the shipped constants (``costmodel.calibration.DEFAULT``)."""
    framework: Optional[str] = None
    """Framework release (``planner catalog frameworks``) whose profile sets the implementation
    options the user did not type; None: planner's defaults."""
    typed: frozenset = frozenset()
    """Layout options the user typed on the command line: they win over the framework profile."""


@dataclass(frozen=True)
class Outputs:
    """What the command shows and writes."""

    command: Optional[str] = None
    """The command line that asked: records name it and planner's version. None (the Python
    API): records carry neither."""
    as_json: bool = False
    """Print one JSON object instead of the text report."""
    plot: Optional[Path] = None
    """Also draw the figure to this file (.png, .svg or .html); checked before any work."""
    force: bool = False
    """Replace files that exist."""
    run: Any = None
    """--train-tokens and the run settings (``costmodel.goodput.RunInputs``): add the whole-run block
    (failures, checkpoints, goodput, days, MWh, $); None: none."""
    prices: Any = None
    """--price-per-gpu-hour as typed (one number, or per GPU type: ``costmodel.goodput.parse_prices``):
    the run block is costed at the evaluated GPU's price, which it must name (or give one for all)."""


@dataclass(frozen=True)
class ExportTarget:
    """Where and how ``planner export`` writes a layout's launch files."""

    fmt: str
    """Launcher format (``planner.export``: torchrun, megatron, deepspeed, torchtitan, slurm) or all."""
    out: Path
    """Directory the files go into."""
    entrypoint: str = "pretrain_gpt.py"
    """Training script torchrun runs."""
    options: dict = field(default_factory=dict)
    """Exporter options (e.g. the torchtitan release the files target)."""
    force: bool = False
    """Replace files that exist."""


@dataclass(frozen=True)
class Job:
    """One pricing request: the problem, how to price it, what to show."""

    problem: ProblemRequest
    pricing: Pricing = field(default_factory=Pricing)
    outputs: Outputs = field(default_factory=Outputs)


@dataclass
class Priced:
    """A priced layout: the resolved job, the layout as checked, and its record."""

    setup: Any
    """``planner.common.Setup``: model, GPU, cluster and batch as resolved."""
    layout: Any
    """``costmodel.options.Layout`` as built and checked."""
    record: dict
    """The ``planner evaluate --json`` record, stamped."""


def resolve(problem: ProblemRequest):
    """The problem's catalog specs and batch (``planner.common.Setup``), one-line errors."""
    from planner.common import resolve_setup

    return resolve_setup(problem.model, problem.gpu, problem.cluster, problem.seq_len, problem.gbs,
                         problem.tokens_per_batch)


def price(job: Job, layout: dict, annotations: Optional[dict] = None) -> Priced:
    """Price ``layout`` (option name -> ``Layout`` value as typed; None: the default) for ``job``:
    resolve, apply the framework profile, build, check the rules, evaluate, record, stamp.
    ``annotations``: keys put into the record before the stamp (e.g. ``launch``)."""
    from costmodel import evaluate
    from costmodel.calibration import DEFAULT
    from costmodel.record import result_record
    from planner.calibration_use import as_applied
    from planner.common import build_layout
    from search.rules import check_layout

    applied = as_applied(job.pricing.calibration)  # the file read once: what prices is what the record states
    job = replace(job, pricing=replace(job.pricing, calibration=applied))
    calib = applied.calib() if applied is not None else DEFAULT
    problem = job.problem
    setup = resolve(problem)
    layout = dict(layout)
    framework = _apply_framework(job.pricing, setup, layout)
    lay = build_layout(setup, problem.gpus, job.pricing.typed, **layout)
    check_layout(setup.model, setup.cluster, setup.gpu, lay, gpus=problem.gpus,
                 allow_cross_node_tp=problem.allow_cross_node_tp, batch_origin=setup.batch_origin)
    result = evaluate(setup.model, setup.cluster, lay, gpu=setup.gpu, calib=calib)
    record = result_record(setup.model, setup.cluster, setup.gpu, result, 0)
    record.update(annotations or {})
    stamp(record, job, framework)
    return Priced(setup, lay, record)


def _apply_framework(pricing: Pricing, setup, layout: dict) -> Optional[dict]:
    """``--framework``: the release's profile into ``layout`` (in place) where the user typed no
    flag; the record's ``framework`` entry, or None."""
    if pricing.framework is None:
        return None
    from costmodel.options import EVALUATE, options_for
    from planner.frameworks import apply_framework, framework_settings

    takes = {o.name for o in options_for(EVALUATE)}  # a priced layout takes what evaluate takes
    fw = framework_settings(pricing.framework, setup.model, setup.gpu.name, layout.get("precision") or "bf16",
                            layout.get("recompute"), takes=takes)
    return apply_framework(fw, layout, set(pricing.typed))


def stamp(record: dict, job: Job, framework: Optional[dict] = None) -> dict:
    """Name what made ``record``: planner's version and the command (not for the Python API),
    the calibration profile and its constants, the framework profile (its share of layers stated as the record
    states it, layers per stage)."""
    if job.outputs.command is not None:
        from planner.common import planner_version

        record["planner_version"] = planner_version()
        record["command"] = job.outputs.command
    if job.pricing.calibration is not None:  # the profile's name and its constants: the record says what priced it
        from planner.calibration_use import as_applied

        as_applied(job.pricing.calibration).stamp(record)
    if framework is not None:
        settings = framework["settings"]
        if "recompute_share" in settings:
            framework["settings"] = {("recompute_layers" if k == "recompute_share" else k):
                                     (record["layout"]["recompute_layers"] if k == "recompute_share" else v)
                                     for k, v in settings.items()}
        record["framework"] = framework
    return record
