"""Tensor-parallel communication of one layer, and what --tp-comm-overlap hides of it.

Megatron TP (Shoeybi et al. 2019, Fig. 4) runs one collective pair per block (attention, MLP)
per pass: an all-reduce, or with sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2)
an all-gather before the block and a reduce-scatter after it, over the tp ranks of the
micro-batch's activations. The only module that reads ``batch.tp_comm_overlap`` and
``batch.tp_overlap_kind`` and ``batch.tp_overlap_rs_ring``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from costmodel import collectives, ssm
from costmodel.compute import LayerTimes
from costmodel.context import ChunkContext
from costmodel.placement import group_span

TP_OVERLAP_SM_MARGIN = (24.0 / (132.0 - 24.0), 16.0 / (132.0 - 16.0))
"""Extra time of a GEMM that runs beside a pipelined reduce-scatter holding n of the GPU's SMs:
n / (SMs - n), for the attention output projection (24 of 132 H100 SMs) and the MLP down
projection (16 of 132) in NeMo's userbuffers configs."""
TP_OVERLAP_RING_SM_MARGIN = 1.0 / (132.0 - 1.0)
"""The same for a reduce-scatter run as ring exchange on one SM (``Layout.tp_overlap_rs_ring``:
TransformerEngine RingExchangeOverlapCfg(num_sm=1, set_sm_margin=True), e.g. Megatron-Bridge's
userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192): 1 of 132 H100 SMs."""


@dataclass(frozen=True, slots=True)
class TensorParallelComm:
    """Exposed TP communication of one layer, one micro-batch, one pass, seconds."""

    dense: np.ndarray
    """Per dense layer and forward pass (a recomputed forward too): two collective pairs
    (attention and MLP), or what overlap leaves."""
    moe: np.ndarray
    """Per MoE layer and forward pass: the attention pair, plus the shared experts' pair where
    there are any (routed experts use EP, not TP)."""
    dense_layer: LayerTimes
    """The dense layer's times, its forward slowed by the SMs overlapped reduce-scatters hold."""
    moe_layer: LayerTimes
    """The same for the MoE layer."""
    dense_backward: np.ndarray | None = None
    """Per dense layer in the backward pass, where it differs from ``dense`` (AsyncTP)."""
    moe_backward: np.ndarray | None = None
    """The same for the MoE layer."""


def collective_pair(ctx: ChunkContext):
    """(pair, all-gather, all-reduce) seconds of one block's TP collectives per pass: AG + RS
    under SP, else one all-reduce (Korthikanti Sec. 4.2.2: the same bytes either way). The
    single collectives are None when no layout has tp > 1."""
    if not np.any(ctx.tp > 1):
        return np.zeros(ctx.n), None, None
    tp_local, tp_nodes = group_span(ctx.batch.tp, 1, ctx.domain)
    ag, _ = collectives.collective_time("all_gather", ctx.act_bytes, tp_local, tp_nodes, ctx.fabric)
    rs, _ = collectives.collective_time("reduce_scatter", ctx.act_bytes, tp_local, tp_nodes, ctx.fabric)
    ar, _ = collectives.collective_time("all_reduce", ctx.act_bytes, tp_local, tp_nodes, ctx.fabric)
    return np.where(ctx.sp, ag + rs, ar), ag, ar


def overlapped_exposure(one, tp, gemms):
    """What --tp-comm-overlap leaves exposed of collectives ``one`` each beside one of ``gemms``.

    TransformerEngine userbuffers (Megatron-Core "Communication overlap" docs): each all-gather
    is split into tp chunks pipelined with the GEMM it feeds, each reduce-scatter with the GEMM
    producing it; backward pairs them with dgrad/wgrad GEMMs of the same size. Exposed is the
    part longer than its GEMM, and at least the one chunk (1/tp) with nothing to overlap with.
    """
    return sum(np.maximum(one - gemm, one / tp) for gemm in gemms)


def ring_reduce_seconds(ctx: ChunkContext):
    """Seconds of the kernel that sums a ring-exchange reduce-scatter's chunks after its GEMM:
    TransformerEngine CommOverlapP2PBase::split_overlap_rs ends with reduce_bf16 on the main
    stream, reading the tp chunks of [s/c, b, h] / tp (the whole activation, ``act_bytes``) and
    writing one, HBM-bound."""
    hbm = ctx.gpu_clocked.memory_bandwidth_gbps * 1e9 * ctx.calib.memory_bound_efficiency
    return ctx.act_bytes * (1.0 + 1.0 / ctx.tp) / hbm


