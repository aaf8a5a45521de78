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


def windowed_keys(window: int, seq_len):
    """Mean keys per query under a causal sliding window of ``window`` keys (itself included)
    over ``seq_len`` tokens: query i (1-based) attends min(i, w) keys, so the mean over the
    sequence is w - w(w-1)/2s, taken as w - w²/2s for s > w (Longformer Sec. 3.1: cost linear in s);
    a window that covers the sequence is the causal s/2."""
    s = np.asarray(seq_len, dtype=np.float64)
    w = float(window)
    return np.where(s > w, w - w * w / (2.0 * np.maximum(s, 1.0)), 0.5 * s)


def attention_keys_parts(model: ModelSpec, seq_len, causal: bool = True, windowed_share=None):
    """(full, windowed): mean keys per query of an attention layer, split into the share of the
    model's attention layers that attend the whole prefix (s/2 causal, s otherwise) and the share
    that attends a sliding window (``ModelSpec.sliding_window``, every layer but each
    ``full_attention_every``-th: Megatron-Core transformer/utils.py is_layer_window_attention).
    Weighted by their layer shares, so full + windowed is the mean over layers; ``windowed_share``
    (arrays over layouts) replaces the model's share, e.g. by the pipeline rank that bounds a step
    (``costmodel.pipeline.heaviest_rank_windowed_share``)."""
    s = np.asarray(seq_len, dtype=np.float64)
    full = s * (0.5 if causal else 1.0)
    if model.sliding_window is None or not causal:
        return full, np.zeros_like(full)
    share = model.windowed_layers / model.num_layers if windowed_share is None else np.asarray(windowed_share)
    return (1.0 - share) * full, share * windowed_keys(model.sliding_window, s)


def attention_core_flops_per_token(model: ModelSpec, seq_len, causal: bool = True):
    """Forward FLOPs of the attention core (QK^T and AV) per token, mean over the attention layers.

    QK^T: 2·a·d_qk FLOPs per (query, key) pair; AV: 2·a·d_v. A causal mask visits s/2 keys per
    query on average (FlashAttention skips masked blocks), so 2·a·(d_qk + d_v)·s/2. PaLM App. B
    counts the non-causal 2x that (12·l·h·s per token for fwd+bwd with d_qk = d_v = h/a).
    Sliding-window layers visit their window's keys (``attention_keys_parts``).
    """
    full, windowed = attention_keys_parts(model, seq_len, causal)
    return attention_flops_per_key(model) * (full + windowed)


def attention_flops_per_key(model: ModelSpec) -> float:
    """Forward FLOPs of QK^T and AV per (query, key) pair: 2·a·(d_qk + d_v)."""
    return 2.0 * model.num_attention_heads * (attention_qk_dim(model) + attention_v_dim(model))


def model_flops_per_token(model: ModelSpec, seq_len, counts: ParamCounts | None = None):
    """Training FLOPs per token that MFU counts: 6·N (forward 2N, backward 4N over the active
    matmul weights incl. the LM head; Kaplan et al. 2020 Sec. 2.1) plus the causal attention
    core, forward + backward = 3x forward."""
    counts = counts or count_params(model)
    from costmodel import ssm  # hybrid models: attention in the '*' layers only, and the scans

    attention_layers = ssm.layer_kinds(model)["*"] if model.hybrid_layers else model.num_layers
    attention = 3.0 * attention_layers * attention_core_flops_per_token(model, seq_len)
    return 6.0 * counts.matmul_active + attention + ssm.scan_model_flops_per_token(model)
