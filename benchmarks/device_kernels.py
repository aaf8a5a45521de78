"""Kernel efficiencies on a real GPU, to check the cost model's calibration constants.

    python benchmarks/device_kernels.py [--peak-bf16 989.4] [--peak-fp8 1978.9] [--hbm 3350]

Needs PyTorch with CUDA (run on a GPU machine; not part of the test suite). Measures, each the
median of timed repeats after warm-up:
- BF16 GEMMs of transformer shapes (tokens x hidden x width after TP) -> fraction of peak;
- FP8 GEMMs (torch._scaled_mm) of the same shapes, where supported;
- causal FlashAttention (SDPA flash backend) forward + backward -> fraction of BF16 peak,
  counting the causal FLOPs the cost model counts (4·s²/2·h per sequence forward, backward 2.5x);
- an RMSNorm-like elementwise pass and a copy -> fraction of HBM bandwidth.
Prints one JSON object.

    python benchmarks/device_kernels.py --sweep --out results.json

instead sweeps what the cost model's length and size terms assume (issue 26 item 3, issue 25
item 1): each linear layer's three GEMMs (forward, dgrad, wgrad, laid out as torch.nn.Linear
runs them) over M = mbs x s / cp tokens for transformer shapes after TP, and causal and
non-causal attention forward and forward + backward from 1K to 128K keys through both of
PyTorch's Hopper backends (FlashAttention-2 and cuDNN fused attention), GQA. ``--sections``
adds or picks others: ``launch`` (dependent tiny kernels, eager and from a CUDA graph), ``layer``
(one Llama-style layer's forward + backward by micro-batch), ``attention_dims`` (by head dim) and
``clock`` (a minute each of a 70B TP 8 layer and of 8192^3 GEMMs, with the SM clock and power
sampled through NVML: the sustained clock), ``grouped`` (MoE expert GEMMs), ``saved`` (the bytes an
attention block keeps for backward, BF16 and FP8, eager and compiled), ``optimizer`` (the Adam step's
bytes per parameter), ``contention`` / ``contention_layers`` / ``contention_paired`` (compute slowed
while N SMs are held as NCCL channels hold them: ``Calibration.comm_sm_fraction``) and ``allocator``
(memory outside PyTorch's pool, and the pool's fragmentation on a 1F1B stage: ``workspace_gib``,
``fragmentation``; run it in a fresh process). It writes the JSON after every section, so a run cut
short keeps what it measured.

    python benchmarks/device_kernels.py --summary benchmarks/results/h200_kernel_sweep.json

prints a sweep's tables (no GPU or PyTorch needed).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict

torch = None  # imported by main() when it measures: --summary needs no PyTorch


def timed(fn, warmup=3, reps=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def timed_loop(fn, target_s=2e-3, reps=5):
    """Median seconds of one call of ``fn``, timed as back-to-back loops of at least
    ``target_s`` so that short kernels are not timed against the host's launch rate."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    once = max(start.elapsed_time(end) / 1e3, 1e-6)
    n = max(1, min(200, int(target_s / once)))
    times = []
    for _ in range(reps + 1):
        start.record()
        for _ in range(n):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / n)
    return statistics.median(times[1:])


def timed_graph(fn, reps=5):
    """Median seconds of one call of ``fn`` replayed from a CUDA graph of back-to-back calls, so
    that neither the host's launch rate nor PyTorch's dispatch enters the time (the kernels'
    own time, with the GPU's gap between dependent kernels). Falls back to ``timed_loop``."""
    try:
        once = timed_loop(fn, target_s=0.0, reps=1)
        n = max(1, min(50, int(3e-3 / once)))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n):
                fn()
        return timed(graph.replay, warmup=2, reps=reps) / n
    except Exception:  # noqa: BLE001 - capture refused: time it from the stream
        return timed_loop(fn)


# (name, K, N) of a linear layer's forward GEMM after TP: Llama 3 8B (h 4096, GQA 32/8, ffn
# 14336) at TP 1 and 4, Llama 3 70B (h 8192, GQA 64/8, ffn 28672) at TP 8, GPT-3 175B (h 12288,
# ffn 49152) at TP 8, a 13B GPT (h 5120, ffn 20480) at TP 2.
SWEEP_LAYERS = (
    ("8b_tp1_qkv", 4096, 6144), ("8b_tp1_fc1", 4096, 28672), ("8b_tp1_fc2", 14336, 4096), ("8b_tp1_proj", 4096, 4096),
    ("8b_tp4_qkv", 4096, 1536), ("8b_tp4_fc1", 4096, 7168), ("8b_tp4_fc2", 3584, 4096), ("8b_tp4_proj", 1024, 4096),
    ("70b_tp8_qkv", 8192, 1280), ("70b_tp8_fc1", 8192, 7168), ("70b_tp8_fc2", 3584, 8192), ("70b_tp8_proj", 1024, 8192),
    ("175b_tp8_qkv", 12288, 4608), ("175b_tp8_fc1", 12288, 6144), ("175b_tp8_fc2", 6144, 12288),
    ("13b_tp2_qkv", 5120, 7680), ("13b_tp2_fc1", 5120, 10240), ("13b_tp2_fc2", 10240, 5120),
)
SWEEP_TOKENS = (512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 32768)


def gemm_sweep(out, peak_bf16, dev="cuda"):
    """Forward y = x W^T, dgrad dx = dy W and wgrad dW = dy^T x of each layer over M tokens."""
    rows = out.setdefault("gemm_m_sweep", [])
    for name, k, n in SWEEP_LAYERS:
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        for m in SWEEP_TOKENS:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            dy = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
            flops = 2.0 * m * k * n
            row = {"layer": name, "m": m, "k": k, "n": n}
            for part, fn in (("fwd", lambda: x @ w.t()), ("dgrad", lambda: dy @ w), ("wgrad", lambda: dy.t() @ x)):
                t = timed_graph(fn)
                row[part + "_us"] = t * 1e6
                row[part + "_fraction"] = flops / t / 1e12 / peak_bf16
            rows.append(row)
            x = dy = None
        w = None


