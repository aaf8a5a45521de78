"""What several commands share: the planner version, the hardware line of an evaluation, and an
evaluation's 80% interval and envelope flags (evaluate, ``--from-launch``, calibrate).

Imported when the CLI starts: nothing heavy at module level.
"""

from __future__ import annotations


def add_interval_and_envelope(setup, record: dict) -> None:
    """The 80% interval and the validated-envelope flags (``search.ranking.annotate_batch``)."""
    from costmodel.layout import LayoutBatch
    from costmodel.options import RECORDED_OPTIONS, Layout
    from search.ranking import annotate_batch

    lay = Layout(**{o.name: record["layout"][o.name] for o in RECORDED_OPTIONS})
    annotate_batch(record, setup.model, setup.cluster, setup.gpu, LayoutBatch.from_layouts([lay]))


def planner_version() -> str:
    """The installed planner's version (records and launch-file headers name it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("planner")
    except PackageNotFoundError:
        return "0+unknown"


def cluster_line(setup) -> str:
    """The hardware line under evaluate's title: node, scale-up domain, NICs, network."""
    from hardware_catalog import get_interconnect

    c = setup.cluster
    nic = get_interconnect(c.nic)
    return (
        f"{c.gpus_per_node} GPUs/node, {setup.gpu.scaleup_link} {setup.gpu.scaleup_bandwidth_gbps:g} GB/s/dir "
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


def check_framework_use(framework, from_file=None, from_launch=None) -> None:
    """--framework names a release (checked before any work) and goes with --model: a --from
    record keeps the settings it was priced with, a launch file states its own."""
    if framework is None:
        return
    from hardware_catalog.errors import PlannerInputError
    from planner.frameworks import get_release

    get_release(framework)
    if from_file is not None or from_launch is not None:
        raise PlannerInputError(f"--framework goes with --model: {'--from' if from_file is not None else '--from-launch'} "
                                "states its own settings (type the flags to change them)")
