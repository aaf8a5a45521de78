"""Multi-token prediction: the extra blocks some models train beside the main one (vectorized).

DeepSeek-V3 (report Sec. 2.2, Fig. 3) trains D = 1 MTP module: the final hidden state, RMS-normed,
is concatenated with the RMS-normed embedding of the next token and projected back to h (an
[2h x h] GEMM), run through one more transformer block, and predicted with the shared output head
and its own cross-entropy loss. Megatron-Core implements it the same way
(megatron/core/transformer/multi_token_prediction.py, ``--mtp-num-layers``): the MTP block is
built from the decoder's layer spec (an MoE layer in DeepSeek-V3, whose last layer is MoE), and
it runs on the last pipeline stage after the decoder, where the output layer lives. Megatron-
Bridge's DeepSeek-V3 recipe trains with ``mtp_num_layers=1`` (recipes/deepseek/deepseek_v3.py).

``ModelSpec.mtp_layers`` says how many; this module prices what they add to the last stage:
time (``last_stage_time``) and parameters (``last_stage_params``). The parameter counts of the
model (``costmodel.params``) and its model FLOPs stay the main model's, as the papers count.
"""

from __future__ import annotations

import numpy as np

from costmodel.compute import BF16_BYTES, LayerTimes, bf16_gemm_efficiency, gemm_time

PROJECTION_IN = 2.0
"""The MTP projection's input width in units of h: [normed hidden ; normed embedding of the
next token] (DeepSeek-V3 report Eq. 21; Megatron-Core MultiTokenPredictionLayer.eh_proj)."""


def last_stage_time(ctx, dense: LayerTimes, moe: LayerTimes, head_forward, head_backward):
    """(forward, backward) compute seconds per micro-batch the MTP modules add to the last stage:
    for each, one more layer of the kind the model ends with (MoE for an MoE model), the [2h x h]
    projection (a BF16 GEMM; backward dgrad + wgrad, 2x) and the shared LM head and loss again
    (``head_forward`` / ``head_backward``, as ``costmodel.compute.lm_head_times`` prices them).
    That layer's TP collectives and expert-parallel all-to-alls are the stage's TP and EP terms
    (``costmodel.schedule.stage_time``: ``layers`` of them)."""
    model = ctx.model
    n = float(model.mtp_layers)
    if not n:
        zero = np.zeros(ctx.n)
        return zero, zero
    layer = moe if model.moe is not None else dense
    h = float(model.hidden_size)
    gpu, calib = ctx.gpu_clocked, ctx.calib
    proj, _ = gemm_time(ctx.tokens_mb, PROJECTION_IN * h, h / ctx.tp, gpu.bf16_tflops * 1e12,
                        bf16_gemm_efficiency(gpu, calib), gpu.memory_bandwidth_gbps * 1e9, BF16_BYTES)
    forward = n * (layer.forward + proj + head_forward)
    backward = n * (layer.backward + 2.0 * proj + head_backward)
    return forward, backward


def layers(model) -> tuple[float, float]:
    """(dense, MoE) layers the MTP modules add to the last stage, for its TP and EP terms."""
    n = float(model.mtp_layers or 0)
    return (0.0, n) if model.moe is not None else (n, 0.0)


def last_stage_params(ctx, moe_dense, moe_expert, dense_layer):
    """(dense, expert) parameters per GPU the MTP modules add to the last stage: each one layer
    (the MoE layer's non-expert part over t and its experts over ep x etp, or a dense layer)
    and its [2h x h] projection over t, plus a copy of the input embedding, which the last stage
    then builds too (Megatron-Core gpt_model.py builds the embedding where pre_process or
    mtp_process holds; the output layer is already there)."""
    model, counts = ctx.model, ctx.counts
    n = float(model.mtp_layers)
    if not n:
        return 0.0, 0.0
    h = float(model.hidden_size)
    projection = PROJECTION_IN * h * h / ctx.tp
    if model.moe is not None:
        dense = n * (moe_dense + projection)
        expert = n * moe_expert
    else:
        dense, expert = n * (dense_layer + projection), 0.0
    return dense + counts.embedding / ctx.tp, expert
