"""Context-parallel communication: the ring-attention K/V exchange left exposed.

Megatron's context parallelism runs ring attention (Liu et al. 2023, "Ring Attention with
Blockwise Transformers"; Megatron-Core context_parallel docs): each of the cp ranks holds s/c
of the sequence and passes its K/V chunk around the ring in c - 1 steps, each overlapped with
the attention of one chunk. A step longer than that chunk's attention stays exposed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel import collectives, ssm
from costmodel.compute import LayerTimes
from costmodel.context import BF16, ChunkContext
from costmodel.placement import group_span

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


def layer_comm(ctx: ChunkContext, dense: LayerTimes, moe: LayerTimes) -> ContextParallelComm:
    """Exposed ring-attention communication per dense and per MoE layer."""
    # CP ranks stride the TP ranks (Megatron order tp-cp-ep-dp-pp).
    cp_local, cp_nodes = group_span(ctx.batch.cp, ctx.batch.tp, ctx.domain)
    kv = kv_bytes(ctx)
    if np.any(ctx.cp > 1):
        kv_step = collectives.p2p_time(kv, cp_nodes > 1, ctx.fabric)
        kv_step_bwd = collectives.p2p_time(2.0 * kv, cp_nodes > 1, ctx.fabric)  # K,V and dK,dV
    else:
        kv_step = kv_step_bwd = np.zeros(ctx.n)
    steps = ctx.cp - 1.0
    # A hybrid model's average layer runs attention in a share of its layers (costmodel.ssm):
    # the ring runs there, behind that layer's attention.
    share = ssm.attention_share(ctx.model)
    dense_f, dense_b = ring_exposed(steps, kv_step, kv_step_bwd, dense.attention_forward / max(share, 1e-9), ctx.cp)
    dense_f, dense_b = share * dense_f, share * dense_b
    if ctx.model.hybrid_layers and np.any(ctx.cp > 1):  # Mamba layers' CP all-to-alls
        a2a = ssm.mamba_context_parallel_seconds(ctx, cp_local, cp_nodes)
        dense_f, dense_b = dense_f + a2a, dense_b + a2a
    moe_f, moe_b = ring_exposed(steps, kv_step, kv_step_bwd, moe.attention_forward, ctx.cp)
    return ContextParallelComm(dense_f, dense_b, moe_f, moe_b)


def stage_time(comm: ContextParallelComm, passes, n_dense, n_moe):
    """Exposed CP seconds of one micro-batch on a stage: every forward pass (passes - 1 of
    them with a recomputed forward) and the backward."""
    forward = (n_dense * comm.dense_forward + n_moe * comm.moe_forward) * (passes - 1.0)
    return forward + n_dense * comm.dense_backward + n_moe * comm.moe_backward
