"""Step time and peak memory per GPU for a batch of layouts, in one vectorized pass.

    step   = pipeline time + exposed P2P + exposed DP / ZeRO comm + contention + optimizer
    pipeline time = m x (per-micro-batch time of the slowest stage) + bubble
    stage time    = compute + recompute + exposed TP + CP + EP communication of its layers
    memory = the fullest stage's weights + gradients + optimizer + activations + logits + workspace

Each mechanism is priced by its own module (one concern per file): ``compute`` (layer kernels),
``tensor_parallel``, ``context_parallel``, ``expert_parallel``, ``recompute``, ``schedule``
(stages, bubble, P2P), ``stage_params``, ``data_parallel`` (ZeRO 0-3), ``optimizer``, ``memory``
and ``utilization`` (MFU/HFU); ``context`` holds what they all read. This module only adds the
terms up, chunk by chunk.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from costmodel import (collectives, context_parallel, data_parallel, expert_parallel, grad_accumulation, memory, mtp,
                       offload, quantize, recompute, ssm_layer, tensor_parallel)
from costmodel.calibration import DEFAULT, Calibration
from costmodel.compute import lm_head_times
from costmodel.moe import dense_and_moe_layer_times
from costmodel.context import chunk_context
from costmodel.layout import Layout, LayoutBatch
from costmodel.memory import peak_memory
from costmodel.optimizer import optimizer_time
from costmodel.params import count_params
from costmodel.pipeline import StageSplit
from costmodel.result import TIME_TERMS, BatchResult
from costmodel.schedule import LayerCosts, p2p_exposed, pipeline_time
from costmodel.stage_params import heaviest_stage, layer_params, params_per_stage
from costmodel.utilization import recomputed_flops_per_token, tokens_per_step, utilization
from hardware_catalog.schema import ClusterSpec, GPUSpec, ModelSpec

CHUNK = 16_384
"""Layouts priced per pass: the model is a few hundred elementwise numpy operations, which run
several times faster on arrays that stay in the CPU caches than on million-element ones."""


def evaluate_batch(
    model: ModelSpec,
    cluster: ClusterSpec,
    batch: LayoutBatch,
    gpu: GPUSpec | None = None,
    calib: Calibration = DEFAULT,
) -> BatchResult:
    """Predict step time, throughput, MFU and per-GPU memory for every layout in ``batch``.

    Layouts are assumed to satisfy the hard rules (``search.rules``); this function never
    raises on a bad layout, it prices it as given.
    """
    from hardware_catalog import get_gpu, get_interconnect

    gpu = gpu or get_gpu(cluster.gpu)
    fabric = collectives.fabric_from_cluster(cluster, gpu, get_interconnect(cluster.nic))
    counts = count_params(model)
    n = len(batch)
    if n <= 2 * CHUNK:
        return _evaluate_chunk(model, cluster, batch, gpu, calib, fabric, counts)
    # Each chunk is copied into preallocated arrays while its results are still in cache.
    out = None
    for i in range(0, n, CHUNK):
        part = _evaluate_chunk(model, cluster, batch.take(slice(i, min(i + CHUNK, n))), gpu, calib, fabric, counts)
        if out is None:
            out = _empty_like_result(part, batch, n)
        _fill_result(out, part, slice(i, i + len(part)))
    return out


_ARRAY_FIELDS = ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "fits")
_DICT_FIELDS = ("time_terms", "overlapped_terms", "memory_gib", "notes")


def _empty_like_result(part: BatchResult, batch: LayoutBatch, n: int) -> BatchResult:
    """A BatchResult of ``n`` uninitialised rows with the fields and dtypes of ``part``."""
    arrays = {name: np.empty(n, dtype=getattr(part, name).dtype) for name in _ARRAY_FIELDS}
    dicts = {name: {k: np.empty(n, dtype=v.dtype) for k, v in getattr(part, name).items()} for name in _DICT_FIELDS}
    return BatchResult(batch=batch, memory_capacity_gib=part.memory_capacity_gib, **arrays, **dicts)


def _fill_result(out: BatchResult, part: BatchResult, rows: slice) -> None:
    for name in _ARRAY_FIELDS:
        getattr(out, name)[rows] = getattr(part, name)
    for name in _DICT_FIELDS:
        target = getattr(out, name)
        for k, v in getattr(part, name).items():
            target[k][rows] = v


def layer_costs(ctx, split: StageSplit) -> tuple[LayerCosts, recompute.SelectiveRecompute]:
    """Per-layer, per-micro-batch cost of every mechanism on the critical path."""
    kernel_len = context_parallel.attention_kernel_length(ctx.batch, ctx.domain)
    dense, moe = dense_and_moe_layer_times(ctx.model, ctx.counts, ctx.gpu_clocked, ctx.batch, ctx.calib, kernel_len)
    if ctx.model.hybrid_layers:  # Mamba / attention / MLP pattern: the average pattern layer
        dense = moe = ssm_layer.hybrid_layer_times(ctx.model, ctx.gpu_clocked, ctx.batch, ctx.calib, dense)
    dense, moe = quantize.with_recipe(ctx, dense, moe)  # FP8 scaling recipes beyond delayed scaling
    if np.any(ctx.batch.cpu_offload_layers > 0):  # activation copies to host memory and back
        dense, moe = offload.with_offload(ctx, dense, moe, *memory.layer_bytes_per_token(ctx))
    head_fwd, head_bwd, _ = lm_head_times(ctx.model, ctx.gpu_clocked, ctx.batch, ctx.calib)
    dense, moe, embedding_bwd, head_accum = _with_grad_accumulation(ctx, dense, moe)
    head_bwd = head_bwd + head_accum
    tp = tensor_parallel.layer_comm(ctx, dense, moe)
    dense, moe = tp.dense_layer, tp.moe_layer  # forward + the SMs overlapped collectives hold
    selective = recompute.SelectiveRecompute(ctx)
    ep = expert_parallel.layer_comm(ctx, moe)
    # Multi-token-prediction modules run on the last stage beside the LM head.
    mtp_fwd, mtp_bwd = mtp.last_stage_time(ctx, dense, moe, head_fwd, head_bwd)
    costs = LayerCosts(
        dense=dense,
        moe=moe,
        head_forward=head_fwd + mtp_fwd,
        head_backward=head_bwd + mtp_bwd,
        embedding_backward=embedding_bwd,
        tp=tp,
        cp=context_parallel.layer_comm(ctx, dense, moe),
        ep=ep,
        full=recompute.FullRecompute(ctx, split.middle),
        selective=recompute.selective_cost(selective, dense, moe, tp.dense, tp.moe, ctx.shared_experts),
    )
    return costs, selective


def _with_grad_accumulation(ctx, dense, moe):
    """Layers' backward with the per-micro-batch gradient accumulation pass (``grad_accumulation``),
    and that pass's seconds for the embedding (first stage) and the LM head (last stage)."""
    sh = data_parallel.sharding(ctx)
    per_param = grad_accumulation.seconds_per_parameter(ctx, sh.grad_bytes)
    if not np.any(per_param > 0.0):
        return dense, moe, 0.0, 0.0
    share_dense, share_expert = grad_accumulation.accumulated_share(ctx, sh.dense_shard, sh.expert_shard,
                                                                    sh.pipelined_fsdp)
    p = layer_params(ctx)
    counts = ctx.counts
    same = moe is dense  # dense models (and hybrid patterns) price one layer kind: keep it one
    dense = replace(dense, backward=dense.backward + per_param * share_dense * p.dense_layer)
    moe = dense if same else replace(
        moe, backward=moe.backward + per_param * (share_dense * p.moe_dense + share_expert * p.moe_expert))
    # As stage_params counts them: a tied head is its own copy on the last stage only when pp > 1.
    tied_copy = counts.embedding_matrix if counts.lm_head == 0 else counts.lm_head
    head = np.where(ctx.pp == 1, counts.lm_head, tied_copy) / ctx.tp + counts.final_norm
    return dense, moe, per_param * share_dense * counts.embedding / ctx.tp, per_param * share_dense * head