def attention_sweep(out, peak_bf16, dev="cuda"):
    """Causal (and non-causal) SDPA forward and forward + backward by keys per kernel call,
    each backend, GQA; FLOPs counted as the cost model counts them (4·b·a·d·L²/2 causal)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    rows = out.setdefault("attention_sweep", [])
    cases = [(L, 32, 8, True) for L in (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)]
    cases += [(L, 64, 8, True) for L in (2048, 8192, 32768)]
    cases += [(L, 32, 8, False) for L in (2048, 8192, 32768)]
    for backend_name in ("FLASH_ATTENTION", "CUDNN_ATTENTION"):
        backend = getattr(SDPBackend, backend_name)
        for seq, heads, kv, causal in cases:
            batch = max(1, 32768 // seq)
            d = 128
            row = {"backend": backend_name, "seq": seq, "heads": heads, "kv_heads": kv, "head_dim": d,
                   "batch": batch, "causal": causal}
            try:
                q = torch.randn(batch, heads, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                k = torch.randn(batch, kv, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                v = torch.randn(batch, kv, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                gqa = True
                with sdpa_kernel(backend):
                    try:
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
                    except Exception:  # noqa: BLE001 - backend without GQA: give it every head
                        gqa = False
                        k = k.detach().repeat_interleave(heads // kv, dim=1).requires_grad_()
                        v = v.detach().repeat_interleave(heads // kv, dim=1).requires_grad_()
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    g = torch.randn_like(o)
                    fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
                    def fb():
                        fwd().backward(g)
                    reps = 3 if seq >= 65536 else 5
                    t_f = timed(fwd, warmup=1, reps=reps)
                    t_fb = timed(fb, warmup=1, reps=reps)
                flops_fwd = 4.0 * batch * heads * d * seq * seq * (0.5 if causal else 1.0)
                row.update(gqa=gqa, fwd_ms=t_f * 1e3, fwd_bwd_ms=t_fb * 1e3,
                           fwd_fraction=flops_fwd / t_f / 1e12 / peak_bf16,
                           fwd_bwd_fraction=3.5 * flops_fwd / t_fb / 1e12 / peak_bf16,
                           bwd_over_fwd=(t_fb - t_f) / t_f)
            except Exception as err:  # noqa: BLE001 - report and go on
                row["error"] = str(err)[:300]
            rows.append(row)
            q = k = v = o = g = None
            torch.cuda.empty_cache()


def launch_costs(out, dev="cuda"):
    """Per-kernel cost of a chain of dependent tiny kernels: issued one by one from Python
    (the host's issue rate through PyTorch's dispatcher) and replayed from a CUDA graph (the
    GPU's own launch gap)."""
    x = torch.zeros(1024, device=dev)
    chain = 200

    def ops():
        for _ in range(chain):
            x.add_(1.0)

    out["launch"] = {"eager_us_per_kernel": timed(ops, warmup=2, reps=5) / chain * 1e6,
                     "graph_us_per_kernel": timed_graph(ops) / chain * 1e6}


# (name, hidden, query heads, KV heads, head dim, FFN width) of one transformer layer per GPU
# after TP: Llama 3 8B at TP 1, Llama 3 70B at TP 8, a 13B GPT at TP 2 (gated MLP throughout).
SWEEP_BLOCKS = (("8b_tp1", 4096, 32, 8, 128, 14336), ("70b_tp8", 8192, 8, 1, 128, 3584),
                ("13b_tp2", 5120, 20, 20, 128, 10240))


def _layer_weights(h, a, g, d, ffn, dev="cuda"):
    def w(*shape):
        return torch.randn(*shape, device=dev, dtype=torch.bfloat16, requires_grad=True)

    return w((a + 2 * g) * d, h), w(h, a * d), w(2 * ffn, h), w(h, ffn)


def _layer_forward(x, weights, a, g, d):
    """One Llama-style layer's forward on x [mbs, seq, h]: RMSNorm, QKV, causal cuDNN attention
    (GQA), output projection, SwiGLU MLP, residuals."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    wqkv, wo, wup, wdown = weights
    mbs, seq, h = x.shape
    y = F.rms_norm(x, (h,))
    qkv = F.linear(y, wqkv).view(mbs, seq, a + 2 * g, d).transpose(1, 2)
    q, k, v = qkv.split([a, g, g], dim=1)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=a != g)
    z = x + F.linear(o.transpose(1, 2).reshape(mbs, seq, a * d), wo)
    u, gate = F.linear(F.rms_norm(z, (h,)), wup).chunk(2, dim=-1)
    return z + F.linear(F.silu(gate) * u, wdown)


def _layer_step(h, a, g, d, ffn, seq, mbs, weights, dev="cuda"):
    """(forward + backward of one Llama-style layer as a callable, its FLOPs)."""
    x = torch.randn(mbs, seq, h, device=dev, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(mbs, seq, h, device=dev, dtype=torch.bfloat16)

    def fb():
        _layer_forward(x, weights, a, g, d).backward(dy)

    tokens = mbs * seq
    # Linear layers 6 x tokens x weights (forward 2, backward 4; Kaplan et al. 2020 Sec. 2.1) and
    # the causal attention core 4 b a d s^2 / 2 forward, 3.5x that with its backward
    # (costmodel/flops.py, as the cost model counts it).
    flops = 6.0 * tokens * h * ((a + 2 * g) * d + a * d + 3 * ffn) + 3.5 * 4.0 * mbs * a * d * seq * seq / 2
    return fb, flops


def layer_sweep(out, peak_bf16, dev="cuda"):
    """Forward + backward of one Llama-style layer (RMSNorm, QKV, RoPE-free cuDNN attention,
    output projection, SwiGLU MLP; PyTorch eager and CUDA-graphed) by micro-batch size at a fixed
    sequence: does the time per token fall with the micro-batch on one GPU?"""
    rows = out.setdefault("layer_sweep", [])
    for name, h, a, g, d, ffn in SWEEP_BLOCKS:
        wqkv, wo, wup, wdown = _layer_weights(h, a, g, d, ffn, dev)
        for seq, mbs in ((2048, 1), (2048, 2), (2048, 4), (2048, 8), (4096, 1), (4096, 2), (4096, 4),
                         (8192, 1), (8192, 2)):
            row = {"block": name, "seq": seq, "mbs": mbs}
            try:
                fb, flops = _layer_step(h, a, g, d, ffn, seq, mbs, (wqkv, wo, wup, wdown), dev)
                t_eager = timed(fb, warmup=2, reps=5)
                t_graph = timed_graph(fb)
                tokens = mbs * seq
                row.update(eager_ms=t_eager * 1e3, graph_ms=t_graph * 1e3,
                           eager_us_per_token=t_eager / tokens * 1e6, graph_us_per_token=t_graph / tokens * 1e6,
                           graph_fraction=flops / t_graph / 1e12 / peak_bf16)
            except Exception as err:  # noqa: BLE001 - report and go on
                row["error"] = str(err)[:300]
            rows.append(row)
            fb = None
            wqkv.grad = wo.grad = wup.grad = wdown.grad = None
        torch.cuda.empty_cache()


def attention_dims(out, peak_bf16, dev="cuda"):
    """Causal forward + backward at 8K keys by head dimension (64, 96, 128; 192/128 as MLA's
    query-key and value widths), each backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    rows = out.setdefault("attention_dims", [])
    seq, batch = 8192, 4
    for backend_name in ("FLASH_ATTENTION", "CUDNN_ATTENTION"):
        for heads, dqk, dv in ((32, 64, 64), (32, 96, 96), (32, 128, 128), (16, 192, 128), (16, 256, 256)):
            row = {"backend": backend_name, "heads": heads, "d_qk": dqk, "d_v": dv, "seq": seq, "batch": batch}
            try:
                q = torch.randn(batch, heads, seq, dqk, device=dev, dtype=torch.bfloat16, requires_grad=True)
                k = torch.randn(batch, heads, seq, dqk, device=dev, dtype=torch.bfloat16, requires_grad=True)
                v = torch.randn(batch, heads, seq, dv, device=dev, dtype=torch.bfloat16, requires_grad=True)
                with sdpa_kernel(getattr(SDPBackend, backend_name)):
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    g = torch.randn_like(o)
                    fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    def fb():
                        fwd().backward(g)
                    t_f = timed(fwd, warmup=1, reps=5)
                    t_fb = timed(fb, warmup=1, reps=5)
                flops_fwd = 2.0 * batch * heads * (dqk + dv) * seq * seq / 2
                row.update(fwd_fraction=flops_fwd / t_f / 1e12 / peak_bf16,
                           fwd_bwd_fraction=3.5 * flops_fwd / t_fb / 1e12 / peak_bf16, bwd_over_fwd=(t_fb - t_f) / t_f)
            except Exception as err:  # noqa: BLE001 - report and go on
                row["error"] = str(err)[:300]
            rows.append(row)
            q = k = v = o = g = None
    torch.cuda.empty_cache()


def _sustain(fn, flops, seconds, peak_bf16):
    """Run ``fn`` back to back for ``seconds``, sampling about every half second its FLOP rate
    and the GPU's SM clock, board power and temperature (NVML)."""
    import time

    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    calls = max(1, int(0.5 / timed_loop(fn, target_s=0.0, reps=1)))
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    start = time.time()
    while time.time() - start < seconds:
        begin.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        t = begin.elapsed_time(end) / 1e3 / calls
        samples.append({"s": time.time() - start, "tflops": flops / t / 1e12,
                        "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                        "watts": pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
                        "celsius": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)})
    late = samples[len(samples) // 2:]
    return {
        "max_sm_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "power_limit_watts": pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3,
        "second_half_median": {k: statistics.median(x[k] for x in late)
                               for k in ("tflops", "sm_mhz", "watts", "celsius")},
        "fraction_of_peak": statistics.median(x["tflops"] for x in late) / peak_bf16,
        "first_sample_fraction": samples[0]["tflops"] / peak_bf16,
        "samples": samples,
    }


def sustained_clock(out, peak_bf16, seconds=60.0, dev="cuda"):
    """What a datasheet peak at its boost clock becomes once the board sits at its power limit
    (Calibration.sustained_clock_fraction): ``seconds`` of back-to-back 8192^3 BF16 GEMMs on
    random data, then as long of a Llama 3 70B layer's forward + backward at TP 8 (8K tokens)."""
    name, h, heads, g, d, ffn = SWEEP_BLOCKS[1]
    fb, flops = _layer_step(h, heads, g, d, ffn, 4096, 2, _layer_weights(h, heads, g, d, ffn, dev), dev)
    out["sustained_layer"] = {"block": name, "seq": 4096, "mbs": 2, **_sustain(fb, flops, seconds, peak_bf16)}
    fb = None
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    out["sustained_clock"] = _sustain(lambda: a @ b, 2.0 * 8192 ** 3, seconds, peak_bf16)


def grouped_sweep(out, peak_bf16, dev="cuda"):
    """MoE expert GEMMs by rows per expert: 8 local experts, fc1 (h 4096 -> 2 x 2048, gated) and
    fc2 (2048 -> 4096), as one fused grouped kernel (torch._grouped_mm, where this PyTorch has it)
    and as a loop of one GEMM per expert (TransformerEngine's GroupedLinear), both replayed from a
    CUDA graph, and the loop issued eagerly."""
    rows = out.setdefault("grouped_sweep", [])
    experts = 8
    for name, k, n in (("fc1", 4096, 4096), ("fc2", 2048, 4096)):
        w = torch.randn(experts, n, k, device=dev, dtype=torch.bfloat16)  # each expert's weight, out x in
        for m in (64, 128, 256, 512, 1024, 2048, 4096):
            x = torch.randn(experts * m, k, device=dev, dtype=torch.bfloat16)
            parts = list(x.split(m))
            flops = 2.0 * experts * m * k * n
            row = {"gemm": name, "experts": experts, "m_per_expert": m, "k": k, "n": n}

            def loop():
                for e in range(experts):
                    parts[e] @ w[e].t()

            row["loop_graph_fraction"] = flops / timed_graph(loop) / 1e12 / peak_bf16
            row["loop_eager_fraction"] = flops / timed(loop, warmup=2, reps=5) / 1e12 / peak_bf16
            try:
                offs = torch.arange(1, experts + 1, device=dev, dtype=torch.int32) * m
                wt = w.transpose(-2, -1)  # (experts, k, n), column-major per expert

                def grouped():
                    torch._grouped_mm(x, wt, offs=offs)

                grouped()
                row["grouped_graph_fraction"] = flops / timed_graph(grouped) / 1e12 / peak_bf16
            except Exception as err:  # noqa: BLE001 - no fused grouped GEMM here
                row["grouped_error"] = str(err)[:200]
            rows.append(row)


class _SavesFp8Input:
    """A linear layer that keeps only an FP8 copy of its input for the weight gradient, as
    TransformerEngine's Linear does under FP8 (TE v1.4 module/linear.py saves inputmat or
    inputmat_t, both FP8); the product itself runs in BF16 (only what is kept is measured)."""

    fn = None

    @classmethod
    def apply(cls, x, w):
        if cls.fn is None:
            class Fn(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, w):
                    scale = 448.0 / x.detach().abs().amax().float().clamp(min=1e-12)
                    ctx.save_for_backward((x.float() * scale).to(torch.float8_e4m3fn), scale, w)
                    return x @ w.t()

                @staticmethod
                def backward(ctx, g):
                    x8, scale, w = ctx.saved_tensors
                    x = (x8.float() / scale).to(g.dtype)
                    return g @ w, g.reshape(-1, g.shape[-1]).t() @ x.reshape(-1, x.shape[-1])
            cls.fn = Fn
        return cls.fn.apply(x, w)


def saved_activations(out, dev="cuda"):
    """What an attention block keeps for backward (memory.activation_bytes_per_token's FP8 term):
    which tensors PyTorch's fused attention kernels save (saved-tensor hooks: is the output among
    them?), and the bytes an attention + output-projection block holds after forward, per element
    of the attention output: with a BF16 projection, with one that keeps an FP8 copy of its input
    (TransformerEngine's rule), and the latter under torch.compile (its partitioner picks what to
    keep). q, k, v are [B, S, H, D] in memory (Megatron's sbhd-like layout) so the output reaches
    the projection without a copy."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, S, H, D = 2, 4096, 32, 128
    hid = H * D
    rows = out.setdefault("saved_activations", [])

    def qkv():
        return [torch.randn(B, S, H, D, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]

    w = torch.randn(hid, hid, device=dev, dtype=torch.bfloat16, requires_grad=True)

    def block(q, k, v, fp8):
        o = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                             is_causal=True)
        o = o.transpose(1, 2).reshape(B, S, hid)
        return _SavesFp8Input.apply(o, w) if fp8 else o @ w.t()

    compiled = torch.compile(lambda q, k, v: block(q, k, v, True))
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        row = {"backend": name, "B": B, "S": S, "H": H, "D": D}
        try:
            with sdpa_kernel(backend):
                q, k, v = qkv()
                saved = []
                with torch.autograd.graph.saved_tensors_hooks(
                        lambda t: (saved.append((tuple(t.shape), str(t.dtype), t.numel() * t.element_size(),
                                                 t.data_ptr())), t)[1], lambda t: t):
                    o = torch.nn.functional.scaled_dot_product_attention(
                        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
                row["sdpa_saved"] = [{"shape": s_, "dtype": d_, "bytes": n_, "is_output": p_ == o.data_ptr()}
                                     for s_, d_, n_, p_ in saved]
                del o
                for label, fn in (("bf16_proj", lambda q, k, v: block(q, k, v, False)),
                                  ("fp8_copy_proj", lambda q, k, v: block(q, k, v, True)),
                                  ("fp8_copy_proj_compiled", compiled)):
                    for _ in range(2):  # the second pass is measured (compile and allocator warm)
                        q, k, v = qkv()
                        torch.cuda.synchronize()
                        base = torch.cuda.memory_allocated()
                        y = fn(q, k, v)
                        torch.cuda.synchronize()
                        held = torch.cuda.memory_allocated() - base - y.numel() * y.element_size()
                        y.float().sum().backward()
                        del y, q, k, v
                    row[label + "_bytes_per_output_element"] = held / (B * S * hid)
        except Exception as err:  # noqa: BLE001 - report and go on
            row["error"] = str(err)[:300]
        rows.append(row)


def _sm_holders():
    """Two Triton kernels that each hold one SM per program for a set time, as an NCCL
    collective holds one SM per channel (one thread block of 512 threads per channel, NCCL's
    NCCL_NTHREADS default): ``spin`` only loops on registers (a channel waiting on the network),
    ``copy`` streams a buffer through HBM (a channel moving data over NVLink)."""
    import triton
    import triton.language as tl

    @triton.jit
    def spin(buf, iters, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(buf + offs)
        for _ in range(iters):
            x = x * 0.9999999 + 1e-7
        tl.store(buf + offs, x)

    @triton.jit
    def copy(src, dst, per_prog, reps, BLOCK: tl.constexpr):
        base = tl.program_id(0).to(tl.int64) * per_prog
        for _ in range(reps):
            for off in range(0, per_prog, BLOCK):
                offs = base + off + tl.arange(0, BLOCK)
                tl.store(dst + offs, tl.load(src + offs))

    return spin, copy


def _set_carveout(sms):
    """cuBLAS's SM-count target (PyTorch's experimental carve-out; TransformerEngine's
    comm-overlap GEMMs run the same way on sm_count - num_comm_sm SMs). False where missing."""
    setter = getattr(torch._C, "_set_sm_carveout_experimental", None)
    if setter is None:
        return False
    setter(sms)
    return True


def _concurrent(work, hold, reps=5):
    """Median (work seconds, hold seconds, hold's head start) with ``hold`` launched on a side
    stream first and ``work`` on the current stream just after (a 1-SM sleep of ~25 us between,
    so the holder's blocks take their SMs before the work's)."""
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    rows = []
    for i in range(reps + 1):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        side.wait_stream(main)
        with torch.cuda.stream(side):
            ev[0].record()
            hold()
            ev[1].record()
        torch.cuda._sleep(50_000)
        ev[2].record(main)
        work()
        ev[3].record(main)
        torch.cuda.synchronize()
        if i:
            rows.append((ev[2].elapsed_time(ev[3]) / 1e3, ev[0].elapsed_time(ev[1]) / 1e3,
                         ev[0].elapsed_time(ev[2]) / 1e3))
    return tuple(statistics.median(r[j] for r in rows) for j in range(3))


def _paired(work, hold, reps):
    """Median and quartiles of the slowdown (work beside - work alone) / hold seconds, each
    concurrent run paired with a run of the work alone just before it, so that the GPU's clock
    drifting between runs (a few percent over a minute) does not enter the difference."""
    one = lambda: timed(work, warmup=0, reps=1)
    work()
    slow = []
    for _ in range(reps):
        alone = one()
        beside, held, _ = _concurrent(work, hold, reps=1)
        slow.append((beside - alone) / held)
    slow.sort()
    q = lambda f: slow[min(len(slow) - 1, int(f * len(slow)))]
    return statistics.median(slow), q(0.25), q(0.75)


def contention(out, peak_bf16, dev="cuda", m=8192, seq=4096, buffer_elements=64 << 20, ns=(8, 16, 32),
               fractions=(0.4,), reps=5, pieces=("gemm", "layer"), key="contention", seqs=None, paired=False):
    """How much compute slows while a collective's blocks hold SMs beside it (the cost model's
    ``Calibration.comm_sm_fraction``: 0.12 of the hidden seconds, 16 NCCL channels of 132 SMs).
    For each piece of work (chains of GEMMs of layer shapes, one Llama-style layer's forward +
    backward) and N held SMs: the work alone, and with N blocks of ``spin`` or ``copy`` launched
    first for about 40% of the work's time; slowdown = (work beside - work alone) / hold time.
    Repeated with cuBLAS told to leave N SMs free (``_set_carveout``), as TransformerEngine's
    overlapped GEMMs run."""
    spin, copy = _sm_holders()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    block = 512
    buf = torch.zeros(64 * block, device=dev, dtype=torch.float32)
    src = torch.randn(buffer_elements, device=dev, dtype=torch.bfloat16)  # 128 MiB: twice the L2
    dst = torch.empty_like(src)

    def spin_launch(n, iters):
        return lambda: spin[(n,)](buf, iters, BLOCK=block, num_warps=16)

    def per_program(n):  # elements each of n copy programs streams, whole 4096-element blocks
        return (src.numel() // n) // 4096 * 4096

    def copy_launch(n, reps):
        per = per_program(n)
        return lambda: copy[(n,)](src, dst, per, reps, BLOCK=4096, num_warps=16)

    def sized(make, n, target_s, probe):
        """The holder for ``n`` blocks whose run alone lasts about ``target_s`` (linear in its count)."""
        t = timed(make(n, probe), warmup=1, reps=3)
        count = max(1, int(round(probe * target_s / t)))
        fn = make(n, count)
        return fn, timed(fn, warmup=1, reps=3), count

    w = {}
    def gemm_chain(k, n, count=12):
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        w[(k, n)] = (a, b)
        return (lambda: [a @ b for _ in range(count)]), 2.0 * m * k * n * count

    works = []
    if "gemm" in pieces:
        works += [("gemm_8b_tp1_fc1",) + gemm_chain(4096, 28672), ("gemm_70b_tp8_fc1",) + gemm_chain(8192, 7168),
                  ("gemm_70b_tp8_proj",) + gemm_chain(1024, 8192, count=60)]
    if "layer" in pieces:
        for label, (h, a_, g, d, ffn), count in (("8b_tp1", (4096, 32, 8, 128, 14336), 3),
                                                  ("70b_tp8", (8192, 8, 1, 128, 3584), 4)):
            if label == "70b_tp8" and "layer70" not in pieces:
                continue
            weights = _layer_weights(h, a_, g, d, ffn, dev)
            for s_ in seqs or (seq,):
                fb, flops = _layer_step(h, a_, g, d, ffn, s_, 1, weights, dev)
                works.append((f"layer_{label}_s{s_}", (lambda fb=fb, count=count: [fb() for _ in range(count)]),
                              count * flops))
    rows = out.setdefault(key, [])
    out["contention_sms"] = sms
    for name, work, flops in works:
        for n in ns:
            for kind, make, probe in (("spin", spin_launch, 20_000), ("copy", copy_launch, 1)):
                for fraction in fractions:
                    alone = timed(work, warmup=2, reps=min(reps, 5))  # timed beside each measurement: clocks drift
                    row = {"work": name, "held_sms": n, "holder": kind, "hold_fraction": fraction,
                           "work_alone_ms": alone * 1e3, "work_fraction": flops / alone / 1e12 / peak_bf16}
                    try:
                        hold, hold_alone, count = sized(make, n, fraction * alone, probe)
                        beside, held, head = _concurrent(work, hold, reps=3 if paired else reps)
                        row.update(hold_alone_ms=hold_alone * 1e3, hold_beside_ms=held * 1e3, head_start_us=head * 1e6,
                                   work_beside_ms=beside * 1e3, slowdown=(beside - alone) / held,
                                   sm_share=n / sms)
                        if paired:
                            med, lo, hi = _paired(work, hold, reps)
                            row.update(slowdown=med, slowdown_q25=lo, slowdown_q75=hi, paired_runs=reps)
                        if kind == "copy":  # bytes read and written by the holder alone, GB/s
                            row["copy_gbs_alone"] = 4.0 * n * per_program(n) * count / hold_alone / 1e9
                        if name.startswith("gemm") and _set_carveout(n):
                            try:
                                carved = timed(work, warmup=2, reps=reps)
                                c_beside, c_held, _ = _concurrent(work, hold, reps=reps)
                                row.update(carveout_alone_ms=carved * 1e3, carveout_beside_ms=c_beside * 1e3,
                                           carveout_slowdown=(c_beside - alone) / c_held)
                            finally:
                                _set_carveout(None)
                    except Exception as err:  # noqa: BLE001 - report and go on
                        row["error"] = str(err)[:300]
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    w.clear()
    torch.cuda.empty_cache()


def allocator(out, dev="cuda", dims=(4096, 32, 8, 128, 14336),
              cases=((4096, 1, 4), (8192, 1, 4), (4096, 2, 8), (8192, 1, 1))):
    """Memory a training process holds beyond its tensors (``Calibration.workspace_gib`` and
    ``Calibration.fragmentation``, issue 25 item 3), on one pipeline stage of Llama-style 8B
    layers (TP 1) run as 1F1B: ``inflight`` micro-batches' activations alive at once, backward of
    the oldest before each new forward. Reads, at each step: the GPU memory in use by the process
    outside PyTorch's pool (CUDA context, cuBLAS/cuDNN handles; torch.cuda.mem_get_info minus
    memory_reserved), and the pool's peak reserved against its peak allocated: fragmentation =
    (peak reserved - peak allocated) / peak activations (peak allocated less weights and grads).
    Run it in a fresh process; PYTORCH_CUDA_ALLOC_CONF (e.g. expandable_segments:True) is recorded."""
    import os

    rows = out.setdefault("allocator", [])
    gib = float(1 << 30)

    def outside():
        free, total = torch.cuda.mem_get_info()
        return (total - free - torch.cuda.memory_reserved()) / gib

    torch.zeros(1, device=dev)
    torch.cuda.synchronize()
    base = {"conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "outside_after_init_gib": outside()}
    h, a, g, d, ffn = dims
    layers = 4
    weights = [_layer_weights(h, a, g, d, ffn, dev) for _ in range(layers)]
    for seq, mbs, inflight in cases:
        row = dict(base, layers=layers, seq=seq, mbs=mbs, inflight=inflight)
        try:
            for ws in weights:
                for t in ws:
                    t.grad = None
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

            def forward():
                x = torch.randn(mbs, seq, h, device=dev, dtype=torch.bfloat16, requires_grad=True)
                y = x
                for ws in weights:
                    y = _layer_forward(y, ws, a, g, d)
                return y

            def backward(y):
                y.backward(torch.randn_like(y))

            # one step first, so that grads exist (as after step 1 of training) and kernels are loaded
            backward(forward())
            torch.cuda.synchronize()
            static = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            total_mb = 3 * inflight
            queue = [forward() for _ in range(inflight)]
            for _ in range(total_mb - inflight):
                backward(queue.pop(0))
                queue.append(forward())
            while queue:
                backward(queue.pop(0))
            torch.cuda.synchronize()
            peak_alloc = torch.cuda.max_memory_allocated()
            peak_res = torch.cuda.max_memory_reserved()
            acts = peak_alloc - static
            row.update(static_gib=static / gib, peak_allocated_gib=peak_alloc / gib, peak_reserved_gib=peak_res / gib,
                       peak_activations_gib=acts / gib, activations_per_microbatch_layer_gib=acts / gib / inflight / layers,
                       fragmentation=(peak_res - peak_alloc) / acts if acts > 0 else None,
                       outside_after_step_gib=outside())
        except Exception as err:  # noqa: BLE001 - report and go on
            row["error"] = str(err)[:300]
        rows.append(row)
        print(json.dumps(row), flush=True)


def optimizer_step(out, hbm_gbs, dev="cuda"):
    """The optimizer step (costmodel.optimizer.OPTIMIZER_STEP_BYTES): mixed-precision Adam over
    FP32 master weights and FP32 gradients, as Megatron-Core's DistributedOptimizer runs it
    (a fused Adam, the gradient norm over the gradients, the copy of the updated master weights
    into the BF16 model weights), each part timed alone, and in one step that also scales the
    gradients by the clip factor (torch's clip_grad_norm_ always does; Megatron only when the norm
    exceeds the clip), plus PyTorch's
    multi-tensor (foreach, unfused) Adam. Reported as seconds and as bytes per parameter at the
    device copy's measured rate, so the model's bytes and its bandwidth share can be compared."""
    n_tensors, per = 64, 1 << 23  # 537M parameters in 8M-element tensors (a 70B TP 8 layer's scale)
    params = [torch.zeros(per, device=dev, dtype=torch.float32, requires_grad=True) for _ in range(n_tensors)]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    model = [torch.empty(per, device=dev, dtype=torch.bfloat16) for _ in range(n_tensors)]
    n = n_tensors * per
    src = torch.empty(n // 2, device=dev, dtype=torch.float32)
    dst = torch.empty_like(src)
    t_copy = timed(lambda: dst.copy_(src))
    copy_gbs = 2 * src.numel() * 4 / t_copy / 1e9
    src = dst = None
    rows = {"params": n, "copy_gbs": copy_gbs, "copy_fraction_of_hbm": copy_gbs / hbm_gbs}
    for name, kw in (("fused", {"fused": True}), ("foreach", {"foreach": True})):
        opt = torch.optim.AdamW(params, lr=1e-4, **kw)
        opt.step()  # creates m and v
        t = timed(opt.step)
        rows[f"adam_{name}_s"] = t
        rows[f"adam_{name}_bytes_per_param"] = t * copy_gbs * 1e9 / n
        if name == "fused":
            fused = opt
        else:
            opt = None
    grads = [p.grad for p in params]
    t_norm = timed(lambda: torch.stack(torch._foreach_norm(grads)).norm())
    t_cast = timed(lambda: torch._foreach_copy_(model, [p.detach() for p in params]))

    def step():
        total = torch.stack(torch._foreach_norm(grads)).norm()
        torch._foreach_mul_(grads, torch.clamp(1.0 / (total + 1e-6), max=1.0))
        fused.step()
        torch._foreach_copy_(model, [p.detach() for p in params])

    t_step = timed(step)
    for part, t in (("grad_norm", t_norm), ("cast_to_bf16", t_cast), ("norm_scale_adam_cast", t_step)):
        rows[part + "_s"] = t
        rows[part + "_bytes_per_param"] = t * copy_gbs * 1e9 / n
    out["optimizer"] = rows


SECTIONS = ("attention", "gemm", "launch", "layer", "attention_dims", "clock", "grouped", "saved", "optimizer",
            "contention", "contention_layers", "contention_paired", "allocator")


def sweep(args) -> None:
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "cuda": torch.version.cuda}

    def save():
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)

    save()
    run = {"attention": lambda: attention_sweep(out, args.peak_bf16), "gemm": lambda: gemm_sweep(out, args.peak_bf16),
           "launch": lambda: launch_costs(out), "layer": lambda: layer_sweep(out, args.peak_bf16),
           "attention_dims": lambda: attention_dims(out, args.peak_bf16),
           "clock": lambda: sustained_clock(out, args.peak_bf16, args.clock_seconds),
           "grouped": lambda: grouped_sweep(out, args.peak_bf16), "saved": lambda: saved_activations(out),
           "optimizer": lambda: optimizer_step(out, args.hbm),
           "contention": lambda: contention(out, args.peak_bf16), "allocator": lambda: allocator(out),
           "contention_layers": lambda: contention(out, args.peak_bf16, seq=8192, ns=(4, 8, 16, 24, 32), fractions=(0.2, 0.6),
                                                   reps=7, pieces=("layer", "layer70"), key="contention_layers"),
           "contention_paired": lambda: contention(out, args.peak_bf16, seqs=(4096, 8192), ns=(4, 8, 16, 32),
                                                   fractions=(0.3, 0.8), reps=15, pieces=("layer", "layer70"),
                                                   key="contention_paired", paired=True)}
    for section in args.sections.split(","):
        run[section]()
        save()


def summary(path: str) -> None:
    """The tables of a --sweep result: medians over shapes, fractions of the dense BF16 peak."""
    d = json.load(open(path))
    print(f"{d.get('gpu')}, torch {d.get('torch')}, cuDNN {d.get('cudnn')}")
    if d.get("gemm_m_sweep"):
        by_m = defaultdict(lambda: defaultdict(list))
        for r in d["gemm_m_sweep"]:
            for part in ("fwd", "dgrad", "wgrad"):
                by_m[r["m"]][part].append(r[part + "_fraction"])
        print(f"GEMMs, median over {len(d['gemm_m_sweep']) // len(by_m)} layer shapes after TP:")
        print("  tokens M   forward  dgrad  wgrad")
        for m, parts in sorted(by_m.items()):
            print(f"  {m:>8,}   " + "  ".join(f"{statistics.median(parts[p]):5.2f}" for p in ("fwd", "dgrad", "wgrad")))
    if d.get("attention_sweep"):
        rows = [r for r in d["attention_sweep"] if "error" not in r and r["causal"] and r["heads"] == 32]
        cols = sorted({r["backend"] for r in rows})
        print("causal attention, 32 query / 8 KV heads, head dim 128, forward + backward:")
        print("  keys L    " + "  ".join(f"{c.split('_')[0]:>6}" for c in cols))
        for seq in sorted({r["seq"] for r in rows}):
            vals = {r["backend"]: r["fwd_bwd_fraction"] for r in rows if r["seq"] == seq}
            print(f"  {seq:>7,}   " + "  ".join(f"{vals.get(c, float('nan')):6.3f}" for c in cols))
    if d.get("attention_dims"):
        print("causal attention at 8K keys by head dim (query-key / value), forward + backward:")
        for r in d["attention_dims"]:
            val = f"{r['fwd_bwd_fraction']:.3f}" if "error" not in r else "no kernel"
            print(f"  {r['backend'].split('_')[0]:>6} d {r['d_qk']}/{r['d_v']}: {val}")
    if d.get("launch"):
        la = d["launch"]
        print(f"dependent tiny kernels: {la['eager_us_per_kernel']:.1f} us each issued from Python, "
              f"{la['graph_us_per_kernel']:.2f} us replayed from a CUDA graph")
    if d.get("grouped_sweep"):
        print("MoE expert GEMMs, 8 experts, by rows per expert "
              "(fraction of peak: fused grouped / loop from a graph / loop eager):")
        for r in d["grouped_sweep"]:
            fused = f"{r['grouped_graph_fraction']:.2f}" if "grouped_graph_fraction" in r else "n/a"
            print(f"  {r['gemm']} M {r['m_per_expert']:>5}: {fused} / {r['loop_graph_fraction']:.2f} / {r['loop_eager_fraction']:.2f}")
    for key, what in (("sustained_clock", "8192^3 BF16 GEMMs"), ("sustained_layer", "a 70B TP 8 layer fwd + bwd")):
        if d.get(key):
            sc = d[key]
            med = sc["second_half_median"]
            print(f"{what} for {sc['samples'][-1]['s']:.0f} s: first half-second {sc.get('first_sample_fraction', float('nan')):.3f} "
                  f"of peak, second half {sc['fraction_of_peak']:.3f} ({med['tflops']:.0f} TFLOP/s) at {med['sm_mhz']:.0f} "
                  f"of {sc['max_sm_mhz']} MHz, {med['watts']:.0f} of {sc['power_limit_watts']:.0f} W, {med['celsius']:.0f} C")
    if d.get("saved_activations"):
        print("attention + output projection, bytes kept after forward per element of the attention output "
              "(q, k, v excluded):")
        for r in d["saved_activations"]:
            if "error" in r:
                print(f"  {r['backend']:>6}: {r['error'][:100]}")
                continue
            outs = [s for s in r["sdpa_saved"] if s["is_output"]]
            print(f"  {r['backend']:>6}: the kernel keeps its output: {'yes' if outs else 'no'}; BF16 projection "
                  f"{r['bf16_proj_bytes_per_output_element']:.2f}, FP8-copy projection "
                  f"{r['fp8_copy_proj_bytes_per_output_element']:.2f}, the same compiled "
                  f"{r['fp8_copy_proj_compiled_bytes_per_output_element']:.2f}")
    if d.get("optimizer"):
        o = d["optimizer"]
        print(f"optimizer step over {o['params'] / 1e6:.0f}M FP32 parameters, bytes per parameter at the device copy's "
              f"{o['copy_gbs']:.0f} GB/s ({o['copy_fraction_of_hbm']:.2f} of HBM):")
        for part in ("adam_fused", "adam_foreach", "grad_norm", "cast_to_bf16", "norm_scale_adam_cast"):
            print(f"  {part:>20}: {o[part + '_s'] * 1e3:6.2f} ms, {o[part + '_bytes_per_param']:5.1f} B/param")
    if d.get("layer_sweep"):
        print("one layer forward + backward, us per token (eager / CUDA graph):")
        for r in d["layer_sweep"]:
            if "error" not in r:
                print(f"  {r['block']:>8} s {r['seq']:>5} mbs {r['mbs']}: {r['eager_us_per_token']:.3f} / {r['graph_us_per_token']:.3f}")
    for key in ("contention", "contention_layers", "contention_paired"):
        if not d.get(key):
            continue
        print(f"compute slowed per second of N held SMs of {d.get('contention_sms')}, by work, N, holder and hold time "
              "(x share of the work's): slowdown [quartiles] (SM share N/SMs) [carve-out: cuBLAS told to leave N SMs free]:")
        for r in d[key]:
            if "error" in r:
                print(f"  {r['work']:>20} N {r['held_sms']:>2} {r['holder']:>4}: {r['error'][:80]}")
                continue
            carved = f"  carve-out {r['carveout_slowdown']:5.2f}" if "carveout_slowdown" in r else ""
            quart = f" [{r['slowdown_q25']:5.2f}, {r['slowdown_q75']:5.2f}]" if "slowdown_q25" in r else ""
            print(f"  {r['work']:>20} N {r['held_sms']:>2} {r['holder']:>4} x{r.get('hold_fraction', 0.4):.1f}: "
                  f"{r['slowdown']:5.2f}{quart} (share {r['sm_share']:.2f}){carved}")
    for r in d.get("allocator", []):
        if "error" not in r:
            print(f"allocator [{r['conf'] or 'default'}] s {r['seq']} mbs {r['mbs']} in flight {r['inflight']}: "
                  f"fragmentation {r['fragmentation']:.3f}, outside the pool {r['outside_after_step_gib']:.2f} GiB")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peak-bf16", type=float, default=989.4)
    ap.add_argument("--peak-fp8", type=float, default=1978.9)
    ap.add_argument("--hbm", type=float, default=3350.0, help="GB/s")
    ap.add_argument("--sweep", action="store_true", help="the GEMM token sweep and the attention length sweep")
    ap.add_argument("--out", default="kernel_sweep.json", help="where --sweep writes its JSON")
    ap.add_argument("--sections", default="attention,gemm", help="--sweep's sections, comma-separated: " + ", ".join(SECTIONS))
    ap.add_argument("--clock-seconds", type=float, default=60.0, help="how long --sections clock runs its GEMMs")
    ap.add_argument("--summary", metavar="JSON", help="print the tables of a --sweep result and exit")
    args = ap.parse_args()
    if args.summary:
        summary(args.summary)
        return
    global torch
    import torch as _torch

    torch = _torch
    if args.sweep:
        sweep(args)
        return
    dev = "cuda"
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "gemm_bf16": [], "gemm_fp8": []}
    shapes = [  # (M tokens, K, N): Llama-3 8B/70B/405B projections, various TP
        (8192, 4096, 6144), (8192, 4096, 4096), (8192, 4096, 28672), (8192, 14336, 4096),
        (8192, 8192, 10240 // 4), (8192, 8192 // 4, 8192), (8192, 8192, 57344 // 4), (8192, 28672 // 4, 8192),
        (8192, 16384, 18432 // 8), (8192, 16384, 106496 // 8), (8192, 53248 // 8, 16384), (8192, 2048, 2048),
        (16384, 2304, 6912), (16384, 2304, 9216), (2048, 4096, 4096), (1024, 7168, 4096),
    ]
    for m, k, n in shapes:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        t = timed(lambda: a @ b)
        out["gemm_bf16"].append({"m": m, "k": k, "n": n, "tflops": 2 * m * k * n / t / 1e12,
                                 "fraction": 2 * m * k * n / t / 1e12 / args.peak_bf16})
        try:
            a8 = a.to(torch.float8_e4m3fn)
            b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()
            one = torch.ones((), device=dev)
            t8 = timed(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
            out["gemm_fp8"].append({"m": m, "k": k, "n": n, "tflops": 2 * m * k * n / t8 / 1e12,
                                    "fraction": 2 * m * k * n / t8 / 1e12 / args.peak_fp8})
        except Exception as err:  # noqa: BLE001 - report and go on
            out["gemm_fp8_error"] = str(err)[:200]
    out["attention"] = []
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for seq, heads, kv, d, batch in ((4096, 32, 8, 128, 4), (8192, 32, 8, 128, 2), (8192, 64, 8, 128, 1), (32768, 32, 8, 128, 1)):
        q = torch.randn(batch, heads, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        kk = torch.randn(batch, heads, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(batch, heads, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            fwd = lambda: torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=True)
            o = fwd()
            g = torch.randn_like(o)
            t_f = timed(fwd)
            def fb():
                y = fwd()
                y.backward(g)
            t_fb = timed(fb)
        flops_fwd = 4.0 * batch * heads * d * seq * seq / 2  # causal
        out["attention"].append({"seq": seq, "heads": heads, "batch": batch,
                                 "fwd_fraction": flops_fwd / t_f / 1e12 / args.peak_bf16,
                                 "fwd_bwd_fraction": 3.5 * flops_fwd / t_fb / 1e12 / args.peak_bf16})
    x = torch.randn(8192 * 4, 4096, device=dev, dtype=torch.bfloat16)
    w = torch.randn(4096, device=dev, dtype=torch.bfloat16)
    def rms():
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w
    t = timed(rms)
    out["rmsnorm_eager_fraction"] = 2 * x.numel() * 2 / t / 1e9 / args.hbm
    y = torch.empty_like(x)
    t = timed(lambda: y.copy_(x))
    out["copy_fraction"] = 2 * x.numel() * 2 / t / 1e9 / args.hbm
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
