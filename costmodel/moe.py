"""Mixture-of-Experts layers in one place: how many tokens each expert sees, how its GEMMs run,
and what the host does while they run (vectorized over layouts).

``MoeShape`` is the one count the other mechanisms read: the routed tokens per local expert on
the busiest expert-parallel rank (the balanced mean times ``moe_imbalance``). The expert GEMMs
(here), the token all-to-alls (``costmodel.expert_parallel``) and the expert activations
(``costmodel.memory``) all take it from ``moe_shape`` / ``expert_load``. This is the only module
that reads ``batch.moe_grouped_gemm``, ``batch.moe_imbalance`` and the token-drop options.

Mechanisms, each with its source:

* tokens per expert: MoE parallel folding (Megatron-Core) spreads a micro-batch's routed copies
  over ep x etp ranks; the busiest rank gets ``moe_imbalance`` times the mean (every rank waits
  for it at the combine), capped at the capacity factor when tokens are dropped, exactly the
  capacity when padded to it (``expert_load``);
* expert GEMM efficiency by tokens per expert: an M-grouped GEMM pads each expert's rows to its
  M tile, e(M) = e · M / (M + M0) (DeepGEMM's grouped-GEMM tables, ``EXPERT_M_TILE``);
* backward as its own GEMMs: dgrad like the forward, wgrad reducing over one expert's tokens
  (short reductions pay the per-tile cost, ``costmodel.compute.GEMM_K_OVERHEAD``) and adding
  into the FP32 main gradient, memory-bound when the tokens are few; not 2 x forward;
* per-expert calls: TransformerEngine's GroupedLinear loops over the local experts, one cuBLAS
  GEMM each (``EXPERT_CALL_US``); a fused grouped kernel launches once;
* the host timeline: the dropless dispatchers that need token counts on the host sync it once
  per MoE forward, so the host cannot run ahead there; a layer is host-bound when issuing its
  operators takes longer than running them (``HOST_US_PER_OP``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.compute import (BF16_BYTES, LayerTimes, bf16_gemm_efficiency, dense_layer_parts, gemm_time,
                               launch_gap_seconds)
from costmodel.layout import LayoutBatch
from hardware_catalog.schema import ModelSpec

EXPERT_M_TILE = 128.0
"""Rows at which an M-grouped expert GEMM runs at half its large-M efficiency, e(M) = e·M/(M+M0).
DeepGEMM's published H800 FP8 grouped GEMMs (README, N=4096 K=7168, TFLOP/s of 1979): 932 at
256 rows per group, 1040 at 512, 1233 at 1024, 1288 at 4096, 1297 at 8192, i.e. 0.47, 0.53,
0.62, 0.65, 0.66 of peak; e_max 0.67 and M0 = 128 (its M block, the padding unit of the
contiguous layout) give 0.45, 0.53, 0.59, 0.65, 0.66. A single dense BF16 cuBLAS GEMM loses less
at few rows: on a lent H200 (benchmarks/results/h200_kernel_sweep.json, median over 18 layer shapes)
0.64 at 512 rows, 0.70 at 1,024, 0.71 from 2,048. BF16 grouped GEMMs of 8 experts on the same
H200 (fc1 4096 -> 4096 and fc2 2048 -> 4096, --sections grouped): fused (torch._grouped_mm) 0.16,
0.36-0.41, 0.60-0.68, 0.67-0.72, 0.69-0.74 and 0.73-0.75 of peak at 64, 128, 256, 512, 1,024 and
2,048 rows per expert; one cuBLAS GEMM per expert from a CUDA graph 0.14-0.18, 0.26-0.31, 0.43-0.48,
0.63-0.72, 0.67-0.73. From 256 rows the fused BF16 kernel is nearer its plateau than DeepGEMM's FP8
one (M0 about 30), but below 256 it falls faster than any M / (M + M0). M0 = 30 for BF16 moved the
GPT-OSS rows from +1.0% to +2.5% and Mixtral's from +3.8% to +4.3% in sample (leave one source out
3.2% -> 3.1%, by other folds' refits), so one M0 serves both."""

