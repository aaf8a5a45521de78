"""Context-parallel communication left exposed, by ``cp_comm_type`` (Megatron --cp-comm-type).

p2p (Megatron's default) runs ring attention (Liu et al. 2023, "Ring Attention with Blockwise
Transformers"; TransformerEngine AttnFuncWithCPAndKVP2P): each of the cp ranks holds s/c of the
sequence and passes its K/V chunk around the ring in c - 1 steps, each overlapped with the
attention of one chunk. A step longer than that chunk's attention stays exposed. a2a
(DeepSpeed-Ulysses, Jacobs et al. 2023; AttnFuncWithCPAndQKVOA2A) all-to-alls Q, K, V from a
sequence split to a head split before attention and O back after it; allgather
(AttnFuncWithCPAndKVAllGather) gathers every rank's K/V before attention and reduce-scatters
dK/dV after its backward; a2a+p2p runs a2a inside the scale-up domain and the ring across
domains (TransformerEngine PR #1209, LongVILA / USP). The last three leave their collectives
exposed. The length each attention kernel sees follows the type (``attention_kernel_length``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel import collectives, ssm, ssm_layer
from costmodel.compute import LayerTimes
from costmodel.context import BF16, ChunkContext
from costmodel.placement import cp_a2a_ranks, group_span

BACKWARD_ATTENTION_FACTOR = 2.5
"""Attention backward over forward time that a backward ring step hides behind: FlashAttention
recomputes the scores, 5 matmuls against 2 (Dao 2023, Sec. 3.1)."""


@dataclass(frozen=True, slots=True)
class ContextParallelComm:
    """Exposed ring-attention seconds of one layer, one micro-batch."""

    dense_forward: np.ndarray
    """Per dense layer, forward pass (and each recomputed forward)."""
    dense_backward: np.ndarray
    """Per dense layer, backward pass."""
    moe_forward: np.ndarray
    """Per MoE layer, forward pass."""
    moe_backward: np.ndarray
    """Per MoE layer, backward pass."""


def kv_bytes(ctx: ChunkContext):
    """Bytes of the K/V chunk one ring step sends: the micro-batch's tokens on this rank times
    K and V for this rank's heads (KV heads replicated when tp > g, as Megatron allows); MLA
    sends its up-projected per-head K (nope + rope) and V."""
    model = ctx.model
    kv_heads_per_rank = np.maximum(model.kv_heads / ctx.tp, 1.0)
    if model.mla is not None:
        mla = model.mla
        kv_width = model.num_attention_heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim) / ctx.tp
    else:
        kv_width = 2.0 * kv_heads_per_rank * model.head_size
    return ctx.tokens_mb * kv_width * BF16


def ring_exposed(steps, kv_step, kv_step_bwd, attention_forward, cp):
    """(forward, backward) exposed seconds of ``steps`` ring steps, each hidden behind the
    attention of one of the cp chunks (forward) or its backward (2.5x, K,V and dK,dV sent)."""
    chunk = attention_forward / cp
    fwd = steps * np.maximum(kv_step - chunk, 0.0)
    bwd = steps * np.maximum(kv_step_bwd - BACKWARD_ATTENTION_FACTOR * chunk, 0.0)
    return fwd, bwd


def attention_kernel_length(batch, domain: int):
    """Keys one attention kernel call sees, per layout (what ``compute.attention_efficiency``
    prices). p2p: the ring's chunk s/c (TransformerEngine's load-balanced ring runs the local
    queries against one K/V chunk per step: s/c keys on the diagonal step, s/2c against all
    queries or s/c against half of them on the others, which cost like a causal square of s/c);
    a2a and allgather: the whole sequence s (every rank runs its heads, or its queries, against
    all keys); a2a+p2p: the ring's chunk over the ranks the ring spans, s / (c / a2a ranks)."""
    seq = batch.seq_len.astype(np.float64)
    cp = batch.cp.astype(np.float64)
    kind = batch.cp_comm_type
    a2a = cp_a2a_ranks(kind, batch.cp, batch.tp, domain).astype(np.float64)
    ring = np.where(batch.is_("cp_comm_type", "allgather"), 1.0, cp / a2a)  # allgather: one "ring step" over every key
    return seq / ring


