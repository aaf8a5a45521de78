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

import numpy as np

from hardware_catalog.errors import PlannerInputError
from hardware_catalog.schema import ModelSpec

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