def sm_margin_cost(overlap_on, layer: LayerTimes, ring=False, ring_reduce=0.0):
    """Forward seconds the GEMMs beside overlapped reduce-scatters lose to the SMs those hold.

    TE's "pipeline" reduce-scatters run communication kernels on SMs the GEMM then lacks
    (set_sm_margin): NeMo's tuned H100 configs reserve 24 of 132 SMs beside the attention output
    projection and 16 beside the MLP down projection (NeMo recipes/tp_overlap_configs/
    userbuffers.py); the all-gathers use copy-engine ring exchange and cost no SMs. ``ring``
    (``Layout.tp_overlap_rs_ring``): both reduce-scatters as ring exchange, 1 SM held, plus the
    summing kernel after each (``ring_reduce`` seconds, ``ring_reduce_seconds``).
    """
    _, out_proj, _, mlp_down = layer.tp_neighbour_gemms
    pipeline = out_proj * TP_OVERLAP_SM_MARGIN[0] + mlp_down * TP_OVERLAP_SM_MARGIN[1]
    # One summing kernel per reduce-scatter: the MLP's only where it runs under TP (a MoE layer's
    # routed experts use EP: their slot holds a zero GEMM without shared experts).
    reduce_scatters = 1.0 + (np.asarray(mlp_down) > 0)
    ring_cost = (out_proj + mlp_down) * TP_OVERLAP_RING_SM_MARGIN + reduce_scatters * ring_reduce
    return np.where(overlap_on, np.where(ring, ring_cost, pipeline), 0.0)


def layer_comm(ctx: ChunkContext, dense: LayerTimes, moe: LayerTimes) -> TensorParallelComm:
    """Exposed TP communication per layer and pass, with --tp-comm-overlap where it runs."""
    pair, ag, ar = collective_pair(ctx)
    # Pairs per layer: 2 in attention + MLP, 1 in a hybrid model's pattern layer (costmodel.ssm).
    pairs = ssm.collectives_per_layer(ctx.model)
    tp_dense = pairs * pair
    moe_model = ctx.model.moe is not None
    tp_moe = (2.0 if ctx.shared_experts else 1.0) * pair if moe_model else tp_dense
    exposed_dense, exposed_moe = tp_dense, tp_moe
    # Userbuffers overlap needs SP (its all-gather / reduce-scatter split) and tp > 1.
    overlap_on = ctx.batch.tp_comm_overlap & ctx.sp & (ctx.tp > 1)
    if overlap_on.any():
        one = np.where(ctx.sp, ag, ar)  # one collective (AG ~ RS in time)
        tp_dense = np.where(overlap_on, overlapped_exposure(one, ctx.tp, dense.tp_neighbour_gemms[: int(2 * pairs)]), tp_dense)
        ring = ctx.batch.tp_overlap_rs_ring & ~ctx.batch.is_("tp_overlap_kind", "asynctp")
        ring_reduce = ring_reduce_seconds(ctx)
        dense = replace(dense, forward=dense.forward + sm_margin_cost(overlap_on, dense, ring, ring_reduce))
        if moe_model:
            # Without shared experts only the attention pair runs under TP.
            gemms = moe.tp_neighbour_gemms if ctx.shared_experts else moe.tp_neighbour_gemms[:2]
            tp_moe = np.where(overlap_on, overlapped_exposure(one, ctx.tp, gemms), tp_moe)
            moe = replace(moe, forward=moe.forward + sm_margin_cost(overlap_on, moe, ring, ring_reduce))
    asynctp = overlap_on & ctx.batch.is_("tp_overlap_kind", "asynctp")
    if asynctp.any():
        return TensorParallelComm(tp_dense, tp_moe, dense, moe, *async_tp_backward(asynctp, exposed_dense, exposed_moe,
                                                                                     tp_dense, tp_moe))
    return TensorParallelComm(tp_dense, tp_moe, dense, moe)


def async_tp_backward(asynctp, unhidden_dense, unhidden_moe, overlapped_dense, overlapped_moe):
    """Backward-pass TP seconds per layer under PyTorch AsyncTP: the collectives unhidden.

    Evidence (PyTorch dev-discuss, "Introducing Async Tensor Parallelism in PyTorch", torchtitan
    on H100): up to ~29% faster forward passes but ~8% end to end in Llama 3 8B and 70B. With
    backward about two thirds of a step, a 29% faster forward is 0.29/1.29 x 1/3 = 7.5% of the
    step, the whole end-to-end gain: the backward collectives stay exposed. torch.compile
    recomputes an activation-checkpointed forward inside the backward graph with the same
    fused all-gather + matmul ops, so a recomputed forward keeps the forward's overlap."""
    return (np.where(asynctp, unhidden_dense, overlapped_dense),
            np.where(asynctp, unhidden_moe, overlapped_moe))


def stage_time(comm: TensorParallelComm, passes, n_dense, n_moe):
    """Exposed TP seconds of one micro-batch on a stage of ``n_dense`` dense and ``n_moe`` MoE
    layers, each running ``passes`` passes (forward, backward, a recomputed forward)."""
    if comm.dense_backward is None:
        return passes * (n_dense * comm.dense + n_moe * comm.moe)
    forward = (passes - 1.0) * (n_dense * comm.dense + n_moe * comm.moe)
    return forward + n_dense * comm.dense_backward + n_moe * comm.moe_backward
