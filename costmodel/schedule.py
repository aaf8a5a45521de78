"""The pipeline schedule: per-stage time of one micro-batch, the slowest stage, the bubble and
the exposed P2P sends (1F1B and interleaved 1F1B, Narayanan et al. 2021, Sec. 2.2).

A stage's time per micro-batch adds its layers' compute, recompute and the TP / CP / EP
communication that sits between their GEMMs (each priced by its mechanism module); the LM head
and loss run on the last stage. In steady state the slowest stage sets the pace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel import collectives, context_parallel, expert_parallel, mtp, recompute, tensor_parallel
from costmodel.compute import LayerTimes
from costmodel.context import ChunkContext
from costmodel.pipeline import StageSplit, argmax3, select3, stage_layer_mix
from costmodel.placement import group_span, pipeline_crosses_network


@dataclass(frozen=True, slots=True)
class LayerCosts:
    """What one layer of each kind costs per micro-batch, by mechanism."""

    dense: LayerTimes
    """A dense layer's compute (forward slowed by any TP-overlap SM margin)."""
    moe: LayerTimes
    """An MoE layer's compute (the dense one again for dense models)."""
    head_forward: np.ndarray
    """LM head GEMM + loss, forward, on the last stage (with the model's multi-token-prediction
    modules, ``costmodel.mtp``)."""
    head_backward: np.ndarray
    """The same, backward."""
    embedding_backward: np.ndarray
    """What the first stage adds to a micro-batch's backward beyond its layers (the embedding's
    gradient accumulation pass, ``costmodel.grad_accumulation``; 0 where none runs)."""
    tp: tensor_parallel.TensorParallelComm
    """Exposed TP collectives per layer and pass."""
    cp: context_parallel.ContextParallelComm
    """Exposed ring-attention steps per layer."""
    ep: expert_parallel.ExpertParallelComm
    """EP all-to-alls per MoE layer."""
    full: recompute.FullRecompute
    """Share of each stage's layers that full recompute covers."""
    selective: recompute.SelectiveCost
    """What selective recompute adds per layer."""


@dataclass(frozen=True, slots=True)
class StageTime:
    """Seconds of one micro-batch (forward + backward) on one stage, by term."""

    compute: np.ndarray
    """Layers' forward + backward (and the LM head on the last stage; the SMs paired EP
    all-to-alls hold)."""
    recompute: np.ndarray
    """Forwards run again by full or selective recompute."""
    tp: np.ndarray
    """Exposed TP collectives (those of recomputed modules included)."""
    cp: np.ndarray
    """Exposed ring-attention steps."""
    ep: np.ndarray
    """Exposed EP all-to-alls."""

    def total(self):
        """The stage's time per micro-batch."""
        return sum((self.compute, self.recompute, self.tp, self.cp, self.ep))


def stage_time(ctx: ChunkContext, costs: LayerCosts, n_layers, first_stage: bool, last_stage) -> StageTime:
    """One micro-batch on a stage of ``n_layers`` layers; ``last_stage`` True, False or a mask
    (the first stage is also the last where pp = 1)."""
    nd, nm = stage_layer_mix(ctx.model, ctx.counts, n_layers, first_stage)
    dense, moe, sel = costs.dense, costs.moe, costs.selective
    share = costs.full.share(n_layers)
    compute = nd * (dense.forward + dense.backward) + nm * (moe.forward + moe.backward)
    recompute_t = recompute.stage_time(ctx, share, nd, nm, dense, moe, sel)
    passes = 2.0 + share  # forward, backward (+ the recomputed forward of the covered layers)
    tp = tensor_parallel.stage_time(costs.tp, passes, nd, nm) + nd * sel.tp_dense + nm * sel.tp_moe
    cp = context_parallel.stage_time(costs.cp, passes, nd, nm)
    ep, ep_sm_cost = expert_parallel.stage_time(costs.ep, passes + sel.moe_again, nm, ctx.calib.comm_sm_fraction)
    if first_stage:
        compute = compute + costs.embedding_backward
    if last_stage is True:
        compute = compute + costs.head_forward + costs.head_backward
    elif last_stage is not False:
        compute = compute + np.where(last_stage, costs.head_forward + costs.head_backward, 0.0)
    if ep_sm_cost is not None:
        compute = compute + ep_sm_cost
    mtp_dense, mtp_moe = mtp.layers(ctx.model)
    if (mtp_dense or mtp_moe) and last_stage is not False:
        # The MTP modules' layer (on the last stage) communicates as the others, forward + backward.
        on = np.asarray(last_stage, dtype=bool) if last_stage is not True else True
        tp = tp + np.where(on, tensor_parallel.stage_time(costs.tp, 2.0, mtp_dense, mtp_moe), 0.0)
        extra_ep, extra_sm = expert_parallel.stage_time(costs.ep, 2.0, mtp_moe, ctx.calib.comm_sm_fraction)
        ep = ep + np.where(on, extra_ep, 0.0)
        if extra_sm is not None:
            compute = compute + np.where(on, extra_sm, 0.0)
    return StageTime(compute, recompute_t, tp, cp, ep)


