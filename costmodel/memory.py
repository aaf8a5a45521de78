"""Per-GPU memory: model states under ZeRO 0-3 and activations (Korthikanti et al. 2022).

Model states follow Rajbhandari et al. 2020 (ZeRO, Sec. 3-5) with Megatron's mixed-precision
byte counts (Megatron-Core ``theoretical_memory_usage.py``): BF16 weights (2 B/param), FP32
main gradients (4 B), Adam FP32 master weights + two moments (12 B). ZeRO-1 shards the 12 B,
ZeRO-2 also the gradients, ZeRO-3 also the weights, over the data-parallel (x context-parallel)
group. Activations per layer generalise Korthikanti et al. 2022, Sec. 4.1 / Table 2
(34·s·b·h + 5·a·s²·b bytes) to GQA, gated MLPs and MoE, with FlashAttention (no s x s scores
kept, so the 5·a·s²·b term is gone and selective recompute saves nothing more).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.compute import BF16_BYTES, NVFP4_OPERAND_BYTES, _by_loss, logit_bytes, unfused_attention
from costmodel.flops import attention_v_dim
from costmodel.moe import expert_load
from costmodel.pipeline import argmax3, select3, stage_layer_mix
from costmodel.result import MEMORY_TERMS
from hardware_catalog.schema import ModelSpec

GIB = float(2**30)
WEIGHT_BYTES = 2.0
GRAD_BYTES = 4.0
OPTIMIZER_BYTES = 12.0
OPTIMIZER_STATE_BYTES = {"fp32": OPTIMIZER_BYTES, "remainders": 2.0 + 4.0 + 4.0, "bf16": 2.0 + 2.0}
"""Adam's bytes per owned parameter by ``Layout.optimizer_states``. fp32: FP32 master + m + v
(Megatron-Core ``theoretical_memory_usage.py``: 12 B, sharded by the distributed optimizer).
remainders and bf16 are Apex DistributedFusedAdam's buckets (NVIDIA/apex 810ffae, the commit NeMo
r2.0.0rc1's Dockerfile builds for the 24.07 container; contrib/optimizers/distributed_fused_adam.py
``StateBucket.__init__``): ``param_remainders_shard`` int16 (2 B) when ``store_param_remainders``,
``params_shard`` only when ``store_params``, ``exp_avg_shard`` and ``exp_avg_sq_shard`` in the
optimizer ``dtype`` (4 + 4 B FP32, 2 + 2 B BF16). NeMo 1 (v1.23.0 d2283e3 and r2.0.0rc1 579983f,
nemo/collections/nlp/models/language_modeling/megatron_base_model.py ``setup_optimization``) asks
for remainders when the optimizer dtype is FP32 and the O2 weights BF16, and for no master at all
when the optimizer dtype equals the weights' (BF16)."""


def attention_scores_bytes_per_token(model: ModelSpec, tp, seq_len, unfused):
    """Unfused attention keeps the a x s scores per token for backward: softmax output (2 B),
    dropout mask (1 B) and dropout output (2 B) = Korthikanti's 5·a·s²·b/t term (Table 2);
    2 B without dropout. FlashAttention keeps none of it; selective recompute drops it."""
    per_score = 5.0 if model.dropout else 2.0
    return np.where(unfused, per_score * model.num_attention_heads * np.asarray(seq_len, dtype=np.float64) / np.asarray(tp), 0.0)


