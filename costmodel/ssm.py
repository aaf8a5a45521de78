"""Hybrid Mamba-2 / attention / MLP models (Megatron-Core ``hybrid_override_pattern``; Nemotron-H).

A hybrid model is a stack of single-purpose layers, one pattern symbol each (megatron/core/ssm/
mamba_block.py builds a MambaLayer for 'M', a TransformerLayer with attention only for '*',
one with an MLP only for '-'), every one a pre-norm residual block. The step-time machinery
prices "a layer" times the layers on a stage; for a hybrid model that layer is the average of
its pattern's layers (pipeline stages take pattern layers in order, so a stage's mix is the
model's mix to within one layer of each kind).

A Mamba-2 layer (Dao & Gu 2024, "Transformers are SSMs", Sec. 7 and Listing 1; Megatron-Core
megatron/core/ssm/mamba_mixer.py):
  in_proj   h -> [z, x, B, C, dt] = 2·d_inner + 2·G·N + H columns (column-parallel under TP);
  conv1d    depthwise causal, width K, over x, B, C (conv_dim = d_inner + 2·G·N), memory-bound;
  SSD       the chunked scan over chunks of Q tokens: intra-chunk C·Bᵀ scores and scores·x
            (batched GEMMs of size Q), chunk states Bᵀ·x, state passing, state -> output;
  norm      gated RMSNorm over d_inner (y · silu(z));
  out_proj  d_inner -> h (row-parallel).
Letters: N state_dim, P head_dim, H heads, G groups, K conv width, Q chunk, d_inner = H·P.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from costmodel.compute import BF16_BYTES, LayerTimes, _kernels
from hardware_catalog.errors import PlannerInputError
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


def layer_kinds(model: ModelSpec) -> dict[str, int]:
    """Layers of each kind in the model: {'M', '*', '-', 'E'} -> count (a plain transformer
    counts every layer as attention + MLP, which this module does not price)."""
    layers = model.hybrid_layers or ""
    return {s: layers.count(s) for s in "M*-E"}


def check_priced(model: ModelSpec) -> None:
    """Refuse what the hybrid pricing does not cover (one line, exit 2)."""
    if model.hybrid_layers and "E" in model.hybrid_layers:
        raise PlannerInputError(
            f"model {model.name}: hybrid patterns with MoE layers (E) are not priced yet; "
            "allowed symbols for pricing: M (Mamba), * (attention), - (MLP)")


def mamba_in_proj_width(model: ModelSpec) -> int:
    """Output columns of in_proj: z and x (d_inner each), B and C (G·N each), dt (H)."""
    m = model.mamba
    return 2 * m.d_inner + 2 * m.num_groups * m.state_dim + m.num_heads


def mamba_conv_dim(model: ModelSpec) -> int:
    """Channels the conv1d runs over: x, B and C."""
    m = model.mamba
    return m.d_inner + 2 * m.num_groups * m.state_dim


def mamba_params(model: ModelSpec) -> int:
    """Weights of one Mamba-2 layer (mamba_mixer.py): in_proj, conv1d weight + bias, A_log,
    D and dt_bias (H each), the gated RMSNorm over d_inner, out_proj, and the layer's pre-norm."""
    m = model.mamba
    h = model.hidden_size
    conv = mamba_conv_dim(model) * (m.conv_kernel + 1)
    return h * mamba_in_proj_width(model) + conv + 3 * m.num_heads + m.d_inner + m.d_inner * h + h


def ssd_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs of the SSD chunked scan per token (Dao & Gu 2024 Sec. 6, the four steps
    of the block decomposition): intra-chunk scores C·Bᵀ over the chunk (2·Q·N per group),
    scores times x (2·Q·P per head), chunk states Bᵀ·x (2·N·P per head), states to outputs
    (2·N·P per head); state passing between chunks is O(H·P·N / Q) and left out."""
    m = model.mamba
    Q, N, P, H, G = m.chunk_size, m.state_dim, m.head_dim, m.num_heads, m.num_groups
    return 2.0 * Q * N * G + 2.0 * Q * P * H + 4.0 * N * P * H


def scan_model_flops_per_token(model: ModelSpec) -> float:
    """Training FLOPs per token of the scans that MFU counts beyond 6·N: Megatron's counter
    (megatron/training/training.py num_floating_point_operations, hybrid_flops /
    mamba_layer_flops) takes the scan as 7·d_inner·N forward, x3 for forward + backward."""
    if not model.hybrid_layers or model.mamba is None:
        return 0.0
    return 3.0 * layer_kinds(model)["M"] * 7.0 * model.mamba.d_inner * model.mamba.state_dim


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
    # Launches: a pattern layer is half a transformer layer's (Calibration.kernels_per_layer).
    launch = 0.5 * calib.kernels_per_layer * calib.kernel_overhead_us * 1e-6
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
    half_launch = 0.5 * calib.kernels_per_layer * calib.kernel_overhead_us * 1e-6
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


def collectives_per_layer(model: ModelSpec) -> float:
    """TP all-gather + reduce-scatter pairs per layer (with SP): 2 in an attention + MLP layer,
    1 in a pattern layer (each of M, *, - has one column- and one row-parallel GEMM)."""
    return 1.0 if model.hybrid_layers else 2.0


def attention_share(model: ModelSpec) -> float:
    """Fraction of layers that run attention (CP's ring and the KV bytes are per attention layer)."""
    if not model.hybrid_layers:
        return 1.0
    kinds = layer_kinds(model)
    return kinds["*"] / float(sum(kinds.values()))


def layer_activation_bytes_per_token(model: ModelSpec, tp, sp) -> np.ndarray:
    """Bytes the average pattern layer keeps per token for backward (no recompute), per GPU.

    Every pattern layer keeps its norm input and the normed input of its first GEMM (2h + 2h,
    sequence-parallel region). Attention ('*'): Q, K, V and the attention output, as
    costmodel.memory. MLP ('-'): the activation's inputs and output (4F, gated 6F). Mamba ('M',
    the tensors mamba_mixer.py and mamba_ssm's autograd functions save): in_proj's output
    (2·width), the conv output (2·conv_dim), the scan output y and the gated norm's output
    (2·d_inner each), split by TP. The FP32 chunk states are recomputed in backward, not kept."""
    kinds = layer_kinds(model)
    n = float(sum(kinds.values()))
    tp = np.asarray(tp, dtype=np.float64)
    rep_div = np.where(sp, tp, 1.0)
    h = float(model.hidden_size)
    a, g, d = float(model.num_attention_heads), float(model.kv_heads), float(model.head_size)
    attention = 2.0 * (a + 2.0 * g) * d + 2.0 * a * d
    mlp = (6.0 if model.gated_mlp else 4.0) * float(model.ffn_hidden_size)
    mamba = 0.0
    if kinds["M"]:
        mamba = 2.0 * (mamba_in_proj_width(model) + mamba_conv_dim(model) + 2.0 * model.mamba.d_inner)
    sharded = (kinds["*"] * attention + kinds["-"] * mlp + kinds["M"] * mamba) / n
    return 4.0 * h / rep_div + sharded / tp


def layers_params_total(model: ModelSpec, attention_params: int, mlp_params: int, norm: int) -> int:
    """Weights of all pattern layers: Mamba layers (with their pre-norm), attention layers and
    MLP layers (each with its one pre-norm)."""
    kinds = layer_kinds(model)
    mamba = mamba_params(model) if kinds["M"] else 0
    return kinds["M"] * mamba + kinds["*"] * (attention_params + norm) + kinds["-"] * (mlp_params + norm)


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