def _evaluate_chunk(model, cluster, batch, gpu, calib, fabric, counts) -> BatchResult:
    """``evaluate_batch`` on one chunk of layouts (``fabric`` and parameter ``counts`` computed
    once per call by the caller)."""
    ctx = chunk_context(model, cluster, batch, gpu, calib, fabric, counts)
    split = StageSplit(model, batch, ctx.pp)
    costs, selective = layer_costs(ctx, split)

    # Pipeline: m micro-batches on the slowest stage + the bubble, and the P2P sends.
    pipe = pipeline_time(ctx, split, costs)
    pp_p2p = p2p_exposed(ctx, split)

    # Data parallel and the optimizer, on the stage holding the most parameters.
    per_layer = layer_params(ctx)
    params = params_per_stage(ctx, split, per_layer)
    heavy = heaviest_stage(ctx, split, params)
    sharding = data_parallel.sharding(ctx)
    dp = data_parallel.data_parallel_comm(ctx, sharding, heavy, pipe.stage_compute)

    terms = {
        "compute": pipe.compute,
        "recompute": pipe.recompute,
        "bubble": pipe.bubble,
        "tp_comm": pipe.tp,
        "cp_comm": pipe.cp,
        "ep_comm": pipe.ep,
        "pp_p2p": pp_p2p,
        **dp.terms,
        "comm_contention": dp.contention,
        "optimizer": optimizer_time(ctx, sharding, heavy),
    }
    step = sum(terms[t] for t in TIME_TERMS)
    tokens_step = tokens_per_step(ctx)
    recomputed = recomputed_flops_per_token(ctx, costs.full.share(split.middle), selective, costs.dense, costs.moe)
    mfu, hfu = utilization(ctx, step, tokens_step, recomputed)
    memory, fullest = peak_memory(ctx, split, costs.full, selective, sharding, per_layer, params)

    tokens_per_s = tokens_step / step
    notes = {
        "stage_layers_first": split.first,
        "stage_layers_middle": split.middle,
        "stage_layers_last": split.last,
        "slowest_stage": pipe.slowest,
        "fullest_stage": fullest,
        "dp_algorithm": dp.algorithm,
        "micro_batches": ctx.m,
    }
    return BatchResult(
        batch=batch,
        step_time_s=step,
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=tokens_per_s / ctx.gpus,
        mfu=mfu,
        hfu=hfu,
        time_terms=terms,
        overlapped_terms={"dp_comm": dp.hidden},
        memory_gib=memory,
        memory_capacity_gib=gpu.memory_gib,
        fits=memory["peak"] <= gpu.memory_gib,
        notes=notes,
    )


def evaluate(
    model: ModelSpec,
    cluster: ClusterSpec,
    layout: Layout,
    gpu: GPUSpec | None = None,
    calib: Calibration = DEFAULT,
) -> BatchResult:
    """``evaluate_batch`` for a single layout (a BatchResult of length 1)."""
    return evaluate_batch(model, cluster, LayoutBatch.from_layouts([layout]), gpu=gpu, calib=calib)