def activation_bytes_per_token(model: ModelSpec, tp, sp, moe_layer: bool, fp8=False, imbalance=1.0,
                                fused_attention=True):
    """Bytes one layer keeps per token for the backward pass (no recompute), per GPU.

    Korthikanti Sec. 4.1, per token: attention 11h (+5as scores, gone with FlashAttention),
    MLP 19h, norms 4h = 34h for GPT. Here: norm inputs 2x2h, QKV input 2h, MLP input 2h
    (+ two 1-byte dropout masks) live in the sequence-parallel region (split by TP only with
    SP); Q, K, V (2(a+2g)d), attention output 2·a·d_v and the MLP intermediates (gated: two
    2F inputs of the activation + 2F output = 6F; GeLU: 4F) are split by TP. MoE layers keep
    the busiest EP rank's routed copies (``imbalance`` x k per token, costmodel.moe.MoeShape).
    ``fp8``: TransformerEngine FP8 linear layers (below); ``fused_attention``: a fused kernel
    (FlashAttention, cuDNN) keeps the attention output for its backward (False: unfused).
    """
    h = float(model.hidden_size)
    a = float(model.num_attention_heads)
    g = float(model.kv_heads)
    d = float(model.head_size)
    d_v = float(attention_v_dim(model))
    tp = np.asarray(tp, dtype=np.float64)
    rep_div = np.where(sp, tp, 1.0)
    sp_region = 8.0 * h + (2.0 * h if model.dropout else 0.0)
    if model.mla is not None:
        mla = model.mla
        qkv = 2.0 * a * (2 * (mla.qk_nope_head_dim + mla.qk_rope_head_dim) + mla.v_head_dim)
    else:
        qkv = 2.0 * (a + 2.0 * g) * d
    attention = qkv + 2.0 * a * d_v
    if moe_layer and model.moe is not None:
        moe = model.moe
        Fe = float(moe.expert_ffn_hidden_size)
        Fs = float(moe.num_shared_experts * (moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size))
        per_ffn = 6.0 if model.gated_mlp else 4.0
        # Routed tokens: their permuted input (2h) and expert intermediates, k copies per token.
        mlp = moe.top_k * imbalance * (2.0 * h + per_ffn * Fe) + per_ffn * Fs
    else:
        mlp = (6.0 if model.gated_mlp else 4.0) * float(model.ffn_hidden_size)
    total = sp_region / rep_div + (attention + mlp) / tp
    # FP8 (TransformerEngine): each linear layer saves its input for the weight gradient as
    # the FP8 copy it cast (1 byte), not the BF16 tensor (TE v1.4 module/linear.py: Linear
    # saves inputmat or inputmat_t, both FP8; LayerNormLinear its FP8 ln_out). The QKV and
    # MLP-up inputs (2h, SP region) and the MLP-down input (F, or k*Fe routed) are kept by
    # nothing else, so they shrink to 1 byte. The output projection's input is the attention
    # output, which a fused attention kernel keeps in BF16 for its own backward (TE
    # FusedAttnFunc and flash-attn save q, k, v and out): its FP8 copy comes on top (+a*d_v);
    # under unfused attention nothing else holds it, so it shrinks like the others. Measured on a
    # lent H200 (benchmarks/device_kernels.py --sections saved -> benchmarks/results/
    # h200_saved_activations.json): PyTorch's flash and cuDNN kernels keep their output, and an
    # attention block holds 2.03 bytes per output element with a BF16 projection, 3.03 with one
    # that keeps an FP8 copy as TE's does. Compiled by torch.compile the same block holds 2.03:
    # the partitioner recasts in backward. planner prices every FP8 run by TE's rule, so a
    # compiled one (torchtitan + torch.compile) is over-counted by a*d_v/t per token per layer.
    if model.moe is not None and moe_layer:
        down_in = model.moe.top_k * imbalance * float(model.moe.expert_ffn_hidden_size)
    else:
        down_in = float(model.ffn_hidden_size)
    out_proj_in = np.where(fused_attention, -1.0, 1.0) * a * d_v
    fp8_saving = 2.0 * h / rep_div + (out_proj_in + down_in) / tp
    return total - np.where(fp8, fp8_saving, 0.0)


