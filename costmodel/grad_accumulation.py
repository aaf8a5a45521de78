"""Gradient accumulation outside the weight-gradient GEMM: one pass over the gradients per micro-batch.

With m micro-batches per step, each micro-batch's weight gradients are added into the step's
accumulator. Megatron fuses the add into the weight-gradient GEMM (``gradient_accumulation_fusion``,
megatron/core/tensor_parallel/layers.py: the wgrad GEMM runs with beta = 1 into ``main_grad``), so
no extra pass exists (``grad_accum_pass`` fused). Other engines stream every gradient the GPU
accumulates through HBM once per micro-batch, on the critical path of that micro-batch's
backward (memory-bound: ``Calibration.memory_bound_efficiency`` of the datasheet bandwidth):

* autograd: PyTorch's AccumulateGrad, ``param.grad += new`` in the parameter's 16-bit dtype: read
  both, write one, 6 B; the first micro-batch assigns, so (m - 1) of m micro-batches pay it.
  DeepSpeed's fp16 engine and its ZeRO optimizers with 16-bit accumulation. Under ZeRO >= 2 FSDP
  accumulates in its reduce dtype: FSDP2 adds each reduce-scattered shard into the sharded gradient
  (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce:
  ``sharded_param.grad._local_tensor += new_sharded_grad``), on 1/shard of the elements, and a
  pipelined FSDP2 stage adds each micro-batch's BF16 gradient into an unsharded copy in the reduce
  dtype (_fsdp_param.py accumulate_unsharded_grad_if_needed): read 2 B and the accumulator, write it,
  2 + 2 x its bytes (10 B in FP32).
* cast_add: DeepSpeed's BF16_Optimizer (runtime/bf16_optimizer.py), which the pipeline engine
  drives around every micro-batch's backward (runtime/pipe/engine.py ``_exec_backward_pass``; the
  engine's ``backward`` otherwise): ``clear_lp_grads`` zeroes the BF16 gradients first (write 2 B),
  autograd then adds the new gradient into them in place (read 2 + 2, write 2), and
  ``update_hp_grads`` runs ``hp_grad.add_(lp.grad.to(hp_grad.dtype))``: the cast reads the BF16
  gradient (2 B) and writes an FP32 copy (4 B), the add reads it and the accumulator (4 + 4 B) and
  writes the accumulator (4 B). 26 B, every micro-batch.

How much it weighs: per parameter, a micro-batch of T tokens computes 6T FLOPs, and the pass moves
its bytes. On an H100 (989 TFLOP/s dense BF16, 40% of it reached; 3.35 TB/s, 80% of it for
memory-bound kernels) at T = 4,096 that is 62 ps of compute against 9.7 ps for cast_add's 26 B
(+16%) and 2.2 ps for autograd's 6 B (+4%); both halve as T doubles, which is why micro-batch size
matters more to these engines than to Megatron.
"""

from __future__ import annotations

import numpy as np

from costmodel.context import ChunkContext
from costmodel.memory import zero_divisors

CAST_ADD_BYTES = 26.0
"""HBM bytes per accumulated gradient and micro-batch under DeepSpeed's BF16_Optimizer: the BF16
gradient zeroed (write 2) and added into by autograd (read 2 + 2, write 2), then cast (read 2,
write 4) and added into FP32 (read 4 + 4, write 4)."""

AUTOGRAD_BYTES = 6.0
"""AccumulateGrad's ``grad += new`` on a 16-bit (BF16 / FP16) parameter's gradient: two reads and
one write of 2 B."""


def bytes_per_gradient(ctx: ChunkContext, grad_bytes) -> np.ndarray:
    """HBM bytes per accumulated gradient and micro-batch, averaged over the step's m micro-batches
    (``grad_bytes``: the accumulator's, 4 for FP32 and 2 for 16-bit, what FSDP accumulates in)."""
    batch = ctx.batch
    m = np.maximum(ctx.m, 1.0)
    per_add = np.where(batch.zero >= 2, 2.0 + 2.0 * grad_bytes, AUTOGRAD_BYTES)
    autograd = per_add * (m - 1.0) / m
    return np.where(batch.is_("grad_accum_pass", "cast_add"), CAST_ADD_BYTES,
                    np.where(batch.is_("grad_accum_pass", "autograd"), autograd, 0.0))


def accumulated_share(ctx: ChunkContext, dense_shard, expert_shard, pipelined_fsdp):
    """(dense, expert) share of the held gradients this GPU accumulates: 1/shard where ZeRO >= 2
    shards gradients (Rajbhandari et al. 2020, Sec. 5.2), all of them otherwise and under a
    pipeline with FSDP2, which keeps a stage's gradients unsharded for the step."""
    zero = np.where(pipelined_fsdp, 1, ctx.batch.zero)
    _, (g_dense, g_expert), _ = zero_divisors(zero, dense_shard, expert_shard)
    return 1.0 / g_dense, 1.0 / g_expert


def seconds_per_parameter(ctx: ChunkContext, grad_bytes) -> np.ndarray:
    """Seconds one held parameter's gradient costs per micro-batch (before sharding)."""
    bandwidth = ctx.gpu.memory_bandwidth_gbps * 1e9 * ctx.calib.memory_bound_efficiency
    return bytes_per_gradient(ctx, grad_bytes) / bandwidth
