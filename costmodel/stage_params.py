"""Parameters one GPU holds on each pipeline stage, and the stage that holds the most.

Megatron shards a layer's dense weights over TP (Shoeybi et al. 2019) and its routed experts
over EP x ETP (Megatron-Core MoE parallel folding); norms are counted with the layer. The
first stage holds the input embedding, the last the LM head (a copy of a tied embedding,
as Megatron keeps one there).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel import mtp
from costmodel.context import ChunkContext
from costmodel.pipeline import StageSplit, argmax3, select3, stage_layer_mix


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Parameters of one layer on one GPU (arrays over layouts)."""

    dense_layer: np.ndarray
    """A dense layer: attention + MLP + norms, / t."""
    moe_dense: np.ndarray
    """The non-expert part of an MoE layer: attention + shared experts + router + norms, / t."""
    moe_expert: np.ndarray
    """The routed experts of an MoE layer, / (ep · etp)."""


def layer_params(ctx: ChunkContext) -> LayerParams:
    """Per-GPU parameters of one dense and one MoE layer."""
    counts = ctx.counts
    return LayerParams(
        dense_layer=counts.dense_layer / ctx.tp,
        moe_dense=(counts.attention_per_layer + counts.shared_expert_per_layer + counts.norms_per_layer) / ctx.tp,
        moe_expert=counts.expert_per_layer / (ctx.ep * ctx.etp),
    )


def stage_params(ctx: ChunkContext, per_layer: LayerParams, n_layers, first_stage: bool, last_stage, single):
    """(dense, expert) parameters per GPU on a stage of ``n_layers``; ``last_stage`` True, False
    or a mask. ``single``: pp = 1 (the head then multiplies by the embedding itself)."""
    model, counts = ctx.model, ctx.counts
    nd, nm = stage_layer_mix(model, counts, n_layers, first_stage)
    dense = nd * per_layer.dense_layer + nm * per_layer.moe_dense
    expert = nm * per_layer.moe_expert if model.moe is not None else 0.0
    if first_stage:
        dense = dense + counts.embedding / ctx.tp
    tied_copy = counts.embedding_matrix if counts.lm_head == 0 else counts.lm_head
    head = np.where(single, counts.lm_head, tied_copy) / ctx.tp + counts.final_norm
    # Multi-token-prediction modules sit on the last stage with the head (costmodel.mtp).
    mtp_dense, mtp_expert = mtp.last_stage_params(ctx, per_layer.moe_dense, per_layer.moe_expert,
                                                  per_layer.dense_layer)
    if last_stage is True:
        dense, expert = dense + head + mtp_dense, expert + mtp_expert
    elif last_stage is not False:
        dense = dense + np.where(last_stage, head + mtp_dense, 0.0)
        expert = expert + np.where(last_stage, mtp_expert, 0.0)
    return dense, expert


def params_per_stage(ctx: ChunkContext, split: StageSplit, per_layer: LayerParams):
    """(dense, expert) parameters per GPU on the first, a middle and the last stage."""
    single = split.single
    return (
        stage_params(ctx, per_layer, split.first, True, single, single),
        stage_params(ctx, per_layer, split.middle, False, False, single),
        stage_params(ctx, per_layer, split.last, False, True, single),
    )


@dataclass(frozen=True, slots=True)
class HeaviestStage:
    """The stage whose parameters set data-parallel traffic and the optimizer step."""

    index: np.ndarray
    """0 first, 1 middle, 2 last."""
    dense: np.ndarray
    """Its dense parameters per GPU."""
    expert: np.ndarray | float
    """Its expert parameters per GPU (0.0 for dense models)."""
    layers: np.ndarray
    """Its layers, float."""


def heaviest_stage(ctx: ChunkContext, split: StageSplit, params) -> HeaviestStage:
    """The stage holding most parameters, from the (first, middle, last) ``stage_params``."""
    stage_dense = split.present(*(p[0] for p in params))
    if ctx.model.moe is not None:
        stage_expert = split.present(*(p[1] for p in params))
        heavy = argmax3(*(d + e for d, e in zip(stage_dense, stage_expert)))
        expert = select3(heavy, *stage_expert)
    else:
        heavy = argmax3(*stage_dense)
        expert = 0.0
    layers = select3(heavy, split.first, split.middle, split.last).astype(np.float64)
    return HeaviestStage(heavy, select3(heavy, *stage_dense), expert, layers)