def recompute_module_savings_per_token(model: ModelSpec, tp, sp, moe_layer: bool, fp8, modules):
    """Bytes per token one layer no longer keeps when selective recompute covers ``modules``
    (bit mask over ``costmodel.layout.RECOMPUTE_MODULES``), against
    ``activation_bytes_per_token`` (Megatron-Core TransformerConfig.recompute_modules).

    Output-discarding modules drop their output, which the next GEMM had saved: layernorm the
    two norm outputs (QKV / MLP inputs, 2h each, FP8 copies of 1 B under FP8), mla_up_proj the
    up-projected Q, K, V, moe_act the activation output (the expert down-projection's input,
    k·Fe). Checkpointed modules keep only their input: mlp (dense layers) and shared_experts
    their intermediates, moe everything between the MoE input and its output. core_attn saves
    nothing more under FlashAttention (the unfused scores are handled with the attention).
    """
    from costmodel.layout import recompute_module_bit

    bit = lambda name: recompute_module_bit(modules, name)
    h = float(model.hidden_size)
    a = float(model.num_attention_heads)
    tp = np.asarray(tp, dtype=np.float64)
    rep_div = np.where(sp, tp, 1.0)
    fp8 = np.asarray(fp8, dtype=np.float64)
    per_ffn = 6.0 if model.gated_mlp else 4.0
    saved = bit("layernorm") * (4.0 - 2.0 * fp8) * h / rep_div
    if model.mla is not None:
        mla = model.mla
        saved = saved + bit("mla_up_proj") * 2.0 * a * (2 * (mla.qk_nope_head_dim + mla.qk_rope_head_dim) + mla.v_head_dim) / tp
    if moe_layer and model.moe is not None:
        moe = model.moe
        Fe = float(moe.expert_ffn_hidden_size)
        Fs = float(moe.num_shared_experts * (moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size))
        act = bit("moe_act") * moe.top_k * Fe * (2.0 - fp8) + bit("shared_experts") * per_ffn * Fs
        whole = moe.top_k * (2.0 * h + per_ffn * Fe - fp8 * Fe) + per_ffn * Fs
        saved = saved + np.where(bit("moe") == 1, whole, act) / tp
    else:
        F = float(model.ffn_hidden_size)
        saved = saved + bit("mlp") * (per_ffn - fp8) * F / tp
    return saved


def full_recompute_bytes_per_token(model: ModelSpec, tp, sp):
    """Full recompute keeps only each layer's input: 2h bytes per token (Korthikanti Table 2,
    '2sbh'), split by TP under sequence parallelism."""
    tp = np.asarray(tp, dtype=np.float64)
    return 2.0 * model.hidden_size / np.where(sp, tp, 1.0)


def inflight_microbatches(stage_rank, pp, vpp, m):
    """Micro-batches whose activations a pipeline stage holds at its peak, in units of that
    stage's full layer set.

    1F1B (Narayanan et al. 2021, Sec. 2.2.1): stage i holds min(m, p - i). Interleaved with v
    chunks, Megatron-Core warms up 2(p - i - 1) + (v - 1)·p chunks plus one in flight, each
    1/v of the stage: for stage 0 that is p·(1 + (p-1)/(p·v)) (Korthikanti Sec. 4.2.3).
    """
    pp = np.asarray(pp, dtype=np.float64)
    vpp = np.asarray(vpp, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64)
    i = np.asarray(stage_rank, dtype=np.float64)
    plain = np.minimum(m, pp - i)
    chunks = 2.0 * (pp - i - 1.0) + (vpp - 1.0) * pp + 1.0
    interleaved = np.minimum(m * vpp, chunks) / vpp
    return np.where(vpp > 1, interleaved, plain)


def zero_divisors(zero, dense_shard, expert_shard):
    """How much ZeRO divides weights, gradients and optimizer states (dense, expert) per layout:
    stage >= 3 shards weights, >= 2 gradients, >= 1 optimizer states (Rajbhandari et al. 2020)."""
    zero = np.asarray(zero)
    one = np.ones_like(np.asarray(dense_shard, dtype=np.float64))
    by_stage = {k: (np.where(zero >= k, dense_shard, one), np.where(zero >= k, expert_shard, one)) for k in (1, 2, 3)}
    return by_stage[3], by_stage[2], by_stage[1]