EXPERT_CALL_US = 28.0
"""Microseconds each local expert beyond the first adds to every grouped GEMM call when
TransformerEngine runs it as a loop of cuBLASLt GEMMs over 4 streams (nvte_multi_tensor_gemm,
transformer_engine/common/gemm/cublaslt_gemm.cu): per-expert setup, scale handling and the
stream hand-offs. TE PR #3134 (SM100, 8 experts x 128 tokens, N = K = 2048): 0.267 ms as the
loop against 0.069 ms as one CUTLASS launch, (0.267 - 0.069) / 7 = 28 us; its other rows give
25-33 us. A fused grouped kernel pays one launch (``Calibration.kernel_overhead_us``)."""

GROUPED_GEMM_CALLS = 6
"""Grouped GEMM calls per MoE layer per micro-batch: fc1 and fc2 forward, their dgrad and their
wgrad."""

HOST_US_PER_OP = 12.0
"""Host microseconds to issue one operator of a Megatron-Core / TransformerEngine layer: Python
module code, PyTorch dispatch and cudaLaunchKernel (5-10 us per eager operator, PyTorch
'Accelerating PyTorch with CUDA Graphs'; TE's module wrappers add a few more; a lent H200 issued
a trivial in-place add through PyTorch in 6.8 us, benchmarks/results/h200_kernel_sweep.json).
The GPU never waits for the host while the host runs ahead; after a sync it can (Megatron-Core MoE README,
'CPU overhead bottleneck')."""

HOST_SYNC_OPS = 2.0
"""What one host sync costs the GPU in operators' host time: the device-to-host copy of the
token counts returns, then the host issues the all-to-all before the GPU has work again."""


@dataclass(frozen=True, slots=True)
class MoeShape:
    """Routed-token counts of one MoE layer, one micro-batch, on the busiest EP rank."""

    local_experts: np.ndarray
    """E / ep experts on each rank."""
    tokens_per_expert: np.ndarray
    """Routed tokens each local expert runs on the busiest rank (the GEMMs' M)."""
    routed_tokens: np.ndarray
    """Routed token copies the busiest rank holds: local experts x tokens per expert."""
    imbalance: np.ndarray
    """Busiest rank's routed rows over the balanced mean (``expert_load``)."""


def moe_shape(model: ModelSpec, batch: LayoutBatch, tokens, tp) -> MoeShape:
    """``MoeShape`` for ``tokens`` of a micro-batch on one GPU (b·s/c) and TP degree ``tp``.

    With MoE parallel folding (Megatron-Core) the expert layer spreads the micro-batch's tokens
    over t·c·dp ranks as ep x etp x expert-dp: a rank receives tokens·k/t routed copies for its
    E/ep experts (each split over etp), k·tokens·ep·etp / (t·E) per expert when balanced."""
    moe = model.moe
    ep = batch.ep.astype(np.float64)
    etp = batch.etp.astype(np.float64)
    load = expert_load(batch)
    local = float(moe.num_experts) / ep
    per_expert = tokens * float(moe.top_k) * ep * etp / (tp * float(moe.num_experts)) * load
    return MoeShape(local, per_expert, local * per_expert, load)


def expert_load(batch: LayoutBatch) -> np.ndarray:
    """Routed rows the busiest expert-parallel rank runs, over the balanced mean: the router's
    ``moe_imbalance`` when dropless; at most the capacity factor F when tokens past capacity are
    dropped (Megatron-Core moe_utils.get_capacity: F x tokens x top_k / experts per expert); F
    exactly when every expert is padded to its capacity (token_dispatcher.py drop_and_pad), a
    rank loaded below capacity running padding rows too. The busiest of ep ranks holds at most
    every routed token, ep times the mean, so the imbalance is capped at ep (at EP 1 the one rank
    is the mean)."""
    imbalance = np.minimum(np.asarray(batch.moe_imbalance, dtype=np.float64), np.asarray(batch.ep, dtype=np.float64))
    factor = np.asarray(batch.moe_capacity_factor, dtype=np.float64)
    capped = np.where(factor > 0.0, np.minimum(imbalance, factor), imbalance)
    return np.where(padded_to_capacity(batch), factor, capped)


