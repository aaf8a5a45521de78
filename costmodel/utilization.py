"""FLOPs utilization: MFU and HFU of a step.

MFU (Chowdhery et al. 2022, PaLM App. B) counts the model's FLOPs per token (6·N active +
causal attention, ``costmodel.flops``) over step time x GPUs x the dense BF16 peak; FP8 runs
are measured against the BF16 peak too, so the two compare. HFU (the same appendix; used by
Korthikanti et al. 2022, Sec. 6) also counts what recompute runs again.
"""

from __future__ import annotations

import numpy as np

from costmodel.compute import LayerTimes
from costmodel.context import ChunkContext
from costmodel.flops import attention_core_flops_per_token, model_flops_per_token


def recomputed_flops_per_token(ctx: ChunkContext, full_share, selective, dense: LayerTimes, moe: LayerTimes):
    """FLOPs per model token that recompute adds: under full recompute, a forward of the
    covered share of layers (2 FLOPs per matmul weight + the attention core); under selective,
    the attention core if covered plus the recomputed submodules' GEMMs. ``full_share``: the
    covered share of a middle stage's layers; ``selective``: ``recompute.SelectiveRecompute``."""
    model, counts, seq_len = ctx.model, ctx.counts, ctx.batch.seq_len
    core_fwd = model.num_layers * attention_core_flops_per_token(model, seq_len)
    layer_fwd = 2.0 * (counts.matmul_active - (counts.lm_head or counts.embedding_matrix)) + core_fwd
    module_flops = selective.flops_per_token(ctx, dense, moe)
    return np.where(ctx.full, full_share * layer_fwd,
                    np.where(ctx.selective, selective.has("core_attn") * core_fwd + module_flops, 0.0))


def tokens_per_step(ctx: ChunkContext):
    """Training tokens of one step, gbs · s."""
    return (ctx.batch.gbs * ctx.batch.seq_len).astype(np.float64)


def utilization(ctx: ChunkContext, step, tokens_step, recomputed_flops):
    """(MFU, HFU) of each layout, from its step seconds, tokens per step and the recomputed
    FLOPs per token."""
    flops_token = model_flops_per_token(ctx.model, ctx.batch.seq_len, ctx.counts)
    peak = ctx.gpu.bf16_tflops * 1e12
    mfu = flops_token * tokens_step / (step * ctx.gpus * peak)
    hfu = (flops_token + recomputed_flops) * tokens_step / (step * ctx.gpus * peak)
    return mfu, hfu