FP8_WEIGHT_COPY_BYTES = {
    # recipe: (bytes per weight element on Hopper / Ada, on Blackwell sm100 / sm103)
    "delayed": (2.0, 1.0),
    "current": (2.0, 1.0),
    "blockwise": (2.0 + 2.0 * 4.0 / (128.0 * 128.0), 2.0 + 2.0 * 4.0 / (128.0 * 128.0)),
    "mxfp8": (2.0 + 2.0 / 32.0, 2.0 + 2.0 / 32.0),
    "nvfp4": (2.0 * NVFP4_OPERAND_BYTES, 2.0 * NVFP4_OPERAND_BYTES),
}
"""Bytes of the quantised copy TransformerEngine keeps of one weight element, by recipe and GPU
(TransformerEngine v2.9, 70f5366, pytorch/csrc/quantizer.cpp ``create_tensor`` of each
quantizer; the weight quantizer is set to row-wise and, for the dgrad GEMM, column-wise usage:
module/linear.py ``_Linear.forward``). delayed / current (Float8Quantizer,
Float8CurrentScalingQuantizer): the FP8 data (1 B) and, where the GPU runs only TN FP8 GEMMs,
its transpose (1 B): ``with_transpose = columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()``,
which is true from compute capability 10.0 (pytorch/utils.py ``is_non_tn_fp8_gemm_supported``:
sm100-sm119 and sm130+; the catalog's Blackwell parts are sm100 / sm103), so Blackwell keeps the
data alone. blockwise (Float8BlockQuantizer, weights in 128x128 blocks): a row-wise and a
transposed column-wise copy, 1 B each, with one FP32 scale per block each. mxfp8
(MXFP8Quantizer): row-wise and column-wise 1 B copies with one E8M0 byte per 32 elements each.
nvfp4 (NVFP4Quantizer): row-wise and transposed column-wise 4-bit copies with one E4M3 byte per
16 elements each (costmodel.compute.NVFP4_OPERAND_BYTES)."""


def fp8_weight_copy_bytes(ctx, sh, per_layer, n_dense, n_moe):
    """Bytes per GPU that FP8 weights add to (or take from) the BF16 weights ``model_state_bytes``
    counts, for the ``n_dense`` dense and ``n_moe`` MoE layers of a stage (0 under BF16).

    BF16 parameters (``fp8_param_gather`` off): TransformerEngine v2.9 (70f5366)
    module/linear.py ``_Linear.forward`` (also layernorm_linear.py, layernorm_mlp.py
    ``fc1_weight`` / ``fc2_weight``, grouped_linear.py ``weight{i}`` per local expert) asks
    module/base.py ``get_weight_workspace`` for the weight with ``cache_name="weight"`` whenever
    ``is_first_microbatch`` is not None: the first micro-batch quantises the BF16 weight into a
    workspace stored in the module's ``_fp8_workspaces``, later micro-batches reuse it, and
    nothing frees it (cleared only when the recipe type changes, ``init_fp8_metadata``): one copy
    per weight is alive for the whole step, at the activation peak included. Megatron-Core passes
    ``is_first_microbatch`` (core_v0.15.2 extensions/transformer_engine.py TELinear /
    TELayerNormColumnParallelLinear / TEGroupedLinear ``forward``, set on the first micro-batch by
    pipeline_parallel/schedules.py ``forward_step``) unless ``disable_parameter_transpose_cache``
    (default False). Megatron-FSDP frees none of it (distributed/fsdp/.../megatron_fsdp.py
    releases only the transposes of FP8 *parameters*), so under ZeRO-3 the copies are of whole
    layers, sharded by TP / EP only, like the weights TransformerEngine cached.

    FP8 parameters (``fp8_param_gather``: Megatron --fp8-param-gather, TE quantized_model_init):
    ``get_weight_workspace`` returns the quantised parameter itself and caches nothing; the
    parameter holds the same row-wise (and, for dgrad, column-wise) data in place of the BF16
    value, sharded like the weights: ``(copy - 2) / ZeRO-3 divisor`` bytes per weight (0 for
    delayed / current scaling on Hopper, where data + transpose are the BF16 value's 2 bytes).

    Not kept: ZeRO-3 through PyTorch FSDP2 (``fsdp fsdp2``, torchtitan), whose FP8 is torchao's
    Float8Linear (pytorch/ao 7ca1bfb torchao/float8/float8_linear.py
    ``matmul_with_hp_or_float8_args``): it saves the high-precision weight for backward and casts
    it again there, one GEMM at a time (with float8 all-gather the FP8 weight is the gathered
    parameter, freed with the layer); TransformerEngine's own FSDP2 path skips the cache too
    (linear.py on main: ``cache_name = None if (... or self.is_fsdp2)``).

    Counted: the weights of the layers' linear layers (attention projections, dense MLP, shared
    and routed experts; a hybrid model's average pattern layer), not the norms, the router
    (Megatron's TopKRouter GEMM is not an FP8 TE module), the embedding or the LM head, which stay
    BF16 under FP8 (nor the MTP modules, small beside a stage). Per element:
    ``FP8_WEIGHT_COPY_BYTES``.
    """
    batch, counts = ctx.batch, ctx.counts
    fp8 = batch.is_("precision", "fp8")
    if not fp8.any():
        return np.zeros(ctx.n)
    blackwell = ctx.gpu.architecture == "blackwell"
    per_element = np.zeros(ctx.n)
    for name, (hopper, sm100) in FP8_WEIGHT_COPY_BYTES.items():
        per_element = np.where(batch.is_("fp8_recipe", name), sm100 if blackwell else hopper, per_element)
    # Norms are in both kinds of layer; the router is counted with the shared experts (costmodel.params).
    router = float(ctx.model.hidden_size * ctx.model.moe.num_experts) if ctx.model.moe is not None else 0.0
    dense = n_dense * (per_layer.dense_layer - counts.norms_per_layer / ctx.tp)
    dense = dense + n_moe * (per_layer.moe_dense - (counts.norms_per_layer + router) / ctx.tp)
    expert = n_moe * per_layer.moe_expert
    cache = per_element * (dense + expert)
    torchao = (np.asarray(sh.zero) == 3) & batch.is_("fsdp", "fsdp2")
    (w_dense, w_expert), _, _ = sh.state_divisors
    in_place = (per_element - WEIGHT_BYTES) * (dense / w_dense + expert / w_expert)
    fp8_params = np.asarray(batch.fp8_param_gather, dtype=bool)
    return np.where(fp8, np.where(fp8_params, in_place, np.where(torchao, 0.0, cache)), 0.0)


