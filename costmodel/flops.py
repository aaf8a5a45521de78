"""FLOPs per token: model FLOPs (for MFU) and the shapes of the GEMMs one layer runs.

Notation as in Korthikanti et al. 2022 and the JAX scaling book: h hidden, a query heads,
g KV heads, d head dim, F MLP width, V vocab, s sequence, L layers, k top-k experts.
"""

from __future__ import annotations

import numpy as np

from costmodel.params import ParamCounts, count_params
from hardware_catalog.schema import ModelSpec


def attention_qk_dim(model: ModelSpec) -> int:
    """Per-head dim of queries/keys (MLA: nope + rope parts)."""
    if model.mla is not None:
        return model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
    return model.head_size


def attention_v_dim(model: ModelSpec) -> int:
    """Per-head dim of values."""
    if model.mla is not None:
        return model.mla.v_head_dim
    return model.head_size


def attention_core_flops_per_token(model: ModelSpec, seq_len, causal: bool = True):
    """Forward FLOPs of the attention core (QK^T and AV) per token per layer.

    QK^T: 2·a·d_qk FLOPs per (query, key) pair; AV: 2·a·d_v. A causal mask visits s/2 keys per
    query on average (FlashAttention skips masked blocks), so 2·a·(d_qk + d_v)·s/2. PaLM App. B
    counts the non-causal 2x that (12·l·h·s per token for fwd+bwd with d_qk = d_v = h/a).
    """
    keys = np.asarray(seq_len, dtype=np.float64) * (0.5 if causal else 1.0)
    return 2.0 * model.num_attention_heads * (attention_qk_dim(model) + attention_v_dim(model)) * keys


def model_flops_per_token(model: ModelSpec, seq_len, counts: ParamCounts | None = None):
    """Training FLOPs per token that MFU counts: 6·N (forward 2N, backward 4N over the active
    matmul weights incl. the LM head; Kaplan et al. 2020 Sec. 2.1) plus the causal attention
    core, forward + backward = 3x forward."""
    counts = counts or count_params(model)
    from costmodel import ssm  # hybrid models: attention in the '*' layers only, and the scans

    attention_layers = ssm.layer_kinds(model)["*"] if model.hybrid_layers else model.num_layers
    attention = 3.0 * attention_layers * attention_core_flops_per_token(model, seq_len)
    return 6.0 * counts.matmul_active + attention + ssm.scan_model_flops_per_token(model)
