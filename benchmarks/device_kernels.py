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
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peak-bf16", type=float, default=989.4)
    ap.add_argument("--peak-fp8", type=float, default=1978.9)
    ap.add_argument("--hbm", type=float, default=3350.0, help="GB/s")
    args = ap.parse_args()
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