def model_state_bytes(dense_params, expert_params, zero, dense_shard, expert_shard, fp8, divisors=None,
                      grad_bytes=GRAD_BYTES, optimizer_bytes=OPTIMIZER_BYTES):
    """Weights, gradients and optimizer bytes per GPU for the parameters a GPU holds.

    ``dense_params``/``expert_params``: parameters on this GPU after TP/PP/EP splitting;
    ``dense_shard``/``expert_shard``: the ZeRO sharding group sizes (dp·cp, and the expert
    data-parallel size). Under FP8 the BF16 weights stay the primary copy; the FP8 copies
    TransformerEngine keeps of them are ``fp8_weight_copy_bytes``. ``divisors``: a cached
    ``zero_divisors`` result. ``grad_bytes``: bytes per gradient element, 4 for FP32 main grads,
    2 for BF16 gradient buffers (Megatron-Core ``grad_reduce_in_fp32=False``). ``optimizer_bytes``:
    Adam's bytes per parameter (``OPTIMIZER_STATE_BYTES``).
    """
    (w_d, w_e), (g_d, g_e), (o_d, o_e) = divisors or zero_divisors(zero, dense_shard, expert_shard)
    if np.ndim(expert_params) == 0 and expert_params == 0:
        return WEIGHT_BYTES * dense_params / w_d, grad_bytes * dense_params / g_d, optimizer_bytes * dense_params / o_d
    weights = WEIGHT_BYTES * (dense_params / w_d + expert_params / w_e)
    grads = grad_bytes * (dense_params / g_d + expert_params / g_e)
    optim = optimizer_bytes * (dense_params / o_d + expert_params / o_e)
    return weights, grads, optim