def padded_to_capacity(batch: LayoutBatch) -> np.ndarray:
    """Layouts whose experts run exactly their capacity: padding on, with a capacity factor."""
    return np.asarray(batch.moe_pad_to_capacity, dtype=bool) & (np.asarray(batch.moe_capacity_factor) > 0.0)


def expert_gemm_efficiency(tokens_per_expert, efficiency):
    """Large-K efficiency ``efficiency`` of an M-grouped GEMM whose groups hold
    ``tokens_per_expert`` rows: e · M / (M + M0) (``EXPERT_M_TILE``)."""
    return efficiency * tokens_per_expert / (tokens_per_expert + EXPERT_M_TILE)


def wgrad_time(k_in, tokens, n_out, peak, efficiency, hbm, elem):
    """(seconds, FLOPs) of one expert's weight gradient dW[k_in x n_out] = X^T · dY, a reduction
    over its ``tokens``: the GEMM's compute with the per-tile cost of a short reduction, or its
    traffic (both inputs once, and the FP32 main gradient read and written: Megatron's
    gradient-accumulation fusion adds into it), whichever is slower."""
    seconds, flops = gemm_time(k_in, tokens, n_out, peak, efficiency, hbm, elem)
    traffic = ((k_in + n_out) * tokens * elem + k_in * n_out * 8.0) / hbm
    return np.maximum(seconds, traffic), flops


@dataclass(frozen=True, slots=True)
class ExpertGemms:
    """Seconds (and forward FLOPs) of the routed experts' GEMMs on the busiest rank."""

    forward: np.ndarray
    backward: np.ndarray
    """dgrad + wgrad, each priced as its own GEMM."""
    flops_forward: np.ndarray
    calls: np.ndarray
    """Seconds the per-expert calls of the loop add over one fused launch (forward + backward)."""


def expert_gemms(model: ModelSpec, batch: LayoutBatch, shape: MoeShape, kern, calib) -> ExpertGemms:
    """The routed experts' GEMMs: fc1 (h -> up, gated: 2·Fe) and fc2 (Fe -> h) per local expert,
    each split over etp, with M = tokens per expert."""
    h = float(model.hidden_size)
    Fe = float(model.moe.expert_ffn_hidden_size)
    etp = batch.etp.astype(np.float64)
    up = (2.0 if model.gated_mlp else 1.0) * Fe / etp
    down_in = Fe / etp
    m = shape.tokens_per_expert
    eff = expert_gemm_efficiency(m, kern.eff)
    t_fc1, f_fc1 = gemm_time(m, h, up, kern.peak, eff, kern.hbm, kern.elem)
    t_fc2, f_fc2 = gemm_time(m, down_in, h, kern.peak, eff, kern.hbm, kern.elem)
    # dgrad: dX = dY · W^T, the forward's shape with K and N swapped.
    d_fc2, _ = gemm_time(m, h, down_in, kern.peak, eff, kern.hbm, kern.elem)
    d_fc1, _ = gemm_time(m, up, h, kern.peak, eff, kern.hbm, kern.elem)
    # wgrad: reduces over the expert's M tokens.
    w_fc1, _ = wgrad_time(h, m, up, kern.peak, kern.eff, kern.hbm, kern.elem)
    w_fc2, _ = wgrad_time(down_in, m, h, kern.peak, kern.eff, kern.hbm, kern.elem)
    local = shape.local_experts
    loop = batch.is_("moe_grouped_gemm", "loop")
    # The loop's per-expert cost is host work (cuBLASLt setup, scales, stream hand-offs: an eager
    # benchmark, EXPERT_CALL_US); replayed from a CUDA graph, each GEMM costs its launch gap.
    per_gemm = np.where(layer_graphed(batch), launch_gap_seconds(batch, calib), EXPERT_CALL_US * 1e-6)
    per_call = np.where(loop, np.maximum(local - 1.0, 0.0) * per_gemm, 0.0)
    calls_fwd, calls_bwd = 2.0 * per_call, (GROUPED_GEMM_CALLS - 2.0) * per_call
    return ExpertGemms(
        forward=local * (t_fc1 + t_fc2) + calls_fwd,
        backward=local * (d_fc1 + d_fc2 + w_fc1 + w_fc2) + calls_bwd,
        flops_forward=local * (f_fc1 + f_fc2),
        calls=calls_fwd + calls_bwd,
    )


