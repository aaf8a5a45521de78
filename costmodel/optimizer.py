"""The optimizer step: Adam over the parameters a GPU owns, bound by HBM bandwidth.

Mixed-precision Adam (Micikevicius et al. 2018; Megatron-Core DistributedOptimizer) streams
each owned parameter's FP32 state once per step and does a few FLOPs per byte, so it runs at
the memory-bound kernels' share of HBM bandwidth. ZeRO >= 1 owns 1/shard of the states.
"""

from __future__ import annotations

import numpy as np

from costmodel.context import ChunkContext

OPTIMIZER_STEP_BYTES = 38.0
"""HBM traffic per owned parameter of the optimizer step as Megatron-Core runs it
(megatron/core/optimizer/optimizer.py, MixedPrecisionOptimizer.step with BF16 and FP32 main
gradients): the gradient norm reads the FP32 gradient (4 B, multi_tensor_l2norm); the fused Adam
reads gradient, master, m and v and writes master, m and v (28 B); the updated master is copied
into the BF16 model weight (read 4 B, write 2 B). torchtitan's fused AdamW plus
clip_grad_norm_'s scale (4 + 8 + 28 B, no copy: FSDP2 casts at the all-gather) is within 2 B.
On a lent H100 SXM (benchmarks/device_kernels.py --sections optimizer ->
benchmarks/results/h100_kernel_sweep.json, 537M parameters) the three kernels ran at 0.82-0.88 of
the device copy's rate (0.71-0.76 of the datasheet bandwidth): 0.9 + 6.0 + 1.3 = 8.1 ms against
6.8 ms priced. (Counting 38 B where 34 were counted before 2026-11-28 moved no reference run by
more than 0.6%.) PyTorch's
unfused (foreach) Adam took 2.8x the fused kernel's time."""


def owned_params(zero, dense, expert, dense_shard, expert_shard):
    """Parameters whose optimizer states this GPU updates: a 1/shard slice under ZeRO >= 1
    (Rajbhandari et al. 2020, Sec. 5.1), all it holds otherwise."""
    return np.where(zero >= 1, dense / dense_shard + expert / expert_shard, dense + expert)


def optimizer_time(ctx: ChunkContext, sharding, heavy):
    """Seconds of the optimizer step on the stage holding most parameters (``heavy``, a
    ``stage_params.HeaviestStage``) under ``sharding`` (``data_parallel.Sharding``): 38 B per
    owned parameter over achievable HBM bandwidth."""
    owned = owned_params(sharding.zero, heavy.dense, heavy.expert, sharding.dense_shard, sharding.expert_shard)
    bandwidth = ctx.gpu.memory_bandwidth_gbps * 1e9 * ctx.calib.memory_bound_efficiency
    return OPTIMIZER_STEP_BYTES * owned / bandwidth