# ---------------------------------------------------------------------------------------------
# Per-stage memory of a chunk of layouts, and the fullest stage (what ``evaluate_batch`` reports).


@dataclass(frozen=True, slots=True)
class ActivationBytes:
    """Bytes one layer keeps per token on one GPU, by layer kind (arrays over layouts)."""

    dense: np.ndarray
    """A dense layer without full recompute (selective recompute's savings taken off)."""
    moe: np.ndarray
    """The same for an MoE layer."""
    full: np.ndarray
    """A layer under full recompute: its input alone."""
    logit: np.ndarray
    """Bytes per logit alive at the loss (``compute.logit_bytes``, by loss kernel)."""
    working_dense: np.ndarray
    """A dense layer's activations rebuilt at once in backward under full recompute, per
    micro-batch; without it, the unfused attention scores selective recompute rebuilds (0
    when neither applies)."""


def activation_bytes(ctx, selective) -> ActivationBytes:
    """Per-token activation bytes of each layer kind for ``ctx``'s layouts; ``selective``: the
    ``recompute.SelectiveRecompute`` modules (what they drop is not kept)."""
    model, batch, tp, sp, fp8 = ctx.model, ctx.batch, ctx.tp, ctx.sp, ctx.fp8
    # Stored attention scores (unfused attention only) unless selective recompute drops them.
    unfused = unfused_attention(batch)
    all_scores = attention_scores_bytes_per_token(model, tp, batch.seq_len, unfused) if unfused.any() else 0.0
    dropped = selective.has("core_attn") == 1
    scores = np.where(dropped, 0.0, all_scores)
    a_dense = activation_bytes_per_token(model, tp, sp, moe_layer=False, fp8=fp8, fused_attention=~unfused) + scores
    if model.hybrid_layers:  # the average Mamba / attention / MLP pattern layer (costmodel.ssm)
        from costmodel import ssm

        a_dense = ssm.layer_activation_bytes_per_token(model, tp, sp) + scores * ssm.attention_share(model)
    a_moe = activation_bytes_per_token(model, tp, sp, moe_layer=True, fp8=fp8,
                                       imbalance=expert_load(batch), fused_attention=~unfused) + scores
    modules = selective.modules
    if np.any(modules > 1) and not model.hybrid_layers:
        a_dense = a_dense - recompute_module_savings_per_token(model, tp, sp, False, fp8, modules)
        a_moe = a_moe - recompute_module_savings_per_token(model, tp, sp, True, fp8, modules)
    return ActivationBytes(
        dense=a_dense,
        moe=a_moe,
        full=full_recompute_bytes_per_token(model, tp, sp),
        logit=logit_bytes(batch),
        # Full recompute rebuilds one layer's activations at a time during backward; selective
        # recompute of unfused attention rebuilds one layer's scores (Korthikanti et al. 2022
        # Sec. 4.2: the 5as term is recomputed, so it is alive for one layer at a time).
        working_dense=np.where(ctx.full, ctx.tokens_mb * a_dense, np.where(dropped, ctx.tokens_mb * all_scores, 0.0)),
    )


def stage_activations(ctx, act: ActivationBytes, share, n_dense, n_moe, rank):
    """Activation bytes of a stage at its peak: what each micro-batch keeps (the ``share`` of
    layers under full recompute keep their input only) times the micro-batches in flight on
    pipeline rank ``rank``, plus the layer that full recompute rebuilds."""
    tokens_mb, full = ctx.tokens_mb, ctx.full
    if ctx.model.moe is None:
        kept = tokens_mb * n_dense * (share * act.full + (1.0 - share) * act.dense)
        working = act.working_dense
    else:
        kept = tokens_mb * (share * (n_dense + n_moe) * act.full + (1.0 - share) * (n_dense * act.dense + n_moe * act.moe))
        working = np.where(full, tokens_mb * np.maximum(act.dense, np.where(n_moe > 0, act.moe, 0.0)), act.working_dense)
    if np.any(ctx.batch.cpu_offload_layers > 0):  # offloaded layers' activations wait in host memory
        from costmodel import offload

        kept = kept * offload.kept_fraction(ctx, n_dense + n_moe)
    inflight = inflight_microbatches(rank, ctx.pp, ctx.vpp, ctx.m)
    return kept * inflight + working


