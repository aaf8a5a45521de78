"""FP8 scaling recipes: what each costs in quantisation beyond the delayed recipe (vectorized).

costmodel.compute prices every FP8 GEMM input (and, in backward, every gradient input) as one
memory-bound cast: read the BF16 tensor, write the FP8 copy, the amax taken in the same kernel,
3 bytes per element. That is TransformerEngine's delayed scaling (DelayedScaling: the scale
comes from an amax history, so the cast needs no look at the tensor first). The other recipes
(transformer_engine/common/recipe/__init__.py; TE's quantizers in transformer_engine/pytorch/
tensor/) move more:

* current (Float8CurrentScaling, tensorwise): the scale is the tensor's own amax, so an amax
  kernel reads the BF16 tensor before the cast reads it again: +2 bytes per element. Inputs in
  the sequence-parallel region are quantised after the all-gather with the amax reduced over
  the TP group (the quantizer's amax_reduction_group): one small all-reduce each, latency-bound.
* blockwise (Float8BlockScaling, DeepSeek-V3 Sec. 3.3.2: 1x128 activation tiles, 128x128 weight
  blocks): scales computed in the cast kernel, one FP32 scale per 128 elements for the row-wise
  and the column-wise copy: +2·4/128 bytes per element.
* mxfp8 (MXFP8BlockScaling, OCP MX v1.0: 1x32 blocks, E8M0 scales): scales computed in the
  cast kernel, one byte per 32 elements for each of the two copies: +2/32 bytes per element.
* nvfp4 (NVFP4BlockScaling; TE pytorch/csrc/quantizer.cpp NVFP4Quantizer::quantize_impl):
  an amax kernel reads the BF16 tensor (nvte_hadamard_transform_amax: the amax and that of its
  Hadamard transform), then one kernel reads it again and writes the row-wise and the
  Hadamard-transformed column-wise 4-bit copies with their 1x16 E4M3 scales, 2 x 0.5625 bytes:
  2 + 2 + 1.125 = 5.125 bytes against delayed's 3, +2.125. Sequence-parallel inputs reduce
  their amax over TP as under current scaling.
The GEMMs themselves run at the FP8 rate in every FP8 recipe (MX scales are applied in Blackwell's
tensor cores; blockwise scales in the GEMM's epilogue promotion, DeepGEMM).

In an MoE layer the recipe also sets how many kernels quantise the experts' inputs: TE's
GroupedLinear quantises each local expert's slice as its own tensor, in one fused launch under
delayed scaling only (``KERNELS_PER_TENSOR``, ``per_expert_kernels``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from costmodel import collectives
from costmodel.compute import BF16_BYTES, CUDA_GRAPH_SAVING_US, FP8_BYTES, NVFP4_OPERAND_BYTES, LayerTimes
from costmodel.flops import attention_v_dim
from costmodel.options import FP8_RECIPES
from costmodel.placement import group_span

EXTRA_BYTES_PER_ELEMENT = {
    "delayed": 0.0,
    "current": BF16_BYTES,
    "blockwise": 2.0 * 4.0 / 128.0,
    "mxfp8": 2.0 * 1.0 / 32.0,
    # An amax read of the BF16 tensor and two 4-bit copies, less the FP8 copy delayed writes.
    "nvfp4": BF16_BYTES + 2.0 * NVFP4_OPERAND_BYTES - FP8_BYTES,
}
"""Bytes per quantised element beyond the delayed recipe's 3 (see the module docstring)."""

KERNELS_PER_TENSOR = {
    "delayed": 0.0,
    "current": 3.0,
    "blockwise": 1.0,
    "mxfp8": 1.0,
    "nvfp4": 2.0,
}
"""Kernels a recipe launches per tensor when a list of tensors is quantised one by one
(TransformerEngine pytorch/csrc/extensions/cast.cpp multi_tensor_quantize_impl: "only have fused
kernel for FP8 delayed scaling", one nvte_multi_cast_transpose over the whole list; every other
quantizer runs per tensor): current scaling computes the amax, then the scale, then casts
(quantizer.cpp Float8CurrentScalingQuantizer::quantize_impl: nvte_compute_amax_with_config,
nvte_compute_scale_from_amax, nvte_quantize_v2); blockwise and MXFP8 compute their scales in
the cast; NVFP4 runs its amax (with the Hadamard one) and one fused cast. Delayed: 0 beyond the one fused launch the layer already counts."""

MOE_GROUPED_QUANTISATIONS = 2.0
"""Grouped quantisations of an MoE layer per pass: forward, the fc1 and fc2 inputs; backward,
the gradients of the fc2 and fc1 outputs (TransformerEngine _GroupedLinear forward / backward:
tex.split_quantize of the input and of grad_output; weights are cast once per step)."""

CPP_KERNEL_US = 3.8
"""GPU time of one short kernel in a chain of dependent kernels that C++ launches back to back
from a stream (TransformerEngine's per-tensor quantisation loop, cast.cpp multi_tensor_quantize_impl:
no Python between them): NVIDIA's 'Getting Started with CUDA Graphs' (2019) measures 3.8 us per
kernel (3.4 us from a graph: ``CUDA_GRAPH_SAVING_US``), a 2.9 us kernel alone. The data such a kernel
moves is priced by ``EXTRA_BYTES_PER_ELEMENT``; this is its fixed cost. Not ``kernel_overhead_us``,
which is fitted to eager layers whose operators each pass through Python. Interval 3-5 us."""

