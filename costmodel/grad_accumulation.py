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
* main_grad_copy: Megatron-FSDP's optim_grads / optim_grads_params (ZeRO-2/3) without gradient
  accumulation fusion, as planner's Megatron export writes them. Autograd leaves each micro-batch's
  BF16 gradient in ``param.grad`` (the hook deletes it after use, so nothing is added there); the
  post-accumulate-grad hook copies it into the parameter's slot of the unsharded main-grad bucket
  (Megatron-Core distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py ``_grad_acc``:
  ``param.main_grad.copy_(param.grad)``, on the backward's stream): read 2 B, write the bucket's
  dtype (main_grads_dtype / grad_comm_dtype: the grad_dtype priced), 2 + its bytes, on every
  gradient the GPU computes (unsharded), every micro-batch: these strategies reduce-scatter after
  every backward, not only the last (``_process_post_backward_gradients``: grad_reduce_every_bprop).
  The reduced shard is then added into the sharded main grad (param_and_grad_buffer.py
  ``_bucket_group_gradient_reduce``: ``local_grad += reduced_grad``) on the reduce-scatter side
  stream beside the collective, as FSDP2's copy-in (costmodel.data_parallel.fsdp2_copy_out): not
  priced here. With the fusion on, TransformerEngine's wgrad GEMM writes the bucket itself
  (``overwrite_main_grad``): no copy, ``fused``. Megatron's PyTorch FSDP2 path (--use-torch-fsdp2)
  is autograd's sharded add: no no_sync (training.py sets config.no_sync_func only for DDP and
  Megatron-FSDP) and no MixedPrecisionPolicy (torch_fully_sharded_data_parallel.py), so FSDP2
  reduce-scatters every micro-batch and adds the shards in the parameters' dtype.

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

COPY_READ_BYTES = 2.0
"""main_grad_copy reads the micro-batch's BF16 ``param.grad`` (and writes the bucket's dtype)."""

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
    # Megatron-FSDP megatron_fsdp.py _grad_acc: param.main_grad.copy_(param.grad), every micro-batch.
    copy = COPY_READ_BYTES + grad_bytes
    return np.where(batch.is_("grad_accum_pass", "cast_add"), CAST_ADD_BYTES,
                    np.where(batch.is_("grad_accum_pass", "autograd"), autograd,
                             np.where(batch.is_("grad_accum_pass", "main_grad_copy"), copy, 0.0)))


def accumulated_share(ctx: ChunkContext, dense_shard, expert_shard, pipelined_fsdp):
    """(dense, expert) share of the held gradients this GPU accumulates: 1/shard where ZeRO >= 2
    shards gradients (Rajbhandari et al. 2020, Sec. 5.2), all of them otherwise, under a
    pipeline with FSDP2, which keeps a stage's gradients unsharded for the step, and for
    main_grad_copy, which copies the whole gradient before its reduce-scatter."""
    whole = pipelined_fsdp | ctx.batch.is_("grad_accum_pass", "main_grad_copy")
    zero = np.where(whole, 1, ctx.batch.zero)
    _, (g_dense, g_expert), _ = zero_divisors(zero, dense_shard, expert_shard)
    return 1.0 / g_dense, 1.0 / g_expert


def seconds_per_parameter(ctx: ChunkContext, grad_bytes) -> np.ndarray:
    """Seconds one held parameter's gradient costs per micro-batch (before sharding)."""
    bandwidth = ctx.gpu.memory_bandwidth_gbps * 1e9 * ctx.calib.memory_bound_efficiency
    return bytes_per_gradient(ctx, grad_bytes) / bandwidth
