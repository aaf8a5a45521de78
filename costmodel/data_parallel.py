"""Data-parallel and ZeRO 0-3 communication per step: traffic, overlap windows, exposure, and
the compute that hidden collectives slow down.

ZeRO (Rajbhandari et al. 2020) shards optimizer states (stage 1), gradients (2) and weights (3)
over the data-parallel x context-parallel ranks; experts over their own expert-data-parallel
group (Megatron-Core MoE parallel folding). With hybrid sharding (``dp_shard``: HSDP, MiCS,
Megatron's distributed-optimizer instances) over dp_shard x cp ranks only, the shards
all-reduced across the dp / dp_shard replicas. Priced on the stage holding the most parameters.
The only module that reads ``batch.zero3_gather`` (early DeepSpeed's blocking ZeRO-3), ``batch.grad_reduce``,
``batch.fsdp`` (FSDP2's copy-out), ``batch.dp_shard`` and ``batch.nccl_ub``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel import collectives
from costmodel.context import BF16, ChunkContext
from costmodel.memory import OPTIMIZER_BYTES, OPTIMIZER_STATE_BYTES, zero_divisors
from costmodel.placement import group_span
from costmodel.stage_params import HeaviestStage
from costmodel.zero3_blocking import blocking_zero3_time, parameter_tensors_per_layer

# FP32 gradients: Megatron accumulates and reduces main grads in FP32 under BF16 (arguments.py);
# Aleph Alpha's scaling casts each BF16 bucket to FP32 for its all-reduce (grad_reduce all_reduce_fp32).
GRAD_REDUCE_BYTES = 4.0
PARAM_GATHER_BYTES = 2.0  # updated BF16 weights all-gathered after the sharded optimizer step
FP8_PARAM_GATHER_BYTES = 1.0  # the same with FP8 parameters (--fp8-param-gather)
NCCL_UB_NVL_SM_SHARE = 5.0 / 16.0
"""SMs a data-parallel all-gather / reduce-scatter holds with NCCL user buffers (``Layout.nccl_ub``)
inside one NVLink domain, over those it holds without: Megatron-Core
distributed/distributed_data_parallel_config.py (nccl_ub) lists 4 / 5 SMs for AG / RS on NVL
against 16 / 16 on NVL+IB without SHARP, the 16 channels ``Calibration.comm_sm_fraction`` assumes
(16 of an H100's 132 SMs); the reduce-scatter's 5 is taken for both. Across domains (no SHARP
modelled) the share stays 1. The lent H200's contention sweep (``Calibration.comm_sm_fraction``)
found 4 held SMs costing 0.56-0.85 of what 16 cost, not 5/16 (likely a partial extra wave of
kernels sized for every SM). The share stays the SM count's until a run with NCCL user buffers can check it."""
BUCKET_PARAMS = 4e7
"""Parameters per DDP / distributed-optimizer bucket, at least (Megatron-Core DDP bucket_size
default max(40M, 1M x dp); PyTorch DDP's 25 MB buckets are of the same order)."""


@dataclass(frozen=True, slots=True)
class Sharding:
    """How ZeRO shards each layout's model states."""

    zero: np.ndarray
    """ZeRO stage, 0-3."""
    dense_shard: np.ndarray
    """Ranks dense states are sharded over: dp · c, or dp_shard · c with hybrid sharding."""
    replicas: np.ndarray
    """Copies of each shard across data parallel: dp / dp_shard (1 without hybrid sharding)."""
    expert_shard: np.ndarray
    """Ranks expert states are sharded over: the expert-data-parallel size t·c·dp / (ep·etp)."""
    pipelined_fsdp: np.ndarray
    """FSDP2 in torch.distributed.pipelining (torchtitan; DeepSpeed and Megatron have no ZeRO-2/3
    with PP): ZeRO-3 under a pipeline, and ZeRO-2 (fsdp_reshard_after_forward never, torchtitan's
    default under PP) with the fsdp2 implementation. The stage turns off gradient sync and
    resharding after backward until the last micro-batch (stage.py backward_maybe_with_nosync),
    so gradients stay unsharded and are reduce-scattered once a step. Other ZeRO-2 under a
    pipeline keeps its own footprint: optimizer states and gradients sharded, weights not
    resharded after forward, gradients reduce-scattered (in FP32) after every micro-batch into the
    FP32 shard that accumulates them, as Llama 3 405B was trained with PP 16 (Llama 3 paper
    Sec. 3.3.2: FSDP shards the optimizer states and gradients but does not reshard the model
    after forward; Sec. 3.3.4: gradients accumulated and reduce-scattered in FP32)."""
    unreplicated: np.ndarray
    """Neither dense nor expert states have a data-parallel replica: nothing to reduce."""
    grad_bytes: np.ndarray
    """Bytes per gradient element: 4 (FP32 main grads), 2 with BF16 gradient buffers
    (Megatron-Core grad_reduce_in_fp32=False, reduced in BF16 too)."""
    optimizer_bytes: np.ndarray
    """Adam's bytes per owned parameter (``memory.OPTIMIZER_STATE_BYTES`` by ``optimizer_states``)."""
    state_divisors: tuple
    """``memory.zero_divisors`` of the footprint: under a pipeline FSDP2 (``pipelined_fsdp``) keeps
    a stage's gradients (and, after a backward, its weights) unsharded for the whole step, ZeRO-1's."""


def runs_pipelined_fsdp(pp, zero, fsdp2):
    """Whether a layout runs as FSDP2 in torch.distributed.pipelining (``Sharding.pipelined_fsdp``):
    ZeRO-3 under a pipeline, or ZeRO-2 with the fsdp2 implementation under one. Arrays or scalars."""
    zero = np.asarray(zero)
    return (np.asarray(pp) > 1) & ((zero == 3) | ((zero == 2) & np.asarray(fsdp2, dtype=bool)))


def sharding(ctx: ChunkContext) -> Sharding:
    """ZeRO sharding of ``ctx``'s layouts (the only reader of ``batch.zero``, ``grad_dtype`` and
    ``optimizer_states``)."""
    batch = ctx.batch
    zero = batch.zero
    # Hybrid sharding: states sharded over dp_shard consecutive data-parallel ranks, replicated
    # over the dp / dp_shard groups (MiCS, Zhang et al. 2022 Sec. 3; FSDP HYBRID_SHARD).
    shard = np.where(batch.dp_shard > 0, np.minimum(batch.dp_shard, ctx.dp), ctx.dp)
    replicas = ctx.dp / shard
    dense_shard = shard * ctx.cp
    expert_shard = np.maximum(ctx.tp * ctx.cp * ctx.dp / (ctx.ep * ctx.etp) / replicas, 1.0)
    pipelined_fsdp = runs_pipelined_fsdp(ctx.pp, zero, batch.is_("fsdp", "fsdp2"))
    return Sharding(
        zero=zero,
        dense_shard=dense_shard,
        replicas=replicas,
        expert_shard=expert_shard,
        pipelined_fsdp=pipelined_fsdp,
        unreplicated=(dense_shard == 1) & (expert_shard <= 1),
        grad_bytes=np.where(batch.is_("grad_dtype", "bf16"), BF16, GRAD_REDUCE_BYTES),
        optimizer_bytes=np.select([batch.is_("optimizer_states", k) for k in OPTIMIZER_STATE_BYTES],
                                  list(OPTIMIZER_STATE_BYTES.values()), OPTIMIZER_BYTES),
        state_divisors=zero_divisors(np.where(pipelined_fsdp, 1, zero), dense_shard, expert_shard),
    )


@dataclass(frozen=True, slots=True)
class Traffic:
    """Seconds of each data-parallel collective over the heaviest stage's parameters."""

    grad_all_reduce: np.ndarray
    """Gradient all-reduce (ZeRO-0)."""
    grad_reduce_scatter: np.ndarray
    """Gradient reduction of ZeRO >= 1: a reduce-scatter, or under ZeRO-1 the all-reduce ``grad_reduce``
    names."""
    param_all_gather: np.ndarray
    """All-gather of the BF16 weights (updated shards for ZeRO-1/2, every use for ZeRO-3)."""
    grad_replica_all_reduce: np.ndarray
    """Hybrid sharding: the all-reduce of each reduce-scattered gradient shard across the
    replicas, once a step (0 without replicas)."""
    algorithm: np.ndarray
    """Algorithm code of the gradient all-reduce (``collectives.ALGORITHMS``)."""
    dp_local: np.ndarray
    """Data-parallel ranks per scale-up domain."""
    dp_nodes: np.ndarray
    """Domains the data-parallel group spans."""


def traffic(ctx: ChunkContext, sh: Sharding, heavy: HeaviestStage) -> Traffic:
    """The collectives of one step, each split into the pieces that go out separately: ZeRO-3
    / FSDP one layer (FSDP unit) at a time, DDP and the distributed optimizer per bucket of
    max(40M, 1M x dp) parameters; every piece pays the collective's latency."""
    batch = ctx.batch
    # Data-parallel ranks stride t (order tp-cp-ep-dp-pp, cp folded in); experts stride ep·etp.
    # ZeRO's collectives run over the sharding group: with hybrid sharding, dp_shard consecutive
    # data-parallel ranks (torchtitan's [replicate, shard] mesh), the replicas stride t·c·dp_shard.
    shard_ranks = sh.dense_shard.astype(np.int64)
    dp_local, dp_nodes = group_span(shard_ranks, batch.tp, ctx.domain)
    edp_local, edp_nodes = group_span(np.maximum(sh.expert_shard.astype(np.int64), 1), batch.ep * batch.etp, ctx.domain)
    bucket_params = np.maximum(BUCKET_PARAMS, 1e6 * sh.dense_shard)
    pieces = np.where(
        sh.zero == 3,
        np.maximum(heavy.layers, 1.0),
        np.maximum(np.ceil((heavy.dense + heavy.expert) / bucket_params), 1.0),
    )

    def per_step(op, bytes_per_param):
        dense_bytes = bytes_per_param * heavy.dense / pieces
        t_dense, algo = collectives.collective_time(op, dense_bytes, dp_local, dp_nodes, ctx.fabric)
        t_exp = 0.0
        if ctx.model.moe is not None:
            expert_bytes = bytes_per_param * heavy.expert / pieces
            t_exp, _ = collectives.collective_time(op, expert_bytes, edp_local, edp_nodes, ctx.fabric)
        return pieces * (t_dense + t_exp), algo

    grad_ar, algo = per_step("all_reduce", sh.grad_bytes)
    grad_rs, _ = per_step("reduce_scatter", sh.grad_bytes)
    # ZeRO-1 engines that all-reduce the whole gradient and then step their shard (grad_reduce:
    # DeepSpeed's BF16_Optimizer, runtime/pipe/engine.py _bf16_reduce_grads; Aleph Alpha's scaling in
    # FP32, allreduce.py allreduce_tensor_in_float32): twice a reduce-scatter's bytes, or more.
    batch = ctx.batch
    all_reduce = (sh.zero == 1) & batch.is_("grad_reduce", "all_reduce")
    all_reduce_fp32 = (sh.zero == 1) & batch.is_("grad_reduce", "all_reduce_fp32")
    if all_reduce.any():
        grad_rs = np.where(all_reduce, grad_ar, grad_rs)
    if all_reduce_fp32.any():
        grad_ar_fp32, _ = per_step("all_reduce", GRAD_REDUCE_BYTES)
        grad_rs = np.where(all_reduce_fp32, grad_ar_fp32, grad_rs)
    # FP8 parameters (fp8_param_gather) are all-gathered as their row-wise FP8 data, 1 byte each
    # (Megatron-Core distributed/param_and_grad_buffer.py keeps them in a uint8 buffer; the
    # BF16 embedding and head, gathered at 2 bytes, are counted at 1 with them).
    fp8_params = ctx.batch.is_("precision", "fp8") & np.asarray(ctx.batch.fp8_param_gather, dtype=bool)
    param_ag, _ = per_step("all_gather", np.where(fp8_params, FP8_PARAM_GATHER_BYTES, PARAM_GATHER_BYTES))
    replica_ar = replica_all_reduce(ctx, sh, heavy, pieces)
    return Traffic(grad_ar, grad_rs, param_ag, replica_ar, algo, dp_local, dp_nodes)


def replica_all_reduce(ctx: ChunkContext, sh: Sharding, heavy: HeaviestStage, pieces):
    """Seconds of the hybrid-sharding all-reduce: each rank's gradient shard (dense params /
    dense_shard + expert params / expert_shard, per piece) across the dp / dp_shard replicas,
    after the reduce-scatter inside the shard group (Megatron-Core param_and_grad_buffer.py:
    reduce-scatter within a distributed-optimizer instance, then all-reduce across instances;
    FSDP HYBRID_SHARD the same)."""
    if not np.any(sh.replicas > 1):
        return np.zeros(ctx.n)
    batch = ctx.batch
    rep_local, rep_nodes = group_span(sh.replicas.astype(np.int64), batch.tp * sh.dense_shard.astype(np.int64),
                                      ctx.domain)
    shard_bytes = sh.grad_bytes * (heavy.dense / sh.dense_shard + heavy.expert / sh.expert_shard) / pieces
    t, _ = collectives.collective_time("all_reduce", shard_bytes, rep_local, rep_nodes, ctx.fabric)
    # A shard group smaller than the experts' (dp_shard < ep·etp / tp·cp) leaves each expert whole on
    # its expert-data-parallel ranks: their gradients are all-reduced over that group (size
    # t·c·dp / (ep·etp), stride ep·etp), not over the dense replicas.
    edp = ctx.tp * ctx.cp * ctx.dp / (ctx.ep * ctx.etp)
    expert_replicas = edp / sh.expert_shard
    apart = (heavy.expert > 0) & (expert_replicas < sh.replicas)
    if np.any(apart):
        dense_bytes = sh.grad_bytes * heavy.dense / sh.dense_shard / pieces
        dense_t, _ = collectives.collective_time("all_reduce", dense_bytes, rep_local, rep_nodes, ctx.fabric)
        e_local, e_nodes = group_span(np.maximum(expert_replicas, 1.0).astype(np.int64),
                                      (batch.ep * batch.etp * sh.expert_shard).astype(np.int64), ctx.domain)
        expert_bytes = sh.grad_bytes * heavy.expert / sh.expert_shard / pieces
        expert_t, _ = collectives.collective_time("all_reduce", expert_bytes, e_local, e_nodes, ctx.fabric)
        t = np.where(apart, dense_t + np.where(expert_replicas > 1, expert_t, 0.0), t)
    return np.where(sh.replicas > 1, pieces * t, 0.0)


def overlap_windows(ctx: ChunkContext, stage_compute):
    """(forward, backward) compute one micro-batch offers to hide DP collectives behind: the
    backward (2/3 of its compute) for gradient reduction, the forward (1/3) for the parameter
    all-gather, times the achievable fraction ``dp_overlap``; none where the layout runs
    without data-parallel overlap (``dp_comm_overlap`` off: the collectives run after backward,
    Megatron's DDP without --overlap-grad-reduce)."""
    window_bwd = ctx.calib.dp_overlap * stage_compute * (2.0 / 3.0)
    window_fwd = ctx.calib.dp_overlap * stage_compute * (1.0 / 3.0)
    overlap = ctx.batch.dp_comm_overlap
    if not overlap.all():
        window_bwd = np.where(overlap, window_bwd, 0.0)
        window_fwd = np.where(overlap, window_fwd, 0.0)
    return window_fwd, window_bwd


def reduce_scatters_per_step(sh: Sharding, m):
    """ZeRO-2 keeps only a shard of the gradients, so it reduce-scatters after every
    micro-batch's backward (DeepSpeed stage 2 IPG buckets; FSDP SHARD_GRAD_OP without no_sync;
    Llama 3's FSDP under PP 16), ZeRO-1 and FSDP2 under pipelining (``pipelined_fsdp``) once a step."""
    return np.where((sh.zero == 2) & ~sh.pipelined_fsdp, m, 1.0)


def replicated_exposure(sh: Sharding, tr: Traffic, windows, rs_count):
    """Exposed seconds of ZeRO 0-2. ZeRO-0: the all-reduce beyond the last micro-batch's
    backward (PyTorch DDP buckets, Li et al. 2020; Megatron --overlap-grad-reduce). ZeRO-1/2:
    the reduce-scatter there, and the all-gather of updated weights beyond the next step's
    first forward (--overlap-param-gather)."""
    window_fwd, window_bwd = windows
    rs, ar = tr.grad_reduce_scatter, tr.grad_replica_all_reduce
    return np.where(
        sh.zero == 0,
        np.maximum(tr.grad_all_reduce - window_bwd, 0.0),
        (rs_count - 1.0) * np.maximum(rs - window_bwd, 0.0) + np.maximum(rs + ar - window_bwd, 0.0)
        + np.maximum(tr.param_all_gather - window_fwd, 0.0),
    )


def zero3_exposure(ctx: ChunkContext, sh: Sharding, tr: Traffic, windows, heavy: HeaviestStage):
    """Exposed seconds of ZeRO-3 / FSDP per step, and whether it ran pipelined."""
    window_fwd, window_bwd = windows
    ag, rs, m = tr.param_all_gather, tr.grad_reduce_scatter, ctx.m
    ar = tr.grad_replica_all_reduce  # hybrid sharding: once a step, in the last backward
    # Every micro-batch gathers weights for forward and again for backward and reduce-scatters
    # gradients (Rajbhandari et al. 2020 Sec. 5.3; FSDP2 default), hidden behind its compute.
    z3 = (np.maximum(ag - window_fwd, 0.0) * m + np.maximum(ag + rs - window_bwd, 0.0) * (m - 1.0)
          + np.maximum(ag + rs + ar - window_bwd, 0.0))
    # Under a pipeline (the export's reshard_after_forward=always): gathered for the step's first
    # forward, freed after each forward and gathered again for its backward (which keeps them),
    # gradients reduce-scattered once a step.
    pipelined = sh.pipelined_fsdp & (sh.zero == 3)
    z3 = np.where(
        pipelined,
        np.maximum(ag - window_fwd, 0.0) + m * np.maximum(ag - window_bwd, 0.0) + np.maximum(rs + ar - window_bwd, 0.0),
        z3,
    )
    # FSDP1 BackwardPrefetch.BACKWARD_POST (torch/distributed/fsdp/api.py: "prefetches the next set of
    # parameters after the current set of parameters' gradient computation"; Composer FSDPConfig's
    # default): the backward gathers run between units, beside the reduce-scatters and no compute,
    # one per FSDP unit (a layer), each paying the ring's latency; the reduce-scatters stay hidden.
    post = (sh.zero == 3) & ctx.batch.is_("zero3_gather", "post")
    if post.any():
        latency, _ = collectives.collective_time("all_gather", 0.0, tr.dp_local, tr.dp_nodes, ctx.fabric)
        backward_gathers = ag + np.maximum(heavy.layers - 1.0, 0.0) * latency
        z3_post = (np.maximum(ag - window_fwd, 0.0) * m + backward_gathers * m
                   + np.maximum(rs - window_bwd, 0.0) * (m - 1.0) + np.maximum(rs + ar - window_bwd, 0.0))
        z3 = np.where(post & ~pipelined, z3_post, z3)
    # Early DeepSpeed ZeRO-3 (2021): per-tensor gathers behind torch.cuda.synchronize(), nothing
    # hidden (costmodel.zero3_blocking). Its MoE-less design: expert weights counted with the rest.
    blocking = (sh.zero == 3) & ctx.batch.is_("zero3_gather", "blocking")
    if blocking.any():
        calib = ctx.calib
        z3_blocking = blocking_zero3_time(
            heavy.dense + heavy.expert, heavy.layers, m, ctx.full,
            PARAM_GATHER_BYTES, sh.grad_bytes, tr.dp_local, tr.dp_nodes, ctx.fabric, calib.kernel_overhead_us * 1e-6,
            ctx.gpu.memory_bandwidth_gbps * 1e9 * calib.memory_bound_efficiency, parameter_tensors_per_layer(ctx.model),
        )
        z3 = np.where(blocking, z3_blocking, z3)
    return z3, pipelined


def fsdp2_copy_out(ctx: ChunkContext, sh: Sharding, heavy: HeaviestStage, pipelined):
    """Seconds a step spends in FSDP2's all-gather copy-out: FSDP2 shards every parameter on dim 0
    (DTensor), so each unit's all-gather lands in one flat buffer that foreach_all_gather_copy_out
    splits into the parameters, on the compute stream before the unit runs (torch/distributed/
    fsdp/_fully_shard/_fsdp_collectives.py): read + write the unit's BF16 weights, 4 bytes a
    parameter, per gather. FSDP1 / DeepSpeed and Megatron-FSDP gather into the buffer the
    parameters view: nothing to copy. (The reduce-scatter's copy-in, torch._chunk_cat, runs on
    the reduce-scatter stream, hidden.)"""
    fsdp2 = (sh.zero == 3) & ctx.batch.is_("fsdp", "fsdp2")
    if not fsdp2.any():
        return np.zeros(ctx.n)
    bandwidth = ctx.gpu.memory_bandwidth_gbps * 1e9 * ctx.calib.memory_bound_efficiency
    per_gather = 2.0 * PARAM_GATHER_BYTES * (heavy.dense + heavy.expert) / bandwidth
    gathers = np.where(pipelined, 1.0 + ctx.m, 2.0 * ctx.m)  # as zero3_exposure's all-gathers
    return np.where(fsdp2, gathers * per_gather, 0.0)


@dataclass(frozen=True, slots=True)
class DataParallelComm:
    """Data-parallel communication per step, seconds."""

    terms: dict
    """Exposed time terms: "dp_comm" (ZeRO 0-2) and "zero3_comm" (ZeRO-3 / FSDP)."""
    hidden: np.ndarray
    """Traffic hidden behind compute (reported as overlapped)."""
    contention: np.ndarray
    """Compute slowed by the hidden traffic: NCCL runs one thread block per channel on the SMs
    (NCCL_MIN/MAX_NCHANNELS; 16-32 channels for rings over several NICs), so compute beside a
    collective runs on fewer SMs (the cost DeepSeek-V3 Sec. 3.2.1 limits by giving its
    all-to-all 20 of 132 SMs): ``comm_sm_fraction`` of the hidden seconds."""
    algorithm: np.ndarray
    """Algorithm code of the gradient all-reduce."""


def data_parallel_comm(ctx: ChunkContext, sh: Sharding, heavy: HeaviestStage, stage_compute) -> DataParallelComm:
    """Exposed and hidden DP / ZeRO traffic of the heaviest stage; ``stage_compute``: compute
    seconds of one micro-batch on the slowest stage (the overlap window)."""
    tr = traffic(ctx, sh, heavy)
    windows = overlap_windows(ctx, stage_compute)
    rs_count = reduce_scatters_per_step(sh, ctx.m)
    z3, z3_pipelined = zero3_exposure(ctx, sh, tr, windows, heavy)
    is_z3 = sh.zero == 3
    zero3_exposed = np.where(sh.unreplicated, 0.0, np.where(is_z3, z3, 0.0))
    dp_exposed = np.where(sh.unreplicated, 0.0, np.where(is_z3, 0.0, replicated_exposure(sh, tr, windows, rs_count)))
    ag, rs, m, ar = tr.param_all_gather, tr.grad_reduce_scatter, ctx.m, tr.grad_replica_all_reduce
    dp_hidden = np.where(sh.zero == 0, tr.grad_all_reduce, rs_count * rs + ar + ag) - dp_exposed
    dp_hidden = np.where(is_z3 | sh.unreplicated, 0.0, dp_hidden)
    z3_traffic = np.where(z3_pipelined, (1.0 + m) * ag + rs, (2.0 * ag + rs) * m) + ar
    z3_hidden = np.where(is_z3, np.maximum(z3_traffic - zero3_exposed, 0.0), 0.0)
    z3_hidden = np.where(sh.unreplicated, 0.0, z3_hidden)
    # FSDP2's copy-out runs on the compute stream: exposed, and it hides nothing.
    zero3_exposed = zero3_exposed + np.where(sh.unreplicated, 0.0, fsdp2_copy_out(ctx, sh, heavy, z3_pipelined))
    # NCCL user buffers: SM-light collectives, where the whole sharding group sits in one NVLink domain.
    sm_share = np.where(ctx.batch.nccl_ub & (tr.dp_nodes <= 1) & (sh.replicas <= 1), NCCL_UB_NVL_SM_SHARE, 1.0)
    return DataParallelComm(
        terms={"dp_comm": dp_exposed, "zero3_comm": zero3_exposed},
        hidden=dp_hidden + z3_hidden,
        contention=ctx.calib.comm_sm_fraction * sm_share * np.maximum(dp_hidden + z3_hidden, 0.0),
        algorithm=tr.algorithm,
    )
