"""Expert-parallel communication: the token all-to-alls of each MoE layer.

Every MoE layer dispatches its routed tokens to the experts' ranks and combines the results
back, one all-to-all each per pass (GShard, Lepikhin et al. 2020; Megatron-Core alltoall token
dispatcher), over the ep group. The only module that prices ``batch.moe_dispatcher``'s traffic
(DeepEP / HybridEP node deduplication and FP8 dispatch, the allgather dispatcher) and
``batch.ep_comm_overlap`` (DeepSeek-V3's pairing of micro-batches); the tokens each rank holds
come from ``costmodel.moe``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel import collectives
from costmodel.compute import LayerTimes
from costmodel.context import BF16, ChunkContext
from costmodel.moe import expert_load
from costmodel.placement import group_span


@dataclass(frozen=True, slots=True)
class ExpertParallelComm:
    """EP all-to-all seconds of one MoE layer, one micro-batch."""

    per_pass: np.ndarray
    """Dispatch + combine of one pass."""
    overlap_on: np.ndarray | None
    """Where --ep-comm-overlap pairs micro-batches (None: nowhere in this chunk)."""
    paired_exposed: np.ndarray | None
    """With the pairing, what the forward and backward all-to-alls leave exposed per layer."""


def distinct_nodes(nodes, top_k, group_topk=None):
    """Expected distinct nodes among ``top_k`` experts drawn uniformly over ``nodes`` nodes,
    n(1 - (1 - 1/n)^k), capped at the ``group_topk`` groups of node-limited routing."""
    distinct = nodes * (1.0 - (1.0 - 1.0 / nodes) ** top_k)
    if group_topk:
        distinct = np.minimum(distinct, float(group_topk))
    return distinct


def deepep_traffic_share(ep_nodes, moe):
    """Share of the routed copies DeepEP sends over the network (DeepSeek-V3 report Sec. 3.2.2;
    Megatron --moe-token-dispatcher-type flex): a token crosses once per destination node and
    is forwarded over NVLink there, so distinct nodes / k of its k copies; 1 inside one node."""
    group_topk = moe.router_group_topk if moe.router_groups else None
    distinct = distinct_nodes(ep_nodes.astype(np.float64), moe.top_k, group_topk)
    return np.where(ep_nodes > 1, np.minimum(distinct / moe.top_k, 1.0), 1.0)


FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128.0
"""Bytes per element of an FP8 dispatch: E4M3 values and one FP32 scale per 128 (DeepEP's
low-precision dispatch; DeepSeek-V3 report Sec. 3.3: dispatch in FP8, combine in BF16)."""


def dispatch_bytes_per_element(ctx: ChunkContext):
    """Bytes per hidden element the dispatch moves: FP8 where the layer runs FP8 and the
    dispatcher quantises before sending (deepep, hybridep), else BF16. The combine stays BF16."""
    batch = ctx.batch
    quantised = (batch.is_("moe_dispatcher", "deepep") | batch.is_("moe_dispatcher", "hybridep")) & ctx.fp8
    return np.where(quantised, FP8_DISPATCH_BYTES, BF16)


def all_to_all_per_pass(ctx: ChunkContext):
    """Dispatch + combine seconds of one MoE layer per pass, over the ep group (stride etp
    under MoE parallel folding); the routed copies of this rank's (SP share of) tokens, k each,
    times the busiest rank's share (``costmodel.moe.MoeShape.imbalance``: every rank waits for
    the rank receiving most).

    By dispatcher: alltoall sends every routed copy; deepep and hybridep send one copy per
    destination scale-up domain and forward inside it (``deepep_traffic_share``; HybridEP's
    domain is the NVLink domain, 72 GPUs on an NVL72 rack, so an EP group inside the rack never
    crosses the network); allgather gathers every EP rank's tokens (not k copies: the experts
    pick theirs locally) and reduce-scatters the outputs back (Megatron-Core
    MoEAllGatherTokenDispatcher).

    Under expert tensor parallelism (etp > 1) the alltoall and deepep dispatchers then all-gather
    the received rows over the etp group and reduce-scatter the experts' outputs before the
    combine (Megatron-Core token_dispatcher.py MoEAlltoAllTokenDispatcher: gather_from_sequence_
    parallel_region / reduce_scatter_to_sequence_parallel_region over the expert-TP group):
    ``expert_tp_per_pass``."""
    batch, moe = ctx.batch, ctx.model.moe
    if moe is None or not (np.any(ctx.ep > 1) or np.any(batch.etp > 1)):
        return np.zeros(ctx.n)
    ep_local, ep_nodes = group_span(batch.ep, batch.etp, ctx.domain)
    imbalance = expert_load(batch)
    tokens = ctx.tokens_mb / np.where(ctx.sp, ctx.tp, 1.0)
    routed = tokens * moe.top_k * ctx.h * imbalance
    dedup = batch.is_("moe_dispatcher", "deepep") | batch.is_("moe_dispatcher", "hybridep")
    if dedup.any():
        routed = routed * np.where(dedup, deepep_traffic_share(ep_nodes, moe), 1.0)
    dispatch, _ = collectives.collective_time("all_to_all", routed * dispatch_bytes_per_element(ctx), ep_local,
                                              ep_nodes, ctx.fabric)
    combine, _ = collectives.collective_time("all_to_all", routed * BF16, ep_local, ep_nodes, ctx.fabric)
    a2a = dispatch + combine
    a2a = np.where(ctx.ep > 1, a2a, 0.0)
    allgather = batch.is_("moe_dispatcher", "allgather")
    if allgather.any():
        gathered = tokens * ctx.h * BF16 * ctx.ep
        ag, _ = collectives.collective_time("all_gather", gathered, ep_local, ep_nodes, ctx.fabric)
        rs, _ = collectives.collective_time("reduce_scatter", gathered, ep_local, ep_nodes, ctx.fabric)
        a2a = np.where(allgather, ag + rs, a2a)
    return a2a + np.where(allgather, 0.0, expert_tp_per_pass(ctx, tokens * moe.top_k * ctx.h * imbalance))


def expert_tp_per_pass(ctx: ChunkContext, received):
    """All-gather of the ``received`` routed rows (elements) over the etp group and the
    reduce-scatter of the experts' outputs, one pass (BF16 rows; zero where etp = 1)."""
    etp = ctx.batch.etp.astype(np.float64)
    if not np.any(etp > 1):
        return np.zeros(ctx.n)
    local, nodes = group_span(ctx.batch.etp, 1, ctx.domain)
    gathered = received * BF16 * etp
    ag, _ = collectives.collective_time("all_gather", gathered, local, nodes, ctx.fabric)
    rs, _ = collectives.collective_time("reduce_scatter", gathered, local, nodes, ctx.fabric)
    return np.where(etp > 1, ag + rs, 0.0)


