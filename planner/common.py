"""Turning what a user typed into catalog specs and a layout, with one-line errors."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from costmodel.options import GPUS, Layout, resolve_batch
from hardware_catalog.hardware import check_whole_nodes
from hardware_catalog import (
    ClusterSpec,
    GPUSpec,
    ModelSpec,
    PlannerInputError,
    default_cluster_for_gpu,
    get_cluster,
    get_gpu,
    get_model,
)


@dataclass(frozen=True)
class Setup:
    """A resolved job: model, hardware, batch."""

    model: ModelSpec
    gpu: GPUSpec
    cluster: ClusterSpec
    gbs: int
    """Global batch, sequences."""
    seq_len: int
    """Tokens per sequence."""
    batch_origin: str = ""
    """Where gbs came from when the user did not give --gbs (``costmodel.options.Batch``)."""


def resolve_hardware(gpu: Optional[str], cluster: Optional[str]) -> tuple[GPUSpec, ClusterSpec]:
    """``--gpu`` picks the GPU and its default cluster; ``--cluster`` overrides the cluster
    (and must agree with ``--gpu`` when both are given)."""
    if not gpu and not cluster:
        raise PlannerInputError("give --gpu NAME (e.g. h100) or --cluster NAME|FILE")
    if cluster:
        cluster_spec = get_cluster(cluster)
        gpu_spec = get_gpu(cluster_spec.gpu)
        if gpu:
            wanted = get_gpu(gpu)
            if wanted.name != gpu_spec.name:
                raise PlannerInputError(
                    f"--gpu {gpu} disagrees with cluster '{cluster_spec.name}', which has {gpu_spec.name}"
                )
        return gpu_spec, cluster_spec
    gpu_spec = get_gpu(gpu)
    return gpu_spec, default_cluster_for_gpu(gpu_spec.name)


def resolve_setup(
    model: str, gpu: Optional[str], cluster: Optional[str], seq_len=None, gbs=None, tokens_per_batch=None
) -> Setup:
    model_spec = model if isinstance(model, ModelSpec) else get_model(model)  # a spec: a launch file's shape
    gpu_spec, cluster_spec = resolve_hardware(gpu, cluster)
    batch = resolve_batch(model_spec, seq_len, gbs, tokens_per_batch)
    return Setup(model_spec, gpu_spec, cluster_spec, batch.gbs, batch.seq_len, batch.origin)


def build_layout(setup: Setup, gpus: int, typed: frozenset = frozenset(), **values) -> Layout:
    """A Layout from option values as typed (``costmodel.options``; None = the option's
    default), with the setup's batch and dp = gpus / (tp·pp·cp). Each value is checked by its
    option (one line naming the flag); the rules (``search.rules.check_layout``) judge the
    layout as a whole. ``typed``: the options the user typed (a sliding-window model's untyped
    p2p CP becomes what TransformerEngine runs it as)."""
    gpus = GPUS.parse(gpus)
    check_whole_nodes(setup.cluster, gpus)
    values = {k: v for k, v in values.items() if k not in ("gbs", "seq_len", "dp")}
    layout = Layout.from_values(values)
    model_parallel = layout.tp * layout.pp * layout.cp
    dp = max(gpus // model_parallel, 1)  # when it does not divide, the rule degrees_multiply_to_gpus says so
    if setup.model.sliding_window is not None and "cp_comm_type" not in typed:
        # TransformerEngine runs a window under CP only as a2a or allgather: untyped, take the one
        # the search prices (search.rules.windowed_cp_comm_type), not the p2p default it refuses.
        from search.rules import RuleContext, windowed_cp_comm_type_name

        ctx = RuleContext.build(setup.model, gpus, setup.cluster, setup.gpu)
        layout = replace(layout, cp_comm_type=windowed_cp_comm_type_name(ctx, layout.tp, layout.cp, layout.cp_comm_type))
    if "grad_accum_pass" not in typed:
        # Untyped, Megatron's ZeRO-2/3 take the pass they run, as the search prices them
        # (search.rules.sharded_grad_accum_pass), not the fused default the Megatron export refuses there.
        from search.rules import sharded_grad_accum_pass_name

        layout = replace(layout, grad_accum_pass=sharded_grad_accum_pass_name(layout.zero, layout.fsdp,
                                                                              layout.grad_accum_pass))
    return replace(layout, dp=dp, gbs=setup.gbs, seq_len=setup.seq_len)


def planner_version() -> str:
    """The installed planner's version (records and launch-file headers name it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("planner")
    except PackageNotFoundError:
        return "0+unknown"
