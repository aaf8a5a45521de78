"""Turning what a user typed into catalog specs and a layout, with one-line errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from costmodel.layout import PRECISIONS, RECOMPUTE, Layout, check_implementation, parse_recompute_modules
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


def positive(name: str, value: Optional[int]) -> None:
    if value is not None and value <= 0:
        raise PlannerInputError(f"{name}={value}: must be a positive integer")


def resolve_batch(
    model: ModelSpec, seq_len: Optional[int], gbs: Optional[int], tokens_per_batch: Optional[int]
) -> tuple[int, int]:
    """(gbs sequences, seq_len) from --gbs / --tokens-per-batch / the model preset's defaults."""
    positive("--seq-len", seq_len)
    positive("--gbs", gbs)
    positive("--tokens-per-batch", tokens_per_batch)
    seq = seq_len or model.default_seq_len
    if gbs and tokens_per_batch:
        raise PlannerInputError("give --gbs or --tokens-per-batch, not both")
    if gbs:
        return gbs, seq
    tokens = tokens_per_batch or model.default_tokens_per_batch
    if tokens < seq:
        raise PlannerInputError(f"--tokens-per-batch={tokens} is smaller than one sequence (--seq-len={seq})")
    return max(tokens // seq, 1), seq


def resolve_setup(
    model: str, gpu: Optional[str], cluster: Optional[str], seq_len=None, gbs=None, tokens_per_batch=None
) -> Setup:
    model_spec = get_model(model)
    gpu_spec, cluster_spec = resolve_hardware(gpu, cluster)
    g, s = resolve_batch(model_spec, seq_len, gbs, tokens_per_batch)
    return Setup(model_spec, gpu_spec, cluster_spec, g, s)


def build_layout(
    setup: Setup,
    gpus: int,
    *,
    tp: int = 1,
    pp: int = 1,
    cp: int = 1,
    ep: int = 1,
    etp: int = 1,
    vpp: int = 1,
    zero: int = 1,
    mbs: int = 1,
    recompute: str = "selective",
    precision: str = "bf16",
    sequence_parallel: Optional[bool] = None,
    pp_first_layers: Optional[int] = None,
    pp_last_layers: Optional[int] = None,
    recompute_layers: Optional[int] = None,
    implementation: Optional[dict] = None,
    recompute_modules: Optional[str] = None,
) -> Layout:
    """A Layout with dp = gpus / (tp·pp·cp); rejects values that cannot form a layout at all."""
    for name, value in (
        ("--gpus", gpus), ("--tp", tp), ("--pp", pp), ("--cp", cp), ("--ep", ep), ("--etp", etp),
        ("--vpp", vpp), ("--mbs", mbs), ("--pp-first-layers", pp_first_layers),
        ("--pp-last-layers", pp_last_layers),
    ):
        positive(name, value)
    if zero not in (0, 1, 2, 3):
        raise PlannerInputError(f"--zero={zero}: allowed 0, 1, 2, 3")
    if recompute not in RECOMPUTE:
        raise PlannerInputError(f"--recompute={recompute}: allowed {', '.join(RECOMPUTE)}")
    if recompute_layers is not None and recompute != "full":
        raise PlannerInputError(f"--recompute-layers={recompute_layers} applies only with --recompute full (got {recompute})")
    if recompute_layers is not None and recompute_layers < 1:
        raise PlannerInputError(f"--recompute-layers={recompute_layers}: must be a positive number of layers per stage")
    if recompute_modules is not None and recompute != "selective":
        raise PlannerInputError(f"--recompute-modules={recompute_modules} applies only with --recompute selective (got {recompute})")
    modules = parse_recompute_modules(recompute_modules)
    if precision not in PRECISIONS:
        raise PlannerInputError(f"--precision={precision}: allowed {', '.join(PRECISIONS)}")
    model_parallel = tp * pp * cp
    if gpus % model_parallel:
        raise PlannerInputError(
            f"--gpus={gpus} is not divisible by tp*pp*cp = {tp}*{pp}*{cp} = {model_parallel}; "
            "dp = gpus / (tp*pp*cp) must be a whole number"
        )
    impl = check_implementation(implementation or {})
    sp_on = tp > 1 and sequence_parallel is not False
    if impl.get("tp_comm_overlap") and not sp_on:
        raise PlannerInputError(
            "--tp-comm-overlap needs tp > 1 and sequence parallelism (Megatron asserts it; "
            f"got tp={tp}, sequence_parallel={'on' if sp_on else 'off'})"
        )
    if impl.get("ep_comm_overlap") and pp > 1 and vpp == 1:
        raise PlannerInputError(
            f"--ep-comm-overlap needs an interleaved pipeline (vpp > 1) or pp = 1 (Megatron-Core's "
            f"batch-level overlap pairs chunks of the interleaved schedule; got pp={pp}, vpp={vpp})"
        )
    return Layout(
        **impl,
        tp=tp, pp=pp, dp=gpus // model_parallel, cp=cp, ep=ep, etp=etp, vpp=vpp, zero=zero, mbs=mbs,
        gbs=setup.gbs, seq_len=setup.seq_len, recompute=recompute, sequence_parallel=sequence_parallel,
        precision=precision, pp_first_layers=pp_first_layers, pp_last_layers=pp_last_layers,
        recompute_layers=recompute_layers, recompute_modules=modules,
    )
