"""Step time of a hybrid model's layers (Mamba-2 / attention / MLP patterns; the shapes, FLOPs,
parameters and activation bytes are in ``costmodel.ssm``, which the FLOP and parameter counts
read without the kernel model)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from costmodel.compute import BF16_BYTES, LayerTimes, _kernels
from costmodel.ssm import (check_priced, layer_kinds, mamba_conv_dim, mamba_in_proj_width, ssd_flops_per_token)
from hardware_catalog.schema import ModelSpec

SSD_SCAN_EFFICIENCY = 0.15
"""Fraction of the dense BF16 peak the SSD chunked scan reaches (forward; backward runs at
the same rate over 2.5x the work). The scan is not one dense GEMM: five Triton kernels of
mamba_ssm (chunk cumsum, C·Bᵀ per chunk, chunk state, state passing, chunk scan) with Q = 128
batched GEMMs of inner size N or Q, elementwise decays between them and FP32 state traffic.
Estimate, not fitted (no hybrid run in the reference set): the Mamba-2 paper (Sec. 9.3,
Fig. 10) reports SSD at ~2-8x the Mamba-1 scan and on par with FlashAttention-2 at 2K
tokens, i.e. batched small GEMMs at a fraction of peak; FlashAttention-2 itself runs at
0.25-0.35 of peak fwd+bwd here (Calibration.attention_efficiency). Interval 0.08-0.30. The
scan is ~4-8% of a Nemotron-H Mamba layer's FLOPs, so the interval moves a layer's time by
under ±10%."""

SSD_BACKWARD_FACTOR = 2.5
"""Backward / forward work of the SSD scan: mamba_ssm's backward recomputes the chunk states
(it saves only the inputs, _mamba_chunk_scan_combined_fwd/bwd) and computes the gradients of
x, B, C, dt and the states, as FlashAttention recomputes its scores (Dao 2023 Sec. 3.1: 2.5x)."""


def _half_layer_launches(calib) -> float:
    """Launch seconds of one pass of a pattern layer: half a transformer layer's kernels
    (``Calibration.kernels_per_layer``), each at the launch gap."""
    return 0.5 * calib.kernels_per_layer * calib.kernel_overhead_us * 1e-6


def _mamba_layer(model: ModelSpec, gpu, batch, calib, kern) -> tuple:
    """(forward s, backward s, forward FLOPs, TP-neighbour GEMMs) of one Mamba-2 layer."""
    m = model.mamba
    h = float(model.hidden_size)
    t_in, f_in = kern.gemm(kern.tokens, h, mamba_in_proj_width(model) / kern.tp)
    t_out, f_out = kern.gemm(kern.tokens, m.d_inner / kern.tp, h)
    # SSD scan: heads split over TP; max(compute at its efficiency, its HBM traffic): it reads
    # x, B, C, dt and writes y (BF16), and writes + reads the FP32 chunk states once per chunk.
    f_scan = kern.tokens * ssd_flops_per_token(model) / kern.tp
    scan_bytes = kern.tokens * (BF16_BYTES * (2.0 * m.d_inner + 2.0 * m.num_groups * m.state_dim + m.num_heads)
                                + 2.0 * 4.0 * m.num_heads * m.head_dim * m.state_dim / m.chunk_size) / kern.tp
    t_scan = np.maximum(f_scan / (kern.bf16_peak * SSD_SCAN_EFFICIENCY), scan_bytes / kern.mem_bw)
    # Memory-bound kernels: conv1d (read + write conv_dim, its SiLU fused), the gated norm (read
    # y and z, write d_inner), in the TP region; pre-norm (read + write h) and residual add
    # (2 reads + 1 write) in the sequence-parallel region.
    sharded = 2.0 * mamba_conv_dim(model) + 3.0 * m.d_inner
    t_elem = kern.tokens * BF16_BYTES * (sharded / kern.tp + 5.0 * h / kern.rep_div) / kern.mem_bw
    launch = _half_layer_launches(calib)
    gemms = t_in + t_out
    forward = gemms + t_scan + t_elem + launch
    backward = 2.0 * gemms + SSD_BACKWARD_FACTOR * t_scan + 2.0 * t_elem + 2.0 * launch
    return forward, backward, f_in + f_out + f_scan, (t_in, t_out)


def hybrid_layer_times(model: ModelSpec, gpu, batch, calib, dense: LayerTimes) -> LayerTimes:
    """The average pattern layer of a hybrid model, from the attention + MLP layer ``dense``
    (costmodel.compute) split into its attention half and its MLP half, and the Mamba layer."""
    check_priced(model)
    kinds = layer_kinds(model)
    n = float(sum(kinds.values()))
    w_m, w_a, w_f = kinds["M"] / n, kinds["*"] / n, kinds["-"] / n
    kern = _kernels(gpu, batch, calib)
    half_launch = _half_layer_launches(calib)
    # The MLP half: its GEMMs and activation (module_forward['mlp']) and half the launches;
    # backward doubles it (dgrad + wgrad). The attention half is the rest of the layer.
    mlp_fwd = dense.module_forward["mlp"] + half_launch
    mlp_bwd = 2.0 * mlp_fwd
    attn_fwd, attn_bwd = dense.forward - mlp_fwd, dense.backward - mlp_bwd
    mlp_flops = dense.module_flops["mlp"]
    attn_flops = dense.flops_forward - mlp_flops
    if kinds["M"]:
        m_fwd, m_bwd, m_flops, (m_in, m_out) = _mamba_layer(model, gpu, batch, calib, kern)
    else:
        m_fwd = m_bwd = m_flops = m_in = m_out = 0.0
    qkv, out, up, down = dense.tp_neighbour_gemms
    scaled = {k: v * w_f if k == "mlp" else v * (w_a + w_f + w_m) for k, v in dense.module_forward.items()}
    return replace(
        dense,
        forward=w_m * m_fwd + w_a * attn_fwd + w_f * mlp_fwd,
        backward=w_m * m_bwd + w_a * attn_bwd + w_f * mlp_bwd,
        attention_forward=w_a * dense.attention_forward,
        flops_forward=w_m * m_flops + w_a * attn_flops + w_f * mlp_flops,
        # Each pattern layer has one all-gather and one reduce-scatter (tensor_parallel reads
        # collectives_per_layer): the GEMMs beside them, as the average layer's.
        tp_neighbour_gemms=(w_m * m_in + w_a * qkv + w_f * up, w_m * m_out + w_a * out + w_f * down, 0.0, 0.0),
        module_forward=scaled,
        module_flops={k: v * w_f if k == "mlp" else v for k, v in dense.module_flops.items()},
    )


def mamba_context_parallel_seconds(ctx, cp_local, cp_nodes):
    """Seconds per average pattern layer and pass of the all-to-alls a Mamba layer runs under
    context parallelism (Megatron-Core megatron/core/ssm/mamba_context_parallel.py): the
    in_proj output goes from sequence-split to head-split before the conv and the scan, and
    the scan output back before out_proj; backward sends the gradients of both. Not hidden."""
    from costmodel import collectives

    kinds = layer_kinds(ctx.model)
    if not kinds["M"]:
        return np.zeros(ctx.n)
    sent = ctx.tokens_mb * BF16_BYTES * (mamba_in_proj_width(ctx.model) + ctx.model.mamba.d_inner) / ctx.tp
    a2a, _ = collectives.collective_time("all_to_all", sent, cp_local, cp_nodes, ctx.fabric)
    return np.where(ctx.cp > 1, a2a, 0.0) * kinds["M"] / float(sum(kinds.values()))
