"""Parameter counts of a decoder-only transformer, split the way parallelism shards them.

Shapes follow the Megatron-LM GPT layer (Narayanan et al. 2021, Sec. 5.1: P = 12 l h^2 (1 + 13/12h
+ (V+s)/12lh) for a 4h GeLU MLP with biases), generalised to GQA, gated MLPs, MoE and MLA.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hardware_catalog.schema import ModelSpec


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of one model (not per GPU)."""

    attention_per_layer: int
    """Attention block weights (+ biases) of one layer."""
    dense_mlp_per_layer: int
    """Dense MLP weights of one dense layer."""
    expert_per_layer: int
    """Routed-expert weights of one MoE layer (all experts)."""
    active_expert_per_layer: int
    """Routed-expert weights one token visits in a MoE layer (top-k experts)."""
    shared_expert_per_layer: int
    """Shared-expert weights (+ router) of one MoE layer, always active."""
    norms_per_layer: int
    """Normalization weights of one layer (replicated under TP)."""
    num_dense_layers: int
    """Layers with a dense MLP."""
    num_moe_layers: int
    """Layers with experts."""
    embedding: int
    """Input embedding (+ learned positions)."""
    lm_head: int
    """Output projection (0 when tied to the embedding)."""
    final_norm: int
    """Final normalization."""
    embedding_matrix: int
    """vocab x hidden: the matrix the LM head multiplies by (tied or not)."""
    hybrid_layers_total: int = 0
    """A hybrid model's Mamba, attention and MLP layers together (costmodel.ssm); 0 otherwise."""

    @property
    def dense_layer(self) -> float:
        if self.hybrid_layers_total:  # the average pattern layer
            return self.hybrid_layers_total / self.num_dense_layers
        return self.attention_per_layer + self.dense_mlp_per_layer + self.norms_per_layer

    @property
    def moe_layer(self) -> int:
        return self.attention_per_layer + self.expert_per_layer + self.shared_expert_per_layer + self.norms_per_layer

    @property
    def moe_layer_active(self) -> int:
        return (
            self.attention_per_layer
            + self.active_expert_per_layer
            + self.shared_expert_per_layer
            + self.norms_per_layer
        )

    @property
    def layers_total(self) -> int:
        return self.num_dense_layers * self.dense_layer + self.num_moe_layers * self.moe_layer

    @property
    def total(self) -> int:
        return self.layers_total + self.embedding + self.lm_head + self.final_norm

    @property
    def active(self) -> int:
        """Parameters one token uses (MoE: top-k routed experts + shared)."""
        return (
            self.num_dense_layers * self.dense_layer
            + self.num_moe_layers * self.moe_layer_active
            + self.embedding
            + self.lm_head
            + self.final_norm
        )

    @property
    def matmul_active(self) -> int:
        """Active weights that take part in a matmul per token: layers + LM head (the input
        embedding is a lookup; with tied embeddings the shared matrix still does the LM head)."""
        lm_head_matmul = self.lm_head if self.lm_head else self.embedding_matrix
        return self.num_dense_layers * self.dense_layer + self.num_moe_layers * self.moe_layer_active + lm_head_matmul


def moe_layer_count(model: ModelSpec) -> int:
    """Layers that carry experts: after ``num_dense_layers``, every ``moe_layer_frequency``-th."""
    if model.hybrid_layers:  # a hybrid pattern names its MoE layers 'E'
        return model.hybrid_layers.count("E")
    if model.moe is None:
        return 0
    candidates = model.num_layers - model.moe.num_dense_layers
    return (candidates + model.moe.moe_layer_frequency - 1) // model.moe.moe_layer_frequency


def attention_params(model: ModelSpec) -> int:
    """QKV + output projection (+ biases) of one layer."""
    h = model.hidden_size
    a = model.num_attention_heads
    if model.mla is not None:
        # DeepSeek-V2 Sec. 2.1.2 / V3 config: q = W_uq (W_dq x), kv latent c = W_dkv x, k_rope = W_kr x,
        # k_nope, v = W_uk c, W_uv c; norms on the latents.
        mla = model.mla
        qk_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank:
            q = h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * a * qk_head
        else:
            q = h * a * qk_head
        kv = h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank
        kv += mla.kv_lora_rank * a * (mla.qk_nope_head_dim + mla.v_head_dim)
        out = a * mla.v_head_dim * h
        return q + kv + out
    d = model.head_size
    g = model.kv_heads
    qkv_out = (a + 2 * g) * d
    weights = h * qkv_out + a * d * h
    biases = 0
    if model.linear_bias:
        biases = qkv_out + h
    elif model.qkv_bias:
        biases = qkv_out
    return weights + biases


def mlp_params(model: ModelSpec, ffn: int) -> int:
    """One MLP (dense or a single expert) of intermediate size ``ffn``."""
    h = model.hidden_size
    matrices = 3 if model.gated_mlp else 2
    biases = (ffn * (2 if model.gated_mlp else 1) + h) if model.linear_bias else 0
    return matrices * h * ffn + biases


def norm_params(model: ModelSpec) -> int:
    """One normalization layer: scale (+ bias for LayerNorm)."""
    return model.hidden_size * (2 if model.norm == "layernorm" else 1)


def count_params(model: ModelSpec) -> ParamCounts:
    """All parameter counts of ``model``."""
    h = model.hidden_size
    n_moe = moe_layer_count(model)
    n_dense = model.num_layers - n_moe
    expert = active_expert = shared = 0
    if model.moe is not None:
        moe = model.moe
        one_expert = mlp_params(model, moe.expert_ffn_hidden_size)
        expert = moe.num_experts * one_expert
        active_expert = moe.top_k * one_expert
        shared_ffn = moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size
        router = h * moe.num_experts
        shared = moe.num_shared_experts * mlp_params(model, shared_ffn) + router
    embedding_matrix = model.vocab_size * h
    embedding = embedding_matrix
    if model.position_embedding == "learned":
        embedding += model.max_position_embeddings * h
    if model.norm == "layernorm" and model.family in ("bloom",):
        embedding += norm_params(model)  # BLOOM's word_embeddings_layernorm
    counts = ParamCounts(
        attention_per_layer=attention_params(model),
        dense_mlp_per_layer=mlp_params(model, model.ffn_hidden_size),
        expert_per_layer=expert,
        active_expert_per_layer=active_expert,
        shared_expert_per_layer=shared,
        norms_per_layer=2 * norm_params(model),
        num_dense_layers=n_dense,
        num_moe_layers=n_moe,
        embedding=embedding,
        lm_head=0 if model.tied_embeddings else embedding_matrix,
        final_norm=norm_params(model),
        embedding_matrix=embedding_matrix,
    )
    if model.hybrid_layers:
        from costmodel import ssm  # lazily: ssm builds on costmodel.compute, which reads ParamCounts

        counts = replace(counts, hybrid_layers_total=ssm.layers_params_total(
            model, counts.attention_per_layer, counts.dense_mlp_per_layer, norm_params(model)))
    return counts