def bubble(split: StageSplit, totals, t_max, pp, vpp):
    """Pipeline fill and drain: interleaved 1F1B costs (p-1)/v stage times (Narayanan et al.
    2021, Sec. 2.2.2); with unequal stages, one micro-batch's path through all stages less the
    slowest one (which the m micro-batches already count), divided by v."""
    first, middle, last = totals
    t_sum = np.where(split.single, first, first + np.maximum(pp - 2.0, 0.0) * middle + last)
    return (t_sum - t_max) / vpp


@dataclass(frozen=True, slots=True)
class PipelineTime:
    """Per-step pipeline time by term: m micro-batches on the slowest stage, plus the bubble."""

    slowest: np.ndarray
    """Index of the slowest stage kind (0 first, 1 middle, 2 last)."""
    stage_compute: np.ndarray
    """Compute of one micro-batch on the slowest stage (the data-parallel overlap window)."""
    compute: np.ndarray
    """m x the slowest stage's compute."""
    recompute: np.ndarray
    """m x its recompute."""
    tp: np.ndarray
    """m x its exposed TP communication."""
    cp: np.ndarray
    """m x its exposed CP communication."""
    ep: np.ndarray
    """m x its exposed EP communication."""
    bubble: np.ndarray
    """Pipeline fill and drain."""


def pipeline_time(ctx: ChunkContext, split: StageSplit, costs: LayerCosts) -> PipelineTime:
    """m x the slowest stage's micro-batch time, term by term, and the bubble."""
    stages = (
        stage_time(ctx, costs, split.first, True, split.single),
        stage_time(ctx, costs, split.middle, False, False),
        stage_time(ctx, costs, split.last, False, True),
    )
    totals = [s.total() for s in stages]
    present = split.present(*totals)
    slowest = argmax3(*present)
    t_max = np.maximum(np.maximum(present[0], present[1]), present[2])
    pick = lambda term: select3(slowest, *(getattr(s, term) for s in stages))
    stage_compute = pick("compute")
    m = ctx.m
    return PipelineTime(
        slowest=slowest,
        stage_compute=stage_compute,
        compute=m * stage_compute,
        recompute=m * pick("recompute"),
        tp=m * pick("tp"),
        cp=m * pick("cp"),
        ep=m * pick("ep"),
        bubble=bubble(split, totals, t_max, ctx.pp, ctx.vpp),
    )


def p2p_count(pp, vpp, m, overlap=True):
    """Blocking P2P sends/receives per step on the first stage. Non-interleaved 1F1B waits on
    each of its 2 per micro-batch step, 2(m + p - 1). The interleaved schedule overlaps the
    steady state (Megatron overlap_p2p_comm, on by default) but not warm-up and flush
    (--overlap-p2p-communication-warmup-flush is off by default): 2 x the min(m·v, 2(p-1) +
    (v-1)·p) warm-up chunk steps (Megatron-Core schedules.py, get_num_warmup_microbatches).
    Without that overlap (``overlap`` False: Megatron-LM before May 2023) every chunk step blocks,
    as 1F1B's micro-batch steps do, over v times as many steps (Narayanan et al. 2021 Sec. 2.2.2:
    the interleaved schedule's communication grows by v): 2(m·v + p - 1)."""
    warmup_steps = np.minimum(2.0 * (pp - 1.0) + (vpp - 1.0) * pp, m * vpp)
    interleaved = np.where(overlap, 2.0 * warmup_steps, 2.0 * (m * vpp + pp - 1.0))
    return np.where(vpp > 1, interleaved, 2.0 * (m + pp - 1.0))


def p2p_exposed(ctx: ChunkContext, split: StageSplit):
    """Exposed pipeline P2P seconds per step: blocking sends of one micro-batch's activations
    (the SP shard, as Megatron sends it) to the next stage; over the network as soon as the
    pipeline leaves one scale-up domain. With ``p2p_scatter_gather`` (and tp > 1, no SP) each
    TP rank sends only its 1/t slice and the receiver all-gathers the t slices over its TP group
    before it can start (Megatron-LM p2p_communication.py: split_tensor_into_1d_equal_chunks,
    then gather_split_1d_tensor; DeepSpeed pipe/engine.py: PartitionedTensor, then .full()),
    so each blocking step pays the 1/t send and the all-gather."""
    batch = ctx.batch
    crosses = pipeline_crosses_network(batch.tp, batch.cp, batch.dp, batch.pp, ctx.domain)
    scatter = batch.p2p_scatter_gather & (ctx.tp > 1) & ~ctx.sp
    p2p_bytes = ctx.act_bytes / np.where(ctx.sp | scatter, ctx.tp, 1.0)
    one = collectives.p2p_time(p2p_bytes, crosses, ctx.fabric)
    if scatter.any():
        tp_local, tp_nodes = group_span(batch.tp, 1, ctx.domain)
        gather, _ = collectives.collective_time("all_gather", ctx.act_bytes, tp_local, tp_nodes, ctx.fabric)
        one = one + np.where(scatter, gather, 0.0)
    return np.where(split.single, 0.0, p2p_count(ctx.pp, ctx.vpp, ctx.m, batch.p2p_comm_overlap) * one)
