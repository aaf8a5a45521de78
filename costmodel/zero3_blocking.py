"""Early DeepSpeed ZeRO-3 (2021): blocking per-tensor gathers, priced from its defaults (vectorized).

DeepSpeed's first ZeRO-3 release (v0.3.13 to v0.5, 2021) fetched parameters one tensor at a time:
each all-gather came after a ``torch.cuda.synchronize()`` (runtime/zero/partition_parameters.py,
``_allgather_param``; maintainers in DeepSpeed issue #1173), so no gather or gradient
reduce-scatter overlapped compute. What it moved, and how often, follows from its documented
defaults (docs/_pages/config-json.md) and from the PyTorch collectives it called:

* Only tensors above ``stage3_param_persistence_threshold`` (1e5 elements) are partitioned; biases
  and norm scales stay whole on every GPU. A transformer layer's gathers are its linear weights.
* Parameters are released after each module's forward. With full activation checkpointing the
  recomputed forward gathers them again, and the backward that follows keeps those that fit in
  ``stage3_max_live_parameters`` / ``stage3_max_reuse_distance`` (1e9 elements each), so it
  gathers again the part of a layer above 1e9 elements.
* Gradients are reduce-scattered in buckets of ``reduce_bucket_size`` (5e8 elements).
* Both collectives used PyTorch's list form, which costs one launched operation per rank: the
  all-gather copies each of the N outputs back from NCCL's flat buffer, the reduce-scatter copies
  each of N inputs into it (ProcessGroupNCCL.cpp ``allgather`` / ``reduce_scatter``, PyTorch
  1.8-1.9), and DeepSpeed's ``reduce_scatter_coalesced`` first builds each rank's input with a
  ``torch.cat`` (runtime/comm/coalesced_collectives.py, 2021). Those copies also move the whole
  buffer through HBM once more (read and write), serialised with the collective.
"""

from __future__ import annotations

import numpy as np

from costmodel import collectives

MAX_LIVE_ELEMENTS = 1e9
"""stage3_max_live_parameters and stage3_max_reuse_distance default."""
REDUCE_BUCKET_ELEMENTS = 5e8
"""reduce_bucket_size default."""
GATHERED_TENSORS_PER_LAYER = 4
"""Linear weights of a Megatron-style layer (fused QKV, attention output, MLP in, MLP out): the
tensors above stage3_param_persistence_threshold (1e5 elements) once the hidden size passes
~320 (320^2 > 1e5); biases and norm scales stay below it."""
OPS_PER_RANK = {"all_gather": 1.0, "reduce_scatter": 2.0}
"""Launched operations per rank in one list-form collective (copies, plus torch.cat for RS)."""


def backward_regather_fraction(layer_elements):
    """Share of a layer's gathered weights fetched again for backward after a recomputed forward:
    DeepSpeed keeps at most MAX_LIVE_ELEMENTS of them live in between."""
    layer_elements = np.maximum(np.asarray(layer_elements, dtype=np.float64), 1.0)
    return np.maximum(0.0, 1.0 - MAX_LIVE_ELEMENTS / layer_elements)


def blocking_zero3_time(
    params, layers, microbatches, full_recompute, param_bytes, grad_bytes,
    group_local, group_nodes, fabric, op_overhead_s, copy_bytes_per_s,
):
    """Exposed seconds per step of blocking ZeRO-3 on the most loaded stage (all arrays broadcast).

    params: parameters of the stage (sharded over the group); layers: its layers; microbatches:
    micro-batches per step; full_recompute: bool; param_bytes / grad_bytes: bytes per element
    gathered / reduced; group_local, group_nodes: the data-parallel group's span (ranks per
    scale-up domain, domains); op_overhead_s: host cost of one launched operation;
    copy_bytes_per_s: achievable HBM bandwidth of a device-to-device copy (read + write counted).

    Per micro-batch: forward gathers + recompute gathers + backward gathers of every layer's
    weights, one reduce-scatter per gradient bucket, each collective plus its per-rank
    operations, nothing overlapped.
    """
    params = np.asarray(params, dtype=np.float64)
    layers = np.maximum(np.asarray(layers, dtype=np.float64), 1.0)
    ranks = np.asarray(group_local, dtype=np.float64) * np.asarray(group_nodes, dtype=np.float64)
    gathers = layers * GATHERED_TENSORS_PER_LAYER
    buckets = np.maximum(np.ceil(params / REDUCE_BUCKET_ELEMENTS), 1.0)
    one_gather, _ = collectives.collective_time("all_gather", param_bytes * params / gathers, group_local, group_nodes, fabric)
    one_reduce, _ = collectives.collective_time("reduce_scatter", grad_bytes * params / buckets, group_local, group_nodes, fabric)
    # Per-rank operations: host cost each, and the buffer read and written once per copy pass.
    gather_bytes = param_bytes * params / gathers
    reduce_bytes = grad_bytes * params / buckets
    one_gather = one_gather + OPS_PER_RANK["all_gather"] * (ranks * op_overhead_s + 2.0 * gather_bytes / copy_bytes_per_s)
    one_reduce = one_reduce + OPS_PER_RANK["reduce_scatter"] * (ranks * op_overhead_s + 2.0 * reduce_bytes / copy_bytes_per_s)
    backward = np.where(full_recompute, backward_regather_fraction(params / layers), 1.0)
    passes = 1.0 + np.where(full_recompute, 1.0, 0.0) + backward
    t = microbatches * (passes * gathers * one_gather + buckets * one_reduce)
    return np.where(ranks > 1, t, 0.0)