def quantised_groups(model: ModelSpec, batch: LayoutBatch) -> np.ndarray:
    """Tensors each grouped quantisation of an MoE layer splits into: TransformerEngine's
    GroupedLinear (the ``loop``) quantises every local expert's slice as its own tensor
    (transformer_engine/pytorch/module/grouped_linear.py: tex.split_quantize with one quantizer
    per GEMM), E / ep of them; a fused grouped kernel takes the routed tokens as one."""
    local = float(model.moe.num_experts) / batch.ep.astype(np.float64)
    return np.where(batch.is_("moe_grouped_gemm", "loop"), local, 1.0)


def syncs_host(batch: LayoutBatch) -> np.ndarray:
    """Where an MoE forward syncs the host: the alltoall and allgather dispatchers copy the
    per-expert token counts to the host for their all-to-all splits and for the grouped GEMM's
    splits (Megatron-Core token_dispatcher.py: cuda_sync_point 'before_ep_alltoall' when
    dropless with EP, 'before_finish' without, 'before_permutation_1' when dropping without
    padding), and TransformerEngine's per-expert loop needs the splits on the host whatever the
    dispatcher. DeepEP / HybridEP with a fused grouped GEMM keep the counts on the device.
    Padded to capacity, the alltoall dispatcher builds its counts on the host from the
    capacity (torch.full, cuda_sync_point 'no_sync'; so does HybridEP), and the loop's splits
    are those; the allgather dispatcher copies its counts back in every mode."""
    device_side = (batch.is_("moe_dispatcher", "deepep") | batch.is_("moe_dispatcher", "hybridep"))
    fused = batch.is_("moe_grouped_gemm", "fused")
    padded = padded_to_capacity(batch) & ~batch.is_("moe_dispatcher", "allgather")
    return ~(device_side & fused) & ~padded


def layer_graphed(batch: LayoutBatch) -> np.ndarray:
    """Where CUDA graphs hold the whole MoE layer: graphs on and no host sync in it (a graph
    cannot hold a device-to-host copy: TransformerEngine make_graphed_callables, Megatron-Core
    cuda_graphs.py; Megatron-Core v0.16 asserts 'moe cuda graph is only supported with
    drop-padding MoE')."""
    return np.asarray(batch.cuda_graphs, dtype=bool) & ~syncs_host(batch)


def host_bound(layer: LayerTimes, host_ops_forward, synced) -> LayerTimes:
    """The layer with the host timeline applied: each pass takes the longer of running its
    kernels and issuing its ``host_ops_forward`` operators (backward: twice as many) at
    ``HOST_US_PER_OP``; where the forward syncs the host, the GPU also waits for the operators
    issued after the sync (``HOST_SYNC_OPS``). Step time is then max(GPU, host) layer by layer,
    which for identical layers is the max of the two timelines."""
    host_fwd = host_ops_forward * HOST_US_PER_OP * 1e-6
    forward = np.maximum(layer.forward, host_fwd) + np.where(synced, HOST_SYNC_OPS * HOST_US_PER_OP * 1e-6, 0.0)
    backward = np.maximum(layer.backward, 2.0 * host_fwd)
    return LayerTimes(forward, backward, layer.attention_forward, layer.flops_forward, layer.tp_neighbour_gemms,
                      layer.module_forward, layer.module_flops)


MOE_EXTRA_KERNELS_PER_LAYER = 18.0
"""Kernels an MoE layer launches beyond a dense MLP's (Megatron-Core MoELayer with the
all-to-all dispatcher; its up/activation/down kernels become the grouped GEMMs' and count as
the dense ones): router GEMM, score function, top-k, aux-loss terms (3), probability scatter
(7); the per-expert token count, permute index and permute, token and probability
all-to-alls, chunk sort (6); FP8 casts around the two grouped GEMMs (2); on combine the sort
back, the all-to-all and the unpermute (3): 18."""