def pipeline_runtime_bytes(ctx, sh, rank, first_stage, last_stage):
    """(activation-like, logit) bytes that torch.distributed.pipelining's ``PipelineStage``
    holds on pipeline rank ``rank`` beyond what the layers save for backward, where a layout
    runs on it: ZeRO-3 under a pipeline (``Sharding.pipelined_fsdp``, torchtitan's FSDP2 + PP).

    From torch/distributed/pipelining/stage.py: ``_prepare_forward_infra`` allocates an
    activation receive buffer for every one of the ``m`` micro-batches of a non-first stage, and
    ``_prepare_backward_infra`` a gradient receive buffer for every micro-batch of a non-last
    stage, both kept for the whole step; ``forward_one_chunk`` keeps each micro-batch's stage
    output in ``fwd_cache`` until its backward: on the last stage the BF16 logits of the
    micro-batch at the loss, which an unpipelined loop drops before backward (torchtitan
    train.py: ``del pred``). (PyTorch releases of 2024 also kept every micro-batch's logits in
    ``output_chunks`` to return them; torchtitan now steps with ``return_outputs=False``, so
    they are not counted.) A boundary
    tensor is [mbs, seq/cp, h] BF16, split by TP under sequence parallelism (torchtitan's
    TransformerBlock output is a sequence shard). The receive buffers of the micro-batches in
    flight are the first layer's saved input, counted with the activations already. With ``v``
    chunks per rank every chunk has its own buffers; the rank's in-flight micro-batches
    (``inflight_microbatches``, in whole stages) are ``inflight * v`` chunks.
    """
    zero_bytes = np.zeros_like(ctx.tokens_mb, dtype=np.float64)
    on = np.asarray(sh.pipelined_fsdp)
    if not on.any():
        return zero_bytes, zero_bytes
    boundary = ctx.act_bytes / np.where(ctx.sp, ctx.tp, 1.0)
    m, v = ctx.m, ctx.vpp
    inflight = inflight_microbatches(rank, ctx.pp, v, m)
    first, last = (np.asarray(f, dtype=np.float64) for f in (first_stage, last_stage))
    receiving = v - first  # chunks fed by another stage
    sending = v - last  # chunks whose output goes to another stage
    buffers = (m - inflight) * receiving + m * sending + inflight * sending
    # fwd_cache: the BF16 logits of the micro-batch at the loss (a fused loss counts them already).
    kept_logits = BF16_BYTES - _by_loss(ctx.batch, 0.0, BF16_BYTES, 0.0)
    logits = last * kept_logits * ctx.tokens_mb * ctx.model.vocab_size / ctx.tp
    return np.where(on, boundary * buffers, 0.0), np.where(on, logits, 0.0)


def stage_model_states(ctx, sh, per_layer, params, n_moe):
    """(weights, gradients, optimizer, the rank's own weights) bytes of a stage holding ``params``
    (dense, expert) under ``sh`` (``data_parallel.Sharding``); ``per_layer``:
    ``stage_params.LayerParams``. The weights count ZeRO-3's gathered layers; its own do not."""
    weights, grads, optim = model_state_bytes(
        params[0], params[1], sh.zero, sh.dense_shard, sh.expert_shard, ctx.fp8, divisors=sh.state_divisors,
        grad_bytes=sh.grad_bytes, optimizer_bytes=sh.optimizer_bytes,
    )
    # ZeRO-3 materialises the current and the prefetched layer in full (under a pipeline the
    # whole stage is gathered after a backward, counted by state_divisors): beyond the shard of
    # them each rank holds, 1 - 1/shard of each (nothing where a group of one holds it all).
    dense_gathered = 1.0 - 1.0 / np.maximum(sh.dense_shard, 1.0)
    expert_gathered = 1.0 - 1.0 / np.maximum(sh.expert_shard, 1.0)
    layer_params = np.where(n_moe > 0, per_layer.moe_dense * dense_gathered + per_layer.moe_expert * expert_gathered,
                            per_layer.dense_layer * dense_gathered)
    gathered = np.where((sh.zero == 3) & ~sh.pipelined_fsdp, 2.0 * WEIGHT_BYTES * layer_params, 0.0)
    return weights + gathered, grads, optim, weights