def paired_exposure(one_a2a, moe_layer: LayerTimes, synced=False):
    """Exposed all-to-all seconds per MoE layer when a forward and a backward micro-batch run
    side by side (DeepSeek-V3 report Sec. 3.2.1, Fig. 4; Megatron-Core MoE README, v0.14
    batch-level overlap): backward combine || forward attention, forward dispatch || backward
    MLP, backward dispatch || forward MLP, forward combine || backward attention. A collective
    longer than its partner stays exposed by the difference. "Attention" is all but the MoE
    block; backward splits like forward.

    The pairing has its own cost where the forward syncs the host before its dispatch
    (``costmodel.moe.syncs_host``: the alltoall dispatcher's token counts, TransformerEngine's
    per-expert loop): the device-to-host copy waits for everything queued before it on the
    compute stream, the partner's backward MLP included, so that dispatch cannot run beside it
    and stays exposed."""
    mlp_f = moe_layer.module_forward["moe"]
    attn_f = np.maximum(moe_layer.forward - mlp_f, 0.0)
    mlp_b = moe_layer.backward * mlp_f / np.maximum(moe_layer.forward, 1e-30)
    attn_b = np.maximum(moe_layer.backward - mlp_b, 0.0)
    mlp_b_for_dispatch = np.where(synced, 0.0, mlp_b)
    return sum(np.maximum(one_a2a - partner, 0.0) for partner in (attn_f, mlp_b_for_dispatch, mlp_f, attn_b))


def layer_comm(ctx: ChunkContext, moe_layer: LayerTimes) -> ExpertParallelComm:
    """EP all-to-all time per MoE layer and what the micro-batch pairing leaves of it."""
    per_pass = all_to_all_per_pass(ctx)
    batch = ctx.batch
    if ctx.model.moe is None or not batch.ep_comm_overlap.any():
        return ExpertParallelComm(per_pass, None, None)
    # The pairing needs two micro-batches in different phases at once: interleaved pipelines
    # or none (Megatron-Core requires one of them for --overlap-moe-expert-parallel-comm).
    overlap_on = batch.ep_comm_overlap & ((ctx.vpp > 1) | (ctx.pp == 1))
    from costmodel.moe import syncs_host

    return ExpertParallelComm(per_pass, overlap_on, paired_exposure(per_pass / 2.0, moe_layer, syncs_host(batch)))


def stage_time(comm: ExpertParallelComm, runs, n_moe, comm_sm_fraction):
    """(exposed EP seconds, compute slowed by the hidden ones) of one micro-batch on a stage of
    ``n_moe`` MoE layers whose all-to-alls run ``runs`` times (passes + selective re-runs).

    Paired, the forward and backward all-to-alls hide behind the other micro-batch; a
    recomputed forward's have no partner. Hidden ones still hold SMs (DeepSeek-V3 Sec. 3.2.1
    gives its all-to-all 20 of 132): ``comm_sm_fraction`` of them is added to compute.
    """
    ep = runs * n_moe * comm.per_pass
    if comm.overlap_on is None:
        return ep, None
    exposed = n_moe * comm.paired_exposed + np.maximum(ep - 2.0 * n_moe * comm.per_pass, 0.0)
    hidden = np.where(comm.overlap_on, ep - exposed, 0.0)
    return np.where(comm.overlap_on, exposed, ep), comm_sm_fraction * hidden