@dataclass(frozen=True, slots=True)
class ExpertEpilogues:
    """Seconds of the unfused elementwise work Megatron-Core's TEGroupedMLP runs around the expert
    GEMMs when the experts carry biases or a clamped GLU (0 where neither applies)."""

    forward: np.ndarray
    backward: np.ndarray
    activation_forward: np.ndarray
    """The clamp's share of the forward, which selective recompute of 'moe_act' runs again."""
    host_ops: np.ndarray
    """Forward operators the host issues for them."""


def expert_epilogues(model: ModelSpec, batch: LayoutBatch, shape: MoeShape, kern, calib) -> ExpertEpilogues:
    """Megatron-Core TEGroupedMLP (megatron/core/transformer/moe/experts.py, Megatron-LM 0d8e071 and
    3097d81, the Megatron-Bridge 25.11 and 26.04 pins), where TransformerEngine's GroupedLinear runs
    the experts (``moe_grouped_gemm`` 'loop'):

    * fc2 bias: linear_fc2 is built with skip_bias_add=True and ``_apply_bias`` adds each local
      expert's bias times its routing probability in Python, ``cat([t + b * p for ...])`` over
      torch.split of the output: per routed copy b·p writes h, the add reads 2h and writes h, the
      cat reads and writes h (6h); autograd reads the gradient for dp and db and reduces both
      (2 x (2h + h)) and joins the split's gradients (2h): 8h. Kernels: 2 per local expert + the
      cat forward, 4 per local expert + the join backward. (fc1's bias rides in the GEMM epilogue
      and its gradient in the wgrad GEMM's: grouped_linear.py, BF16 path; not priced.)
    * GLU clamp (``activation_func_clamp_value``): fusions/fused_bias_geglu.py
      weighted_bias_quick_geglu_impl clamps the two halves eagerly and concatenates them before
      the fused activation: 2 x (Fe + Fe) + (2Fe + 2Fe) = 8Fe per routed copy, 3 kernels;
      backward the two clamp masks (3Fe each) and the chunk's join (4Fe): 10Fe, 3 kernels. It
      also builds ``torch.tensor(linear_offset, device=cuda)``, a blocking host-to-device copy
      that syncs the host on every call (priced as one more host sync, ``HOST_SYNC_OPS``). Under
      recompute of 'moe_act' the clamp runs again (``activation_forward``)."""
    h = float(model.hidden_size)
    Fe = float(model.moe.expert_ffn_hidden_size) / batch.etp.astype(np.float64)
    loop = batch.is_("moe_grouped_gemm", "loop")
    per_kernel = launch_gap_seconds(batch, calib)
    copies = shape.routed_tokens
    local = shape.local_experts
    bias = loop & bool(model.linear_bias)
    t_bias_f = np.where(bias, copies * BF16_BYTES * 6.0 * h / kern.mem_bw + (2.0 * local + 1.0) * per_kernel, 0.0)
    t_bias_b = np.where(bias, copies * BF16_BYTES * 8.0 * h / kern.mem_bw + (4.0 * local + 1.0) * per_kernel, 0.0)
    clamp = loop & (model.glu_clamp is not None)  # ModelSpec allows a clamp only on gated MoE MLPs
    sync = HOST_SYNC_OPS * HOST_US_PER_OP * 1e-6
    t_clamp_f = np.where(clamp, copies * BF16_BYTES * 8.0 * Fe / kern.mem_bw + 3.0 * per_kernel + sync, 0.0)
    t_clamp_b = np.where(clamp, copies * BF16_BYTES * 10.0 * Fe / kern.mem_bw + 3.0 * per_kernel, 0.0)
    ops = np.where(bias, 2.0 * local + 1.0, 0.0) + np.where(clamp, 4.0, 0.0)
    return ExpertEpilogues(t_bias_f + t_clamp_f, t_bias_b + t_clamp_b, t_clamp_f, ops)