def _a2a_bytes(ctx: ChunkContext):
    """Bytes one rank sends per all-to-all pass of Ulysses attention: its s/c tokens of Q, K, V
    (before) and O (after) for its TP rank's heads, BF16. Backward moves dO, dQ, dK, dV: the same."""
    model = ctx.model
    a = model.num_attention_heads / ctx.tp
    g = np.maximum(model.kv_heads / ctx.tp, 1.0)
    if model.mla is not None:
        mla = model.mla
        width = a * (2.0 * (mla.qk_nope_head_dim + mla.qk_rope_head_dim) + 2.0 * mla.v_head_dim)
    else:
        width = (2.0 * a + 2.0 * g) * model.head_size
    return ctx.tokens_mb * width * BF16


def layer_comm(ctx: ChunkContext, dense: LayerTimes, moe: LayerTimes) -> ContextParallelComm:
    """Exposed context-parallel communication per dense and per MoE layer."""
    kind = ctx.batch.cp_comm_type
    kv = kv_bytes(ctx)
    zero = np.zeros(ctx.n)
    if not np.any(ctx.cp > 1):
        return ContextParallelComm(zero, zero, zero, zero)
    a2a = cp_a2a_ranks(kind, ctx.batch.cp, ctx.batch.tp, ctx.domain).astype(np.float64)
    ring = np.where(ctx.batch.is_("cp_comm_type", "allgather"), 1.0, ctx.cp / a2a)  # ranks the K/V ring spans (1: no ring)
    # CP ranks stride the TP ranks (Megatron order tp-cp-ep-dp-pp); the all-to-all ranks are the
    # first of them, the ring strides tp * a2a.
    _, ring_nodes = group_span(ring, ctx.batch.tp * a2a, ctx.domain)
    kv_step = collectives.p2p_time(kv, ring_nodes > 1, ctx.fabric)
    kv_step_bwd = collectives.p2p_time(2.0 * kv, ring_nodes > 1, ctx.fabric)  # K,V and dK,dV
    steps = ring - 1.0
    # A hybrid model's average layer runs attention in a share of its layers (costmodel.ssm):
    # the ring runs there, behind that layer's attention.
    share = ssm.attention_share(ctx.model)
    dense_f, dense_b = ring_exposed(steps, kv_step, kv_step_bwd, dense.attention_forward / max(share, 1e-9), ring)
    dense_f, dense_b = share * dense_f, share * dense_b
    moe_f, moe_b = ring_exposed(steps, kv_step, kv_step_bwd, moe.attention_forward, ring)
    # Ulysses all-to-alls (a2a, a2a+p2p): one pass before and one after attention, each way.
    a2a_local, a2a_nodes = group_span(a2a, ctx.batch.tp, ctx.domain)
    t_a2a, _ = collectives.collective_time("all_to_all", _a2a_bytes(ctx), a2a_local, a2a_nodes, ctx.fabric)
    t_a2a = np.where(a2a > 1, t_a2a, 0.0)
    # All-gather CP: K/V of the whole sequence gathered before attention (again before its
    # backward), dK/dV reduce-scattered after it; the output of each is c chunks of K/V.
    gathered = kv * ctx.cp
    cp_local, cp_nodes = group_span(ctx.batch.cp, ctx.batch.tp, ctx.domain)
    t_ag, _ = collectives.collective_time("all_gather", gathered, cp_local, cp_nodes, ctx.fabric)
    t_rs, _ = collectives.collective_time("reduce_scatter", gathered, cp_local, cp_nodes, ctx.fabric)
    allgather = ctx.batch.is_("cp_comm_type", "allgather")
    extra_f = t_a2a + np.where(allgather, t_ag, 0.0)
    extra_b = t_a2a + np.where(allgather, t_ag + t_rs, 0.0)
    mamba = 0.0
    if ctx.model.hybrid_layers:  # Mamba layers' CP all-to-alls
        mamba = ssm_layer.mamba_context_parallel_seconds(ctx, cp_local, cp_nodes)
    # The Ulysses / all-gather passes run with attention, so in its share of a hybrid layer.
    return ContextParallelComm(dense_f + share * extra_f + mamba, dense_b + share * extra_b + mamba,
                               moe_f + extra_f, moe_b + extra_b)


def stage_time(comm: ContextParallelComm, passes, n_dense, n_moe):
    """Exposed CP seconds of one micro-batch on a stage: every forward pass (passes - 1 of
    them with a recomputed forward) and the backward."""
    forward = (n_dense * comm.dense_forward + n_moe * comm.moe_forward) * (passes - 1.0)
    return forward + n_dense * comm.dense_backward + n_moe * comm.moe_backward