SP_QUANTISED_INPUTS_PER_LAYER = 2.0
"""GEMM inputs quantised after a sequence-parallel all-gather in an attention + MLP layer (the
QKV and MLP-up inputs); each needs its amax reduced over TP under current scaling."""


def quantised_elements_per_token(model, moe_layer: bool) -> float:
    """Elements of one layer's forward FP8 GEMM inputs per token before TP (as costmodel.compute
    casts them): QKV input h, output-projection input a·d_v, MLP up input h, down input F (MoE:
    top-k routed copies of h and Fe, and the shared expert's h + Fs); a hybrid model's average
    pattern layer (costmodel.ssm) quantises h and the down-projection input of each layer."""
    h = float(model.hidden_size)
    attention = h + model.num_attention_heads * float(attention_v_dim(model))
    if model.hybrid_layers:
        from costmodel import ssm

        kinds = ssm.layer_kinds(model)
        n = float(sum(kinds.values()))
        mamba = h + float(model.mamba.d_inner) if model.mamba is not None else 0.0
        return (kinds["*"] * attention + kinds["-"] * (h + model.ffn_hidden_size) + kinds["M"] * mamba) / n
    if moe_layer and model.moe is not None:
        moe = model.moe
        Fs = float(moe.num_shared_experts * (moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size))
        return attention + moe.top_k * (h + moe.expert_ffn_hidden_size) + (h + Fs if Fs else 0.0)
    return attention + h + float(model.ffn_hidden_size)


def recipe_cost(ctx, moe_layer: bool):
    """(forward, backward) seconds per layer and micro-batch the FP8 recipe adds over delayed
    scaling: the extra HBM bytes of its casts (backward quantises the output gradients, as many
    elements again, and re-reads nothing else: 2x forward as compute's elementwise backward), and
    under current scaling the TP amax all-reduces of the sequence-parallel inputs."""
    batch = ctx.batch
    fp8 = batch.is_("precision", "fp8")
    extra = np.zeros(ctx.n)
    for name in FP8_RECIPES:
        extra = np.where(batch.is_("fp8_recipe", name), EXTRA_BYTES_PER_ELEMENT[name], extra)
    bandwidth = ctx.gpu.memory_bandwidth_gbps * 1e9 * ctx.calib.memory_bound_efficiency
    elements = quantised_elements_per_token(ctx.model, moe_layer)
    fwd = np.where(fp8, ctx.tokens_mb * extra * elements / ctx.tp / bandwidth, 0.0)
    current = fp8 & (batch.is_("fp8_recipe", "current") | batch.is_("fp8_recipe", "nvfp4")) & ctx.sp & (ctx.tp > 1)
    if current.any():
        tp_local, tp_nodes = group_span(batch.tp, 1, ctx.domain)
        amax, _ = collectives.collective_time("all_reduce", 4.0, tp_local, tp_nodes, ctx.fabric)
        inputs = SP_QUANTISED_INPUTS_PER_LAYER / (2.0 if ctx.model.hybrid_layers else 1.0)
        fwd = fwd + np.where(current, inputs * amax, 0.0)
    return fwd, 2.0 * fwd


def per_expert_kernels(ctx):
    """Kernels per pass one MoE layer's grouped quantisations launch beyond the fused one that
    delayed scaling runs (``KERNELS_PER_TENSOR`` for each of the ``costmodel.moe.quantised_groups``
    expert slices, less that one launch), where the layer runs FP8."""
    from costmodel.moe import quantised_groups

    batch = ctx.batch
    per_tensor = np.zeros(ctx.n)
    for name in FP8_RECIPES:
        per_tensor = np.where(batch.is_("fp8_recipe", name), KERNELS_PER_TENSOR[name], per_tensor)
    groups = quantised_groups(ctx.model, batch)
    extra = np.maximum(per_tensor * groups - 1.0, 0.0)
    return np.where(batch.is_("precision", "fp8"), MOE_GROUPED_QUANTISATIONS * extra, 0.0)


def with_recipe(ctx, dense: LayerTimes, moe: LayerTimes) -> tuple[LayerTimes, LayerTimes]:
    """The layer times with the recipe's quantisation added (unchanged under delayed scaling)."""
    if not np.any(ctx.batch.is_("precision", "fp8") & ~ctx.batch.is_("fp8_recipe", "delayed")):
        return dense, moe
    d_fwd, d_bwd = recipe_cost(ctx, False)
    dense2 = replace(dense, forward=dense.forward + d_fwd, backward=dense.backward + d_bwd)
    if moe is dense:
        return dense2, dense2
    m_fwd, m_bwd = recipe_cost(ctx, True)
    # Each per-expert kernel is a short dependent kernel launched back to back from C++
    # (``CPP_KERNEL_US``, less what a CUDA graph saves); the backward's two grouped quantisations
    # launch as many as the forward's.
    per_kernel = (CPP_KERNEL_US - np.where(ctx.batch.cuda_graphs, CUDA_GRAPH_SAVING_US, 0.0)) * 1e-6
    launches = per_expert_kernels(ctx) * per_kernel
    return dense2, replace(moe, forward=moe.forward + m_fwd + launches, backward=moe.backward + m_bwd + launches)
