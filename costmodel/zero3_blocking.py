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
* Gradients are reduce-scattered one parameter tensor at a time, biases and norm scales
  included: once a ``reduce_bucket_size`` bucket fills, the optimizer's ``average_tensor`` hands
  its parameters to ``_reduce_scatter_gradients``, which issues one reduce-scatter per parameter
  (``_reduce_scatter_gradient``; the coalesced reduce-scatter came in late 2021).
* Both collectives used PyTorch's list form and built that list in Python, so each costs two
  host operations per rank: DeepSpeed slices one view per rank (``flat_tensor.narrow`` in
  ``_allgather_param``, ``param.grad.view(-1).narrow`` in ``_reduce_scatter_gradient``), and
  ProcessGroupNCCL copies each of the N outputs back from NCCL's flat buffer after the all-gather,
  or each of the N inputs into it before the reduce-scatter (ProcessGroupNCCL.cpp ``allgather`` /
  ``reduce_scatter``, PyTorch 1.8-1.9). The copies also move the whole buffer through HBM once
  more (read and write), serialised with the collective.
"""

from __future__ import annotations

import numpy as np

from costmodel import collectives

MAX_LIVE_ELEMENTS = 1e9
"""stage3_max_live_parameters and stage3_max_reuse_distance default."""
GATHERED_TENSORS_PER_LAYER = 4
"""Linear weights of a Megatron-style layer (fused QKV, attention output, MLP in, MLP out): the
tensors above stage3_param_persistence_threshold (1e5 elements) once the hidden size passes
~320 (320^2 > 1e5); biases and norm scales stay below it."""
HOST_OPS_PER_RANK = {"all_gather": 2.0, "reduce_scatter": 3.0}
"""Host operations per rank in one list-form collective, counting the tensor operations DeepSpeed
issues from Python and the copy kernels ProcessGroupNCCL launches: the all-gather slices the
output (``narrow``) and copies it back; the reduce-scatter flattens the gradient, slices it
(``view(-1).narrow``) and copies it in."""


def parameter_tensors_per_layer(model) -> float:
    """Parameter tensors of one Megatron-style layer, each reduce-scattered on its own: the
    4 linear weights, their biases (GPT-2/3 style) or a QKV bias alone, and the 2 norms' scales
    (and shifts for LayerNorm). GPT-3: 4 + 4 + 4 = 12."""
    biases = 4.0 if model.linear_bias else (1.0 if model.qkv_bias else 0.0)
    norms = 2.0 * (2.0 if model.norm == "layernorm" else 1.0)
    return GATHERED_TENSORS_PER_LAYER + biases + norms


def backward_regather_fraction(layer_elements):
    """Share of a layer's gathered weights fetched again for backward after a recomputed forward:
    DeepSpeed keeps at most MAX_LIVE_ELEMENTS of them live in between."""
    layer_elements = np.maximum(np.asarray(layer_elements, dtype=np.float64), 1.0)
    return np.maximum(0.0, 1.0 - MAX_LIVE_ELEMENTS / layer_elements)


def blocking_zero3_time(
    params, layers, microbatches, full_recompute, param_bytes, grad_bytes,
    group_local, group_nodes, fabric, op_overhead_s, copy_bytes_per_s, tensors_per_layer=GATHERED_TENSORS_PER_LAYER,
):
    """Exposed seconds per step of blocking ZeRO-3 on the most loaded stage (all arrays broadcast).

    params: parameters of the stage (sharded over the group); layers: its layers; microbatches:
    micro-batches per step; full_recompute: bool; param_bytes / grad_bytes: bytes per element
    gathered / reduced; group_local, group_nodes: the data-parallel group's span (ranks per
    scale-up domain, domains); op_overhead_s: host cost of one launched operation;
    copy_bytes_per_s: achievable HBM bandwidth of a device-to-device copy (read + write counted);
    tensors_per_layer: parameter tensors a layer reduce-scatters (``parameter_tensors_per_layer``).

    Per micro-batch: forward gathers + recompute gathers + backward gathers of every layer's
    weights, one reduce-scatter per parameter tensor (the weights carry the bytes, the small
    tensors only their latency), each collective plus its per-rank operations, nothing
    overlapped.
    """
    params = np.asarray(params, dtype=np.float64)
    layers = np.maximum(np.asarray(layers, dtype=np.float64), 1.0)
    ranks = np.asarray(group_local, dtype=np.float64) * np.asarray(group_nodes, dtype=np.float64)
    gathers = layers * GATHERED_TENSORS_PER_LAYER
    small_tensors = layers * np.maximum(np.asarray(tensors_per_layer, dtype=np.float64) - GATHERED_TENSORS_PER_LAYER, 0.0)
    gather_bytes = param_bytes * params / gathers
    reduce_bytes = grad_bytes * params / gathers
    one_gather, _ = collectives.collective_time("all_gather", gather_bytes, group_local, group_nodes, fabric)
    one_reduce, _ = collectives.collective_time("reduce_scatter", reduce_bytes, group_local, group_nodes, fabric)
    small_reduce, _ = collectives.collective_time("reduce_scatter", 0.0 * reduce_bytes, group_local, group_nodes, fabric)
    # Per-rank host operations, and the buffer read and written once by the copies.
    gather_ops = HOST_OPS_PER_RANK["all_gather"] * ranks * op_overhead_s
    reduce_ops = HOST_OPS_PER_RANK["reduce_scatter"] * ranks * op_overhead_s
    one_gather = one_gather + gather_ops + 2.0 * gather_bytes / copy_bytes_per_s
    one_reduce = one_reduce + reduce_ops + 2.0 * reduce_bytes / copy_bytes_per_s
    small_reduce = small_reduce + reduce_ops
    backward = np.where(full_recompute, backward_regather_fraction(params / layers), 1.0)
    passes = 1.0 + np.where(full_recompute, 1.0, 0.0) + backward
    t = microbatches * (passes * gathers * one_gather + gathers * one_reduce + small_tensors * small_reduce)
    return np.where(ranks > 1, t, 0.0)