def stage_memory(ctx, act, share, sh, per_layer, n_layers, params, rank, first_stage, last_stage) -> dict:
    """GiB of each of ``MEMORY_TERMS`` and ``peak`` on one pipeline stage."""
    nd, nm = stage_layer_mix(ctx.model, ctx.counts, n_layers, first_stage)
    activations = stage_activations(ctx, act, share, nd, nm, rank)
    # Logits on the last stage, [s, b, V/t] at ``act.logit`` bytes each: FP32 for Megatron's
    # unfused loss (Korthikanti Sec. 4.3, 4sbv/t).
    logits = np.where(last_stage, act.logit * ctx.tokens_mb * ctx.model.vocab_size / ctx.tp, 0.0)
    buffers, kept_logits = pipeline_runtime_bytes(ctx, sh, rank, first_stage, last_stage)
    activations = activations + buffers
    logits = logits + kept_logits
    weights, grads, optim, own_weights = stage_model_states(ctx, sh, per_layer, params, nm)
    weights = weights + fp8_weight_copy_bytes(ctx, sh, per_layer, nd, nm)
    mem = {
        "weights": weights / GIB,
        "gradients": grads / GIB,
        "optimizer": optim / GIB,
        "activations": activations / GIB,
        "logits": logits / GIB,
    }
    # Fragmentation hits the many short-lived activation blocks; weights, gradient and
    # optimizer buffers are few large allocations (Megatron allocates them contiguously).
    mem["workspace"] = ctx.calib.workspace_gib + ctx.calib.fragmentation * (mem["activations"] + mem["logits"])
    mem["peak"] = sum(mem[k] for k in MEMORY_TERMS)
    # What a checkpoint saves of this rank: its own shard of the weights and the optimizer
    # states, not the layers ZeRO-3 gathers for a moment nor the FP8 copies cast from them.
    mem["held_state"] = (own_weights + optim) / GIB
    return mem


def peak_memory(ctx, split, full_recompute, selective, sh, per_layer, params):
    """(memory GiB by term, fullest stage index): the most loaded of the first, middle and last
    stages; ``params``: their (dense, expert) parameters per GPU."""
    act = activation_bytes(ctx, selective)
    stages = (
        (split.first, 0.0, True, split.single),
        (split.middle, 1.0, False, False),
        (split.last, ctx.pp - 1.0, False, True),
    )
    mems = [
        stage_memory(ctx, act, full_recompute.share(n_layers), sh, per_layer, n_layers, p, rank, first, last)
        for (n_layers, rank, first, last), p in zip(stages, params)
    ]
    fullest = argmax3(*split.present(*(mem["peak"] for mem in mems)))
    return {k: select3(fullest, *(mem[k] for mem in mems)) for k in list(MEMORY_TERMS) + ["peak", "held_state"]}, fullest


def layer_bytes_per_token(ctx):
    """(dense, MoE) bytes one layer keeps per token for backward, before selective recompute
    (a hybrid model's average pattern layer; full recompute: its input): what activation
    offload copies to the host and back (costmodel.offload)."""
    from costmodel import ssm

    model, tp, sp = ctx.model, ctx.tp, ctx.sp
    if model.hybrid_layers:
        dense = moe = ssm.layer_activation_bytes_per_token(model, tp, sp)
    else:
        fused = ~unfused_attention(ctx.batch)
        dense = activation_bytes_per_token(model, tp, sp, moe_layer=False, fp8=ctx.fp8, fused_attention=fused)
        moe = activation_bytes_per_token(model, tp, sp, moe_layer=True, fp8=ctx.fp8, fused_attention=fused)
    full = full_recompute_bytes_per_token(model, tp, sp)
    return np.where(ctx.full, full, dense), np.where(ctx.full, full, moe)