def moe_layer(model: ModelSpec, batch: LayoutBatch, gpu, calib, asm, shared) -> LayerTimes:
    """A layer whose MLP is an MoE block: routed experts (``expert_gemms``), shared experts
    (their up and down GEMMs under TP, like a dense MLP), the router, the token shuffles, and
    the host timeline."""
    kern = asm.kern
    moe = model.moe
    h = float(model.hidden_size)
    top_k = float(moe.top_k)
    Fe = float(moe.expert_ffn_hidden_size)
    Fs = float(moe.num_shared_experts * (moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size))
    shape = moe_shape(model, batch, kern.tokens, kern.tp)
    experts = expert_gemms(model, batch, shape, kern, calib)
    t_shared = f_shared = t_su = t_sd = 0.0
    if Fs:
        t_su, f_su = kern.gemm(kern.tokens, h, (2.0 if model.gated_mlp else 1.0) * Fs / kern.tp)
        t_sd, f_sd = kern.gemm(kern.tokens, Fs / kern.tp, h)
        t_shared, f_shared = t_su + t_sd, f_su + f_sd
    # Router: a small BF16 GEMM on this rank's SP share of tokens.
    t_router, f_router = gemm_time(kern.tokens / kern.rep_div, h, float(moe.num_experts), kern.bf16_peak,
                                   bf16_gemm_efficiency(gpu, calib), kern.hbm, BF16_BYTES)
    act = 3.0 if model.gated_mlp else 2.0
    # Elementwise: activation on routed tokens, shared-expert activation, and the token
    # shuffles of Megatron-Core's all-to-all dispatcher (token_dispatcher.py): permute into
    # expert order before the all-to-all and sort the received chunks by local expert after it
    # (read + write h per routed copy each), the reverse sort on combine, and the unpermute
    # that reads the k copies and writes one weighted sum: 7kh + h. The routed part is the
    # busiest rank's (x imbalance).
    routed = top_k * shape.imbalance
    moe_elems = routed * (act * Fe + 7.0 * h) + h + act * Fs
    t_other = t_shared + t_router
    layer = asm.layer(
        experts.forward + t_other,
        experts.flops_forward + f_shared + f_router,
        moe_elems,
        routed * (h + Fe) + (h + Fs if Fs else 0.0),
        t_su,
        t_sd,
        extra_kernels=MOE_EXTRA_KERNELS_PER_LAYER,
        t_mlp_gemms_backward=experts.backward + 2.0 * t_other,
    )
    epi = expert_epilogues(model, batch, shape, kern, calib)
    layer = LayerTimes(layer.forward + epi.forward, layer.backward + epi.backward, layer.attention_forward,
                       layer.flops_forward, layer.tp_neighbour_gemms)
    t_norms, t_mla_up, f_mla_up = shared
    zero = 0.0
    layer.module_forward = {
        "layernorm": t_norms, "mla_up_proj": t_mla_up, "mlp": zero,
        "moe_act": kern.streamed(routed * act * Fe, kern.tp) + epi.activation_forward,
        "shared_experts": t_shared + kern.streamed(act * Fs, kern.tp),
        "moe": experts.forward + t_other + kern.streamed(moe_elems, kern.tp) + epi.forward,
    }
    layer.module_flops = {"layernorm": zero, "mla_up_proj": f_mla_up, "mlp": zero, "moe_act": zero,
                          "shared_experts": f_shared, "moe": experts.flops_forward + f_shared + f_router}
    kernels = calib.kernels_per_layer + MOE_EXTRA_KERNELS_PER_LAYER
    loop = batch.is_("moe_grouped_gemm", "loop")
    host_ops = kernels + np.where(loop, 2.0 * np.maximum(shape.local_experts - 1.0, 0.0), 0.0) + epi.host_ops
    # CUDA graphs replay a captured layer from one host launch, so its operators cost the host
    # nothing each; a layer that syncs cannot be captured and keeps issuing operator by operator.
    return host_bound(layer, np.where(layer_graphed(batch), 0.0, host_ops), syncs_host(batch))


def dense_and_moe_layer_times(model: ModelSpec, counts, gpu, batch: LayoutBatch, calib,
                              attention_kernel_len=None) -> tuple[LayerTimes, LayerTimes]:
    """Times of one dense layer and one MoE layer (the MoE one equals the dense one for dense
    models): the dense layer from ``costmodel.compute``, the MoE layer built here on its shared
    modules. ``attention_kernel_len``: keys per attention kernel call (default s / c)."""
    dense, asm, shared = dense_layer_parts(model, counts, gpu, batch, calib, attention_kernel_len)
    if model.moe is None:
        return dense, dense
    return dense, moe_layer(model, batch, gpu, calib, asm, shared)
