"""Compute time of one transformer layer, one micro-batch, on one GPU (vectorized over layouts).

Every GEMM is priced with a roofline: max(FLOPs / (peak · η), bytes moved / HBM bandwidth)
(Williams et al. 2009; the JAX scaling book, "Rooflines"). So small per-GPU GEMMs after TP/EP
sharding, or few tokens per expert, lose efficiency by mechanism rather than by a fitted
curve. The attention core runs as FlashAttention (never materializes the s x s scores); the
elementwise work between GEMMs (norms, residual adds, rotary, activation, FP8 casts) is
HBM-bound; every kernel also pays a fixed launch/tail cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from costmodel.calibration import Calibration
from costmodel.flops import (attention_flops_per_key, attention_keys_parts, attention_qk_dim, attention_v_dim,
                             windowed_keys)
from costmodel.layout import LayoutBatch
from costmodel.params import ParamCounts
from costmodel.pipeline import heaviest_rank_windowed_share
from hardware_catalog.schema import GPUSpec, ModelSpec

BF16_BYTES = 2.0
CUDA_GRAPH_SAVING_US = 0.4
"""Per-kernel time CUDA graphs save on the GPU: NVIDIA's 'Getting Started with CUDA Graphs'
(2019) measures a chain of short dependent kernels at 3.8 us per kernel when launched
back-to-back from a stream and 3.4 us from a graph (the launch gap between dependent kernels),
a 2.9 us kernel alone. Interval 0.2-1.0 us. What graphs save on the host (the CPU no longer
issues each kernel) matters where the host is the bottleneck: the MoE host timeline."""
LAUNCH_BLOCKING_US = 30.0
"""Idle GPU time per kernel when every launch blocks (CUDA_LAUNCH_BLOCKING=1, ``Layout.launch_blocking``):
the host issues the next operator only after the last kernel ends. From BigScience's own A/B
(bigscience train/tr11-176B-ml/chronicles-prequel.md, 'dealing with JZ hanging on the large
model'; 200B, 80 layers, hidden 14400, TP 8, PP 10, 80 GPUs, GBS 512): 97.20 TFLOP/s async,
91.04 blocking, so blocking takes 97.20 / 91.04 - 1 = 6.77% longer. One layer's forward,
recomputed forward and backward of a 2048-token sequence is 96·s·h²·(1 + s/6h) / 8 = 5.22 TFLOP
per GPU (Megatron's formula, as that table counts), 53.7 ms at 97.2 TFLOP/s; 6.77% of it is
3.63 ms over the 4 x 30 kernels priced per layer (``Calibration.kernels_per_layer``: forward,
recomputed forward, backward twice): 30 us a kernel. Interval 12-30 us: 12 us is the host's own
issue time per operator (costmodel.moe.HOST_US_PER_OP), and their 160-GPU A/B at GBS 2048
measured no difference."""
EAGER_EXTRA_KERNELS_PER_LAYER = 22.0
"""Kernels an eager PyTorch transformer layer launches beyond a fused one (see the count in
``_LayerAssembler``)."""
FP8_BYTES = 1.0


def bf16_gemm_efficiency(gpu: GPUSpec, calib: Calibration) -> float:
    """The GPU's measured BF16 GEMM efficiency where the catalog has one, else the global."""
    return gpu.gemm_efficiency_bf16 or calib.gemm_efficiency_bf16


def power_limited(gpu: GPUSpec, power_limit_watts: float | None, sustained_clock: float = 1.0) -> GPUSpec:
    """The GPU with tensor-core peaks scaled for a power cap below its TDP.

    Dynamic power goes as C·V²·f and voltage tracks frequency in the DVFS range, so power
    ~ f³ and the sustained clock under a cap ~ (cap / TDP)^(1/3). NVIDIA's own parts agree:
    H100 NVL (400 W) is rated 835 dense BF16 TFLOP/s vs H100 SXM (700 W) 989, and
    (400/700)^(1/3) x 989 = 821 (H100 datasheet). HBM bandwidth is not clock-bound.
    ``sustained_clock``: the fraction of the datasheet (boost) clock that hours of training
    hold at the rated power (Calibration.sustained_clock_fraction); the cap scales from there.
    """
    scale = sustained_clock
    if power_limit_watts and gpu.tdp_watts and power_limit_watts < gpu.tdp_watts:
        scale *= (power_limit_watts / gpu.tdp_watts) ** (1.0 / 3.0)
    if scale == 1.0:
        return gpu
    update = {k: getattr(gpu, k) * scale for k in ("bf16_tflops", "fp16_tflops", "fp8_tflops", "fp4_tflops", "tf32_tflops",
                                                   "fp32_tflops")
              if getattr(gpu, k) is not None}
    return gpu.model_copy(update=update)


GEMM_K_OVERHEAD = 350.0
"""Fixed cost of every output tile of a GEMM, in units of the reduction dimension K: the
mainloop runs K / k_tile steps, and filling the load pipeline and writing the tile out cost
about as much as K0 more, so a GEMM reaches e_max · K / (K + K0) of peak. Fitted on the 32
BF16 and FP8 GEMMs measured on a lent H100 (benchmarks/results/h100_kernels.json; K0 from
300 to 400 fits equally, median error 5-7%); the same tile pipeline serves other GPUs.
A lent H200 (benchmarks/results/h200_kernel_sweep.json, 2026-11-27) timed 432 GEMMs from CUDA
graphs: forward, dgrad and wgrad of 18 layer shapes after TP at 2K-32K tokens. They fit best
with K0 = 100-150 (median error 2.5%; 3.5% at 350), and the efficiency is flat in the token
count from 2K up (median 0.70-0.73; 0.64 at 512 tokens). With K0 = 150, leave one source out
went from 3.1% to 4.0% median (2026-11-27): the runs need more cost on TP-sharded short reductions than the
kernels show. That cost sits outside the GEMM (``planner validate --ranking`` finds the model
favouring larger TP), so K0 stays 350."""


def launch_gap_seconds(batch: LayoutBatch, calib: Calibration):
    """Seconds each kernel costs beyond its own work: the gap between dependent launches
    (``Calibration.kernel_overhead_us``), less what a CUDA graph saves (``CUDA_GRAPH_SAVING_US``)."""
    return (calib.kernel_overhead_us - np.where(batch.cuda_graphs, CUDA_GRAPH_SAVING_US, 0.0)) * 1e-6


def gemm_time(m, k, n, peak_flops, efficiency, hbm_bytes_per_s, bytes_per_element):
    """Roofline time of an (m x k) @ (k x n) GEMM: compute-bound or HBM-bound, whichever is
    slower. Operands read once and the output written once (ideal tiling). ``efficiency`` is
    the large-K limit; short reductions lose the per-tile fixed cost (``GEMM_K_OVERHEAD``)."""
    flops = 2.0 * m * k * n
    compute = flops / (peak_flops * efficiency) * (1.0 + GEMM_K_OVERHEAD / k)
    traffic = (m * k + k * n + m * n) * bytes_per_element / hbm_bytes_per_s
    return np.maximum(compute, traffic), flops


@dataclass
class LayerTimes:
    """Per micro-batch, per GPU, seconds (arrays over layouts)."""

    forward: np.ndarray
    """Forward pass of the layer (GEMMs + attention core + elementwise + launches)."""
    backward: np.ndarray
    """Backward pass (dgrad + wgrad GEMMs, attention backward, elementwise)."""
    attention_forward: np.ndarray
    """Attention-core forward alone (what selective recompute repeats, what CP overlaps with)."""
    flops_forward: np.ndarray
    """Hardware FLOPs of one forward pass on this GPU (GEMMs + attention core)."""
    tp_neighbour_gemms: tuple = ()
    """Forward times of the GEMMs beside the layer's TP collectives, in order: attention input
    projection (after the all-gather), output projection (before the reduce-scatter), MLP up
    and MLP down (for MoE layers: the shared expert's, zero without one). What
    --tp-comm-overlap can hide each collective behind."""
    module_forward: dict = field(default_factory=dict)
    """Forward seconds of the submodules selective recompute can run again (names of
    ``costmodel.layout.RECOMPUTE_MODULES`` other than core_attn; 0 where the layer has none)."""
    module_flops: dict = field(default_factory=dict)
    """Forward FLOPs of the same submodules."""


NVFP4_GEMM_SPEEDUP = 1.9
"""How much faster a linear layer's NVFP4 GEMM runs than its FP8 one, on the same shapes:
TransformerEngine docs/examples/gemm_profiling/gemm_profiling.rst (B300, cuBLASLt, one layer of a
5B model at 15,872 tokens, pre-quantized operands): fprop + dgrad + wgrad 3.764 ms in NVFP4
against 7.161 ms in MXFP8 (1.90x) and 6.812 ms in FP8 current scaling (1.81x). Capped by the
GPU's FP4-to-FP8 peak ratio (B200 2x: pytorch/ao PR #2427 measures cuBLAS NVFP4 at 5.4-5.5
PFLOP/s at 6-8K cubes, 0.60 of its 9 PFLOP/s). Interval 1.4-2.0 (the same doc's per-shape fprop
ratios run 1.05x for a 4096-square projection to 1.66x for the MLP down projection)."""
NVFP4_OPERAND_BYTES = 0.5625
"""Bytes per element of an NVFP4 operand: 4-bit E2M1 values plus one E4M3 scale per 16
(TransformerEngine docs/features/low_precision_training/nvfp4/nvfp4.rst)."""


def nvfp4_speedup(gpu: GPUSpec) -> float:
    """``NVFP4_GEMM_SPEEDUP``, at most the GPU's FP4-to-FP8 peak ratio (1 without FP4 tensor cores)."""
    if not gpu.fp4_tflops or not gpu.fp8_tflops:
        return 1.0
    return min(NVFP4_GEMM_SPEEDUP, gpu.fp4_tflops / gpu.fp8_tflops)


def _precision_gemm(gpu: GPUSpec, batch: LayoutBatch, calib: Calibration):
    """Peak FLOP/s, efficiency and operand bytes for the linear layers of each layout. NVFP4
    GEMMs are priced as the FP8 GEMM of the same shape sped up by ``nvfp4_speedup``."""
    fp8 = batch.is_("precision", "fp8")
    nvfp4 = fp8 & batch.is_("fp8_recipe", "nvfp4")
    fp8_peak = (gpu.fp8_tflops or gpu.bf16_tflops) * 1e12
    peak = np.where(fp8, fp8_peak * np.where(nvfp4, nvfp4_speedup(gpu), 1.0), gpu.bf16_tflops * 1e12)
    eff = np.where(fp8, calib.gemm_efficiency_fp8, bf16_gemm_efficiency(gpu, calib))
    # FP8 GEMMs read 1-byte operands but write BF16 outputs: 1.5 bytes on average; NVFP4's
    # operands take 0.5625.
    elem = np.where(nvfp4, (NVFP4_OPERAND_BYTES + BF16_BYTES) / 2.0,
                    np.where(fp8, (FP8_BYTES + BF16_BYTES) / 2.0, BF16_BYTES))
    return peak, eff, elem


@dataclass(frozen=True, slots=True)
class _Kernels:
    """How the kernels of one layer are priced for each layout (arrays over layouts)."""

    tokens: np.ndarray
    """Tokens of one micro-batch on this GPU, b · s / c (before the SP split)."""
    tp: np.ndarray
    """TP degree t, float."""
    rep_div: np.ndarray
    """What splits the sequence-parallel regions (norms, residuals, dropout): t with SP, else 1."""
    peak: np.ndarray
    """Peak FLOP/s of the linear layers' precision."""
    eff: np.ndarray
    """Its large-K GEMM efficiency."""
    elem: np.ndarray
    """Operand bytes per element of the linear layers."""
    hbm: float
    """HBM bandwidth W, bytes/s."""
    mem_bw: float
    """Achievable HBM bandwidth of memory-bound kernels, W · η."""
    bf16_peak: float
    """Dense BF16 peak (attention core, router, LM head)."""
    fp8: np.ndarray
    """FP8 linear layers."""
    eager: np.ndarray
    """Eager PyTorch kernels (one per operator) instead of fused ones."""

    def gemm(self, rows, reduction, cols):
        """(seconds, FLOPs) of a linear layer's GEMM, (rows x reduction) @ (reduction x cols)."""
        return gemm_time(rows, reduction, cols, self.peak, self.eff, self.hbm, self.elem)

    def streamed(self, elements_per_token, divisor):
        """Seconds of an HBM-bound kernel moving ``elements_per_token`` BF16 elements per token,
        split ``divisor`` ways."""
        return self.tokens * BF16_BYTES * elements_per_token / divisor / self.mem_bw


def _kernels(gpu: GPUSpec, batch: LayoutBatch, calib: Calibration) -> _Kernels:
    tp = batch.tp.astype(np.float64)
    cp = batch.cp.astype(np.float64)
    hbm = gpu.memory_bandwidth_gbps * 1e9
    peak, eff, elem = _precision_gemm(gpu, batch, calib)
    return _Kernels(
        tokens=batch.mbs * batch.seq_len / cp,
        tp=tp,
        rep_div=np.where(batch.sequence_parallel, tp, 1.0),
        peak=peak,
        eff=eff,
        elem=elem,
        hbm=hbm,
        mem_bw=hbm * calib.memory_bound_efficiency,
        bf16_peak=gpu.bf16_tflops * 1e12,
        fp8=batch.is_("precision", "fp8"),
        eager=batch.is_("kernels", "eager"),
    )


def attention_efficiency(gpu: GPUSpec, batch: LayoutBatch, calib: Calibration, kernel_len,
                         model: ModelSpec | None = None):
    """Fraction of the dense BF16 peak a FlashAttention-class kernel (forward + backward) runs at,
    for keys of length ``kernel_len`` per kernel call (arrays over layouts), at ``model``'s head
    dim (``attention_head_dim_factor``; head dim 128 when None).

    A kernel over L keys runs at e(L) = e_max · L / (L + L0): every block of queries pays a
    fixed prologue and epilogue against its loop over the keys (for a causal square of length L
    the mean loop is L/2). L0 depends on the architecture and kernel library: cuDNN-frontend's
    SDPA training benchmark (Llama 3.1 GQA shape, 64 query / 8 KV heads, head dim 128, causal,
    BF16; benchmark/sdpa_benchmark_training/results/*_919_only_cudnn/llama3.1_*.csv, cuDNN 9.19)
    gives fwd+bwd 397 -> 608 TFLOP/s from 2K to 32K on H200 (e_max 0.64 of 989, L0 1200) and
    886 -> 1536 on GB200 (e_max 0.65 of 2500, L0 1680); its 2025 B200 run
    (artifacts/sdpa_bf16_benchmark_results_NVIDIA_B200.csv) 998 at 8K, 1183 at 32K (L0 2150).

    The calibrated efficiencies are those of a kernel over the whole sequence s, as the
    reference runs measure it: ``calib.attention_efficiency`` for the FlashAttention-2 class on
    Ampere/Hopper (the lent H100: 0.26-0.33 at 4K-32K), times ``native_attention_speedup`` for
    the architecture-native kernels; a kernel over fewer keys (ring attention's s/c chunks) runs
    lower by the benchmark curve, e(L) / e(s) = (1 + L0/s) / (1 + L0/L). Pricing every kernel
    on the absolute curve from one e_max (so a 128K-token kernel runs faster than a 4K one)
    fitted the NeMo B200 long-sequence runs but not the rest: leave one source out on the
    shipped set went from 3.5% to 6.4% median error (2026-11-27), so the anchor stays at the
    whole sequence. FlashAttention-2 on Blackwell keeps about Hopper's TFLOP/s against a 2.3x
    higher peak (``FA2_FRACTION_BY_ARCH``).
    """
    native = batch.is_("attention", "flash3") & (gpu.architecture in ("hopper", "blackwell"))
    fa2 = FA2_FRACTION_BY_ARCH.get(gpu.architecture, 1.0)
    # The calibrated speed-up is today's cuDNN; a 2024 container's ran slower (CUDNN_2024_ATTENTION_FRACTION).
    speedup = calib.native_attention_speedup * np.where(batch.is_("cudnn", "2024"), CUDNN_2024_ATTENTION_FRACTION, 1.0)
    e_seq = calib.attention_efficiency * np.where(native, speedup, fa2)
    l0 = np.where(native, NATIVE_ATTENTION_L0.get(gpu.architecture, ATTENTION_L0), ATTENTION_L0)
    length = np.asarray(kernel_len, dtype=np.float64)
    seq = np.asarray(batch.seq_len, dtype=np.float64)
    # The calibrated level holds for a kernel over the whole sequence up to the longest reference
    # sequence of the architecture's native kernels; beyond it a longer kernel gains on the curve.
    cap = NATIVE_ATTENTION_ANCHOR_CAP.get(gpu.architecture, np.inf)
    anchor = np.where(native, np.minimum(seq, cap), seq)
    head_dim = 1.0 if model is None else attention_head_dim_factor(model, native, gpu.architecture)
    return e_seq * (1.0 + l0 / anchor) / (1.0 + l0 / length) * head_dim


def _attention_core(model: ModelSpec, gpu: GPUSpec, batch: LayoutBatch, calib: Calibration, kern: _Kernels,
                    kernel_len=None):
    """(forward seconds, backward / forward factor, FLOPs run) of the attention core, heads
    split over TP (KV heads replicated when tp > g: Megatron allows it). ``kernel_len``: the
    keys each kernel call sees (costmodel.context_parallel.attention_kernel_length; default
    the ring-attention chunk s / c)."""
    # The rank holding the most full-attention layers bounds the pipeline.
    full_keys, window_keys = attention_keys_parts(model, batch.seq_len,
                                                  windowed_share=heaviest_rank_windowed_share(model, batch))
    per_key = kern.tokens * attention_flops_per_key(model) / kern.tp
    core_flops = per_key * (full_keys + window_keys)
    if kernel_len is None:
        kernel_len = batch.seq_len / batch.cp.astype(np.float64)
    t_flash = per_key * full_keys / (kern.bf16_peak * attention_efficiency(gpu, batch, calib, kernel_len, model))
    if model.sliding_window is not None:
        # A windowed layer's kernel loops over about w keys per block of queries, as a causal
        # square of 2w does over its mean of w (FlashAttention-2 window_size; Dao 2023 Sec. 3.1),
        # so it runs at e(2w) on the same curve, lower than the whole-sequence kernel. cuDNN-frontend's
        # gpt_oss SDPA benchmark (results/h200_919_only_cudnn/gpt_oss_20260227_034819.csv, window
        # 1024, and results/gpt_oss/gb200/gpt_oss_20260424_100011.csv, window 128; head dim 64, 32K
        # tokens, fwd+bwd) measures 0.317 of the H200's peak and 0.060 of the GB200's (0.070 at 4K):
        # this prices 0.227 and 0.056 at head dim 128 (0.182 on H200 at GPT-OSS's head dim 64,
        # ATTENTION_HEAD_DIM_EFFICIENCY); the whole-sequence kernel would be 0.35 and 0.40. The
        # calibrated level itself sits under kernel benchmarks: 0.35 against cuDNN-frontend's 0.615
        # for head dim 128 at 32K keys on H200.
        window_len = np.minimum(kernel_len, 2.0 * windowed_keys(model.sliding_window, batch.seq_len))
        window_eff = attention_efficiency(gpu, batch, calib, window_len, model)
        t_flash = t_flash + per_key * window_keys / (kern.bf16_peak * window_eff)
    # Unfused attention (pre-FlashAttention Megatron): QK^T and AV as batched GEMMs over every
    # key (the causal mask is applied after, so no blocks are skipped), plus the a x s scores
    # per token through HBM: written by QK^T, read and written by the fused scale-mask-softmax,
    # dropout mask and output, read by AV (2 + 4 + 3 + 2 bytes; 2 + 4 + 2 without dropout).
    unfused = unfused_attention(batch)
    # Backward: FlashAttention recomputes the scores (5 matmuls vs 2, Dao 2023 Sec. 3.1): 2.5x;
    # unfused: two GEMMs per forward GEMM and the scores' gradient traffic: 2x.
    if not unfused.any():
        return t_flash, 2.5, core_flops
    a = float(model.num_attention_heads)
    score_bytes = (11.0 if model.dropout else 8.0) * a / kern.tp * batch.seq_len
    # The batched GEMMs compute every score, windowed or not: the causal s/2 keys, twice.
    unfused_flops = 2.0 * per_key * 0.5 * batch.seq_len
    t_unfused = unfused_flops / (kern.bf16_peak * bf16_gemm_efficiency(gpu, calib)) + kern.tokens * score_bytes / kern.mem_bw
    return (
        np.where(unfused, t_unfused, t_flash),
        np.where(unfused, 2.0, 2.5),
        np.where(unfused, unfused_flops, core_flops),
    )


ATTENTION_L0 = 1272.0
"""Keys per attention kernel call at which FlashAttention-2 runs at half its long-sequence
efficiency, e(L) = e_max · L / (L + L0): fitted to the fwd+bwd efficiencies measured on a lent
H100 (PyTorch SDPA flash backend, causal; benchmarks/results/h100_kernels.json): 0.260 at 4K,
0.290-0.296 at 8K, 0.328 at 32K tokens give L0 = 1272, e_max = 0.341 (8K predicted 0.295).
The lent H200's sweep (benchmarks/results/h200_kernel_sweep.json; GQA 32/8, head dim 128) runs
from 0.172 at 1K keys to 0.331 at 64K: L0 = 980, e_max = 0.338 fit 1K-64K within 1%; 128K keys
fall 2% under the curve. With the H200's L0s (980 here, 960 for the native kernels) leave one
source out went from 3.1% to 3.4% median (2026-11-27); the H100's and cuDNN-frontend's stay."""

NATIVE_ATTENTION_L0 = {"hopper": 1200.0, "blackwell": 1680.0}
"""L0 of the architecture-native kernels (cuDNN fused attention / FlashAttention-3 and -4),
from cuDNN-frontend's SDPA training benchmark, Llama 3.1 shape, causal BF16, cuDNN 9.19
(results/h200_919_only_cudnn and gb200_919_only_cudnn/llama3.1_*.csv): fwd+bwd TFLOP/s at 2K
and 32K fitted to e_max L / (L + L0): H200 397 and 608 -> L0 1200; GB200 886 and 1536 -> 1680
(2025's B200 run: 2150; the kernels' short-sequence cost fell release by release).
The same cuDNN 9.19 through PyTorch's SDPA on a lent H200 (benchmarks/results/h200_kernel_sweep.json,
GQA 32/8, head dim 128) fits L0 = 960, e_max = 0.60 from 1K to 16K keys (0.311 -> 0.569 of peak),
then levels off at 0.54-0.56 up to 128K keys, 6-9% under the curve. Capping the native kernels'
length at 16K or 32K keys (so a long sequence's CP chunks run as fast as its whole-sequence kernel)
moved leave one source out from 3.1% to 3.7-3.8% median (2026-11-27), so the curve runs on
unchanged. cuDNN over FlashAttention-2 on the same sweep: 1.66-1.81x
(``Calibration.native_attention_speedup``: its prior, 1.7, and its fit, 1.7). Head dim: ``ATTENTION_HEAD_DIM_EFFICIENCY``."""

CUDNN_2024_ATTENTION_FRACTION = 0.86
"""Speed of cuDNN's fused attention as 2024 containers shipped it (the cuDNN 9 of that year) over today's
(``Layout.cudnn`` 2024). cuDNN-frontend's own benchmark on H200, causal, head dim 128, BF16,
forward + backward: cuDNN 9.1.0 (benchmark/benchmark_results.csv, 2024-05-07, commit b740542;
16 heads, hidden 2048) 490 / 520 / 520 TFLOP/s at 8K / 16K / 32K tokens; cuDNN 9.19
(sdpa_benchmark_training/results/h200_919_only_cudnn/llama3.1_20260227_034703.csv; GQA 64 / 8
heads, top_left mask, forward and backward times combined) 567 / 603 / 608: 0.865, 0.863, 0.855
(0.93 at 4K, where the 2024 run used batch 4 against batch 1). Only these two releases were
measured on one GPU, so which cuDNN between them closed the gap is not known: every 2024
container (NeMo 24.x, Megatron-Core r0.8: the 9.x of their year) takes this fraction, every
later one none (an assumption, ``planner.frameworks.profiles``).
Leave one source out (with ``native_attention_speedup``'s prior at the lent H200's measured
1.7): 4.1% / 10.8% -> 3.7% / 10.1% median / p90; NeMo 24.03's H100 long-context rows held out
6.1% -> 3.1% (2026-11-28)."""

NATIVE_ATTENTION_ANCHOR_CAP = {"blackwell": 8192.0}
"""Per architecture, the longest sequence at which its native kernels' calibrated level is anchored.
Blackwell: the longest sequence of the Blackwell reference rows (Megatron-Bridge 25.09's Llama 3 8B, 70B
and 405B presets on B200 and GB200: 8,192 tokens; its MoE presets run 4,096). Up to it, a
Blackwell native kernel runs at the calibrated whole-sequence level (``calib.attention_efficiency``
x ``native_attention_speedup``, the level those rows set); on a longer sequence, the whole-sequence
anchor stops at this length, so a kernel over more keys runs faster than an 8K one along
cuDNN-frontend's curve (``NATIVE_ATTENTION_L0``: GB200 886 -> 1536 TFLOP/s from 2K to 32K). NeMo
25.04's B200 long-context runs (8K to 1M tokens, released, medium confidence) go from -6% .. -24%
with the whole-sequence anchor to -2% .. -9%; no high-confidence row moves. Hopper keeps the
whole-sequence anchor at every length, because its reference rows reach 1M tokens and say so:
NeMo 24.03's H100 runs (4K to 1M) are flat within 3% with it and drift to +12% on the curve, and
leave-one-source-out went from 3.5% to 6.4% median when every architecture was priced on the
curve (2026-11-27)."""

ATTENTION_HEAD_DIM_EFFICIENCY = {
    "flash2": ((64.0, 0.89), (96.0, 0.90), (128.0, 1.0)),
    "hopper_native": ((64.0, 0.80), (96.0, 0.79), (128.0, 1.0)),
}
"""Forward + backward efficiency of an attention kernel at a head dim below 128, relative to head
dim 128 (what the calibrated efficiencies hold): measured on a lent H200 at 8K keys, causal, 32
heads, batch 4 (benchmarks/device_kernels.py --sections attention_dims ->
benchmarks/results/h200_kernel_sweep.json): FlashAttention-2 0.267 / 0.270 / 0.300 of peak at head
dim 64 / 96 / 128, cuDNN 9.19 0.428 / 0.422 / 0.536. Fewer FLOPs per key block leave the fixed work
of each block (softmax, masking, loads) a larger share. FlashAttention-2 runs the same kernels on
Ampere and Blackwell (sm80 code), so its row serves every architecture; Blackwell's native kernels
were not measured and keep 1. Above 128 only head dims 192/128 (MLA; cuDNN 0.499) and 256 (0.461
and 0.258) were measured, neither a dense model's 160 or 192, so larger head dims keep 1.
Leave one source out: 3.1% / 11.0% -> 3.2% / 11.0% (2026-11-27; one fold's refit, nemo_perf_2407
whose rows have head dim 128, moved one grid step along the GEMM x clock ridge); GPT-OSS 120B
(head dim 64) on 64 H100 +2.4% -> +1.0%, the MegaScale 175B rows (head dim 96) 0.4-0.5 points lower."""


def attention_head_dim_factor(model: ModelSpec, native, architecture: str):
    """``ATTENTION_HEAD_DIM_EFFICIENCY`` at the model's head dim, the mean of its query-key and value
    dims (MLA's differ), interpolated between the measured head dims and held at 64's below it;
    ``native`` (per layout) picks the architecture-native kernels' row."""
    d = 0.5 * (float(attention_qk_dim(model)) + float(attention_v_dim(model)))
    if d >= 128.0:
        return 1.0

    def at(kind):
        dims, effs = zip(*ATTENTION_HEAD_DIM_EFFICIENCY[kind])
        return float(np.interp(d, dims, effs))

    native_factor = at("hopper_native") if architecture == "hopper" else 1.0
    return np.where(native, native_factor, at("flash2"))


FA2_FRACTION_BY_ARCH = {"blackwell": 0.48}
"""FlashAttention-2's long-kernel efficiency on an architecture, relative to Ampere/Hopper's
(the fraction of peak ``Calibration.attention_efficiency`` is): its mma.sync kernels do not use
Blackwell's tcgen05 tensor cores, so they keep about Hopper's TFLOP/s against a 2.3x higher
peak: cuDNN-frontend's B200 artifact (sdpa_bf16_benchmark_results_NVIDIA_B200.csv) measures
flash_attention fwd+bwd at 368 TFLOP/s at 32K (0.163 of 2250), the lent H100 0.341 of 989:
0.163 / 0.341 = 0.48."""


@dataclass(frozen=True, slots=True)
class _Elementwise:
    """BF16 elements the attention side of a layer moves per token in memory-bound kernels."""

    rep: float
    """In the sequence-parallel region (fused kernels): 2 norms (read + write h) and 2
    residual adds (2 reads + 1 write) = 10h, + dropout's 5h."""
    attn_tp: float
    """In the TP region: rotary on Q and K (read + write)."""
    gemm_inputs: float
    """Inputs of the attention GEMMs, cast to FP8 under FP8 (read BF16, write FP8: 3 bytes)."""
    eager_rep: float
    """What eager kernels add in the SP region (the norms' FP32 round trips)."""
    eager_attn_tp: float
    """What eager kernels add in the TP region (FP32 rotary, repeat_kv, contiguous copies)."""


def _elementwise(model: ModelSpec) -> _Elementwise:
    h = float(model.hidden_size)
    a = float(model.num_attention_heads)
    g = float(model.kv_heads)
    d = float(model.head_size)
    d_v = float(attention_v_dim(model))
    rope = model.position_embedding == "rope"
    # Eager PyTorch runs one kernel per operator, several through FP32 (counted in BF16
    # elements, an FP32 element = 2), e.g. torchtitan's Llama (models/llama/model.py):
    # RMSNorm as x.float(), pow, mean, x * rsqrt, type_as, * weight = 3 + 4 + 2 + 4 + 3 + 2 = 18
    # per element, against 2 for a fused norm (F.layer_norm is one kernel in either);
    # rotary as x.float(), complex multiply, type_as = 3 + 4 + 3 = 10 per Q/K element, not 2;
    # GQA's repeat_kv copies K and V out to every query head (read g·d, write a·d, twice) and
    # the attention output is made contiguous again (2·a·d).
    norm_extra = 16.0 if model.norm == "rmsnorm" else 0.0
    return _Elementwise(
        rep=10.0 * h + (5.0 * h if model.dropout else 0.0),
        attn_tp=2.0 * (a + g) * d if rope else 0.0,
        gemm_inputs=h + a * d_v,
        eager_rep=2.0 * norm_extra * h,
        eager_attn_tp=(8.0 * (a + g) * d if rope else 0.0) + (2.0 * (g * d + a * d) if g < a else 0.0) + 2.0 * a * d_v,
    )


class _LayerAssembler:
    """Adds an MLP (dense or MoE) to the attention block every layer shares: GEMMs, attention
    core, memory-bound kernels and launches, forward and backward."""

    def __init__(self, model: ModelSpec, counts: ParamCounts, gpu: GPUSpec, batch: LayoutBatch, calib: Calibration,
                 kern: _Kernels, attention_kernel_len=None):
        h = float(model.hidden_size)
        a = float(model.num_attention_heads)
        d_v = float(attention_v_dim(model))
        self.kern, self.calib = kern, calib
        # Attention block: QKV (or MLA down/up projections) and output projection GEMMs.
        out_proj = a * d_v * h
        in_width = (counts.attention_per_layer - out_proj) / h  # all input-side projections, as one GEMM
        self.t_qkv, self.f_qkv = kern.gemm(kern.tokens, h, in_width / kern.tp)
        self.t_out, self.f_out = kern.gemm(kern.tokens, a * d_v / kern.tp, h)
        self.t_core, self.core_backward_factor, self.core_flops = _attention_core(model, gpu, batch, calib, kern,
                                                                                 attention_kernel_len)
        self.ew = _elementwise(model)
        # Eager PyTorch launches one kernel per operator: the norms' 5 extra each, rotary's 4 extra
        # for Q and for K, repeat_kv and the contiguous copies (3), the separate SiLU product (1):
        # 22 more than the fused layer's.
        kernels = calib.kernels_per_layer + np.where(kern.eager, EAGER_EXTRA_KERNELS_PER_LAYER, 0.0)
        # A captured graph replays its kernels with no host between them: blocking launches add nothing there.
        blocking = np.where(batch.launch_blocking & ~batch.cuda_graphs, LAUNCH_BLOCKING_US, 0.0)
        self.per_kernel = launch_gap_seconds(batch, calib) + blocking * 1e-6
        self.launch = kernels * self.per_kernel

    def elementwise_time(self, rep, sharded, fp8_inputs, eager_sharded=0.0):
        """Seconds of the memory-bound kernels moving ``rep`` elements per token in the SP
        region and ``sharded`` in the TP region, casting ``fp8_inputs`` under FP8."""
        kern, ew = self.kern, self.ew
        rep = np.where(kern.eager, rep + ew.eager_rep, rep)
        sharded = np.where(kern.eager, sharded + ew.eager_attn_tp + eager_sharded, sharded)
        bytes_per_token = BF16_BYTES * (rep / kern.rep_div + sharded / kern.tp)
        bytes_per_token = bytes_per_token + np.where(kern.fp8, 3.0 * fp8_inputs / kern.tp, 0.0)
        return kern.tokens * bytes_per_token / kern.mem_bw

    def layer(self, t_mlp_gemms, f_mlp, mlp_elems, mlp_fp8_inputs, mlp_up, mlp_down, eager_mlp=0.0, extra_kernels=0.0,
              t_mlp_gemms_backward=None):
        """LayerTimes of the attention block plus an MLP of GEMM seconds ``t_mlp_gemms`` and
        FLOPs ``f_mlp``; ``mlp_up`` / ``mlp_down``: the GEMMs beside its TP collectives.
        ``t_mlp_gemms_backward``: the MLP's backward GEMMs where priced on their own (MoE
        experts: dgrad and wgrad, costmodel.moe); default twice the forward."""
        ew = self.ew
        t_gemm = self.t_qkv + self.t_out + t_mlp_gemms
        t_elem = self.elementwise_time(ew.rep, ew.attn_tp + mlp_elems, ew.gemm_inputs + mlp_fp8_inputs, eager_mlp)
        layer_launch = self.launch + extra_kernels * self.per_kernel
        forward = t_gemm + self.t_core + t_elem + layer_launch
        # Backward: dgrad + wgrad GEMMs (2x forward FLOPs), the attention core as above,
        # elementwise backward ~2x traffic. Pricing dgrad and wgrad as their own GEMMs (dgrad
        # reduces over the output width, wgrad over the tokens) halves the p90 error on the lent
        # H200's kernels (benchmarks/results/h200_kernel_sweep.json: 0.26 -> 0.14), but leave one
        # source out went from 3.1% to 3.8% median (2026-11-27), so it stays 2x the forward.
        mlp_backward = 2.0 * t_mlp_gemms if t_mlp_gemms_backward is None else t_mlp_gemms_backward
        backward = (2.0 * (t_gemm - t_mlp_gemms) + mlp_backward + self.core_backward_factor * self.t_core
                    + 2.0 * t_elem + 2.0 * layer_launch)
        flops = self.f_qkv + self.f_out + f_mlp + self.core_flops
        return LayerTimes(forward, backward, self.t_core, flops, (self.t_qkv, self.t_out, mlp_up, mlp_down))


def _shared_modules(model: ModelSpec, kern: _Kernels):
    """(norms seconds, MLA up-projection seconds and FLOPs) of the submodules selective
    recompute can repeat in any layer (Megatron-Core recompute_modules): the two norms (read h,
    write h each) and MLA's query and KV up-projections."""
    h = float(model.hidden_size)
    a = float(model.num_attention_heads)
    t_norms = kern.streamed(4.0 * h, kern.rep_div)
    if model.mla is None:
        return t_norms, 0.0, 0.0
    mla = model.mla
    q_in = float(mla.q_lora_rank or h)
    t_qu, f_qu = kern.gemm(kern.tokens, q_in, a * (mla.qk_nope_head_dim + mla.qk_rope_head_dim) / kern.tp)
    t_kvu, f_kvu = kern.gemm(kern.tokens, float(mla.kv_lora_rank), a * (mla.qk_nope_head_dim + mla.v_head_dim) / kern.tp)
    return t_norms, t_qu + t_kvu, f_qu + f_kvu


def _dense_layer(model: ModelSpec, asm: _LayerAssembler, shared) -> LayerTimes:
    """A layer with a dense MLP (gated: up and gate as one GEMM of width 2F)."""
    kern = asm.kern
    h = float(model.hidden_size)
    F = float(model.ffn_hidden_size)
    up_width = (2.0 if model.gated_mlp else 1.0) * F
    t_up, f_up = kern.gemm(kern.tokens, h, up_width / kern.tp)
    t_down, f_down = kern.gemm(kern.tokens, F / kern.tp, h)
    act_elems = (3.0 if model.gated_mlp else 2.0) * F
    # Eager SwiGLU: silu (read+write F) then the product (2 reads + 1 write): 5F, not 3F.
    dense = asm.layer(t_up + t_down, f_up + f_down, act_elems, h + F, t_up, t_down, 2.0 * F if model.gated_mlp else 0.0)
    t_norms, t_mla_up, f_mla_up = shared
    zero = 0.0
    mlp = t_up + t_down + kern.streamed(act_elems, kern.tp)
    dense.module_forward = {"layernorm": t_norms, "mla_up_proj": t_mla_up, "mlp": mlp,
                            "moe_act": zero, "shared_experts": zero, "moe": zero}
    dense.module_flops = {"layernorm": zero, "mla_up_proj": f_mla_up, "mlp": f_up + f_down,
                          "moe_act": zero, "shared_experts": zero, "moe": zero}
    return dense


def dense_layer_parts(
    model: ModelSpec, counts: ParamCounts, gpu: GPUSpec, batch: LayoutBatch, calib: Calibration,
    attention_kernel_len=None,
):
    """(one dense layer's times, the assembler, the modules dense and MoE layers share): what
    ``costmodel.moe.dense_and_moe_layer_times`` builds a MoE layer from. ``attention_kernel_len``:
    keys per attention kernel call (default s / c, the ring chunk)."""
    kern = _kernels(gpu, batch, calib)
    asm = _LayerAssembler(model, counts, gpu, batch, calib, kern, attention_kernel_len)
    shared = _shared_modules(model, kern)
    return _dense_layer(model, asm, shared), asm, shared


def _by_loss(batch: LayoutBatch, unfused, fused, eager):
    """Per-layout value by loss kernel (``Layout.loss``)."""
    return np.where(batch.is_("loss", "fused"), fused, np.where(batch.is_("loss", "eager"), eager, unfused))


def logit_bytes(batch: LayoutBatch):
    """Bytes per logit alive at the loss, by loss kernel: a fused cross entropy keeps the BF16
    logits and writes the gradient over them (2); Megatron's unfused loss an FP32 copy (4);
    eager F.cross_entropy(logits.float()) holds at the start of backward the FP32 log-softmax
    it saved, the dense FP32 NLL gradient and the FP32 log-softmax gradient (12).

    Eager on vocab-sharded logits (TP > 1: torchtitan's loss_parallel) runs PyTorch's
    decomposition instead of the fused ATen kernels (torch/distributed/tensor/parallel/loss.py
    ``_nll_loss_and_log_softmax_backward``: ``grad_input = zeros_like(x)``, then
    ``(grad_input + exp(x)) * grad_output``): beside the saved FP32 log-softmax, the zeros, exp(x)
    and their sum, then the sum and the product, are FP32 tensors of the shard at once (16)."""
    return _by_loss(batch, 4.0, 2.0, np.where(batch.tp > 1, 16.0, 12.0))


def unfused_attention(batch: LayoutBatch):
    """Where attention runs unfused (materialising the a x s scores), not as FlashAttention."""
    return batch.is_("attention", "unfused")


def lm_head_times(model: ModelSpec, gpu: GPUSpec, batch: LayoutBatch, calib: Calibration):
    """Forward and backward time of the LM head GEMM + cross-entropy on the last stage, and
    its forward FLOPs. Megatron keeps the output layer in BF16 under FP8 training."""
    tokens = batch.mbs * batch.seq_len / batch.cp
    tp = batch.tp.astype(np.float64)
    hbm = gpu.memory_bandwidth_gbps * 1e9
    V = float(model.vocab_size)
    h = float(model.hidden_size)
    t, f = gemm_time(tokens, h, V / tp, gpu.bf16_tflops * 1e12, bf16_gemm_efficiency(gpu, calib), hbm, BF16_BYTES)
    logits = tokens * V / tp
    bw = hbm * calib.memory_bound_efficiency
    # Cross-entropy over the vocab shard, bytes moved per logit. Unfused, Megatron's
    # vocab-parallel cross entropy (megatron/core/tensor_parallel/cross_entropy.py): upcast
    # (read 2, write 4), max (4), subtract the max, exp, divide by the sum in place (3 x 8) and
    # the sum (4) = 38 forward; backward scales the kept softmax in place (8) and autograd
    # casts it back (6) = 14. Eager F.cross_entropy(logits.float()) moves about the same
    # (upcast 6, log_softmax 12, its backward 12, dense NLL gradient 4, downcast 6, plus the
    # model's own .float() of the logits): 24 forward, 28 backward. Fused (one kernel reading
    # BF16 logits with an online max/sum and writing the gradient in place): 4 forward, 4 backward.
    loss_fwd = logits * _by_loss(batch, 38.0, 4.0, 24.0) / bw
    loss_bwd = logits * _by_loss(batch, 14.0, 4.0, 28.0) / bw
    return t + loss_fwd, 2.0 * t + loss_bwd, f
