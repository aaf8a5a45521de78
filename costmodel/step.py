"""Step time and peak memory per GPU for a batch of layouts, in one vectorized pass.

Step time = pipeline time (per-micro-batch stage time x micro-batches + the bubble)
          + exposed pipeline P2P + exposed data-parallel / ZeRO-3 communication + optimizer.
The per-micro-batch stage time holds the layers' compute, recompute, and the exposed TP, CP
and EP communication, which sit on the critical path between GEMMs.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from costmodel import collectives
from costmodel.calibration import DEFAULT, Calibration
from costmodel.compute import dense_and_moe_layer_times, lm_head_times, power_limited
from costmodel.flops import attention_core_flops_per_token, model_flops_per_token
from costmodel.layout import Layout, LayoutBatch, recompute_module_bit
from costmodel.memory import (
    GIB,
    activation_bytes_per_token,
    attention_scores_bytes_per_token,
    full_recompute_bytes_per_token,
    recompute_module_savings_per_token,
    inflight_microbatches,
    model_state_bytes,
    zero_divisors,
)
from costmodel.params import count_params
from costmodel.pipeline import partial_recompute_per_chunk, stage_layer_split
from costmodel.placement import group_span, pipeline_crosses_network
from costmodel.result import MEMORY_TERMS, TIME_TERMS, BatchResult
from costmodel.zero3_blocking import blocking_zero3_time, parameter_tensors_per_layer
from hardware_catalog.schema import ClusterSpec, GPUSpec, ModelSpec

BF16 = 2.0
GRAD_REDUCE_BYTES = 4.0  # Megatron accumulates and reduces main grads in FP32 under BF16 (arguments.py)
PARAM_GATHER_BYTES = 2.0  # updated BF16 weights all-gathered after the sharded optimizer step
# Adam step traffic per owned parameter: read grad, master, m, v (4 x 4 B), write master, m, v
# (3 x 4 B) and the BF16 weight (2 B), plus reading the grad once more for the norm/clip.
OPTIMIZER_STEP_BYTES = 34.0
# Extra time of a GEMM that runs beside a pipelined reduce-scatter holding n of the GPU's SMs:
# n / (SMs - n), for the attention output projection (24 of 132 H100 SMs) and the MLP down
# projection (16 of 132) in NeMo's userbuffers configs.
TP_OVERLAP_SM_MARGIN = (24.0 / (132.0 - 24.0), 16.0 / (132.0 - 16.0))


def _stage_layer_mix(model: ModelSpec, counts, n_layers, first_stage: bool):
    """(dense layers, MoE layers) on a stage of ``n_layers``; leading dense layers sit on the
    first stage (DeepSeek's first_k_dense_replace), the rest keep the model's MoE fraction."""
    n = n_layers.astype(np.float64)
    if model.moe is None:
        return n, np.zeros_like(n)
    lead = model.moe.num_dense_layers
    rest_layers = model.num_layers - lead
    moe_fraction = counts.num_moe_layers / rest_layers if rest_layers else 0.0
    lead_here = np.minimum(n, lead) if first_stage else np.zeros_like(n)
    moe = (n - lead_here) * moe_fraction
    return n - moe, moe


def _argmax3(a, b, c):
    """Index of the largest of three arrays (the first on ties, like np.argmax), elementwise;
    cheaper than np.argmax over a stacked (3, n) array."""
    return np.where((a >= b) & (a >= c), 0, np.where(b >= c, 1, 2))


def _select3(index, a, b, c):
    """Elementwise a, b or c by ``index`` in {0, 1, 2} (np.choose without its overhead)."""
    return np.where(index == 0, a, np.where(index == 1, b, c))


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


def _evaluate_chunk(model, cluster, batch, gpu, calib, fabric, counts) -> BatchResult:
    """``evaluate_batch`` on one chunk of layouts (``fabric`` and parameter ``counts`` computed
    once per call by the caller)."""
    domain = cluster.scaleup_domain_size
    n = len(batch)

    tp = batch.tp.astype(np.float64)
    cp = batch.cp.astype(np.float64)
    dp = batch.dp.astype(np.float64)
    pp = batch.pp.astype(np.float64)
    ep = batch.ep.astype(np.float64)
    etp = batch.etp.astype(np.float64)
    vpp = batch.vpp.astype(np.float64)
    m = np.maximum(batch.gbs // np.maximum(batch.dp * batch.mbs, 1), 1).astype(np.float64)
    gpus = tp * cp * dp * pp
    tokens_mb = batch.mbs * batch.seq_len / cp  # tokens per micro-batch on one GPU
    sp = batch.sequence_parallel
    full = batch.recompute == 2
    selective = batch.recompute == 1
    fp8 = batch.precision == 1
    h = float(model.hidden_size)

    # ---------------- per-layer compute
    # Kernel times use the clocks the cluster's power cap allows; MFU keeps the nominal peak.
    gpu_clocked = power_limited(gpu, cluster.power_limit_watts, calib.sustained_clock_fraction)
    dense_t, moe_t = dense_and_moe_layer_times(model, counts, gpu_clocked, batch, calib)
    head_fwd, head_bwd, head_flops = lm_head_times(model, gpu_clocked, batch, calib)

    # ---------------- per-layer communication (one micro-batch, forward pass)
    act_bytes = tokens_mb * h * BF16  # one micro-batch's activations [s/cp, b, h] in BF16
    tp_local, tp_nodes = group_span(batch.tp, 1, domain)
    if np.any(tp > 1):
        ag, _ = collectives.collective_time("all_gather", act_bytes, tp_local, tp_nodes, fabric)
        rs, _ = collectives.collective_time("reduce_scatter", act_bytes, tp_local, tp_nodes, fabric)
        ar, _ = collectives.collective_time("all_reduce", act_bytes, tp_local, tp_nodes, fabric)
        # Megatron TP: one collective pair per block (attention, MLP) per pass (Shoeybi et al.
        # 2019 Fig. 4): with SP all-gather + reduce-scatter (Korthikanti Sec. 4.2.2), else all-reduce.
        tp_pair = np.where(sp, ag + rs, ar)
    else:
        tp_pair = np.zeros(n)
    tp_dense = 2.0 * tp_pair
    has_shared = model.moe is not None and model.moe.num_shared_experts > 0
    tp_moe = (2.0 if has_shared else 1.0) * tp_pair if model.moe is not None else tp_dense
    # --tp-comm-overlap (TransformerEngine userbuffers, Megatron-Core "Communication overlap"
    # docs): each all-gather is split into tp chunks pipelined with the GEMM it feeds, each
    # reduce-scatter with the GEMM producing it; backward pairs them with dgrad/wgrad GEMMs of
    # the same size. What stays exposed is the part longer than its GEMM, and at least the
    # one chunk (1/tp) that has nothing to overlap with.
    # The reduce-scatters use TE's "pipeline" method, whose communication kernels hold SMs
    # that the GEMM beside them then lacks (set_sm_margin): NeMo's tuned H100 configs reserve
    # 24 of 132 SMs beside the attention output projection and 16 beside the MLP down
    # projection (NeMo recipes/tp_overlap_configs/userbuffers.py); the all-gathers use
    # copy-engine ring exchange and cost no SMs.
    overlap_on = batch.tp_comm_overlap & sp & (tp > 1)
    if overlap_on.any():
        one = np.where(sp, ag, ar)  # one collective (AG ~ RS in time)

        def overlapped(layer, moe_layer):
            g = layer.tp_neighbour_gemms
            pairs = g[:2] if (moe_layer and not has_shared) else g
            return sum(np.maximum(one - gi, one / tp) for gi in pairs)

        def sm_margin_cost(layer):
            _, out_proj, _, mlp_down = layer.tp_neighbour_gemms
            return np.where(overlap_on, out_proj * TP_OVERLAP_SM_MARGIN[0] + mlp_down * TP_OVERLAP_SM_MARGIN[1], 0.0)

        tp_dense = np.where(overlap_on, overlapped(dense_t, False), tp_dense)
        dense_t = replace(dense_t, forward=dense_t.forward + sm_margin_cost(dense_t))
        if model.moe is not None:
            tp_moe = np.where(overlap_on, overlapped(moe_t, True), tp_moe)
            moe_t = replace(moe_t, forward=moe_t.forward + sm_margin_cost(moe_t))

    # Context parallel: Megatron's ring attention (Liu et al. 2023; Megatron-Core CP docs) passes
    # K/V chunks around cp ranks in cp-1 steps, each overlapped with one chunk of attention.
    cp_local, cp_nodes = group_span(batch.cp, batch.tp, domain)
    kv_heads_per_rank = np.maximum(model.kv_heads / tp, 1.0)
    if model.mla is not None:
        kv_width = model.num_attention_heads * (
            model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim + model.mla.v_head_dim
        ) / tp
    else:
        kv_width = 2.0 * kv_heads_per_rank * model.head_size
    kv_bytes = tokens_mb * kv_width * BF16
    if np.any(cp > 1):
        kv_step = collectives.p2p_time(kv_bytes, cp_nodes > 1, fabric)
        kv_step_bwd = collectives.p2p_time(2.0 * kv_bytes, cp_nodes > 1, fabric)  # K,V and dK,dV
    else:
        kv_step = kv_step_bwd = np.zeros(n)
    steps = cp - 1.0

    def cp_exposed(layer):
        chunk = layer.attention_forward / cp
        fwd = steps * np.maximum(kv_step - chunk, 0.0)
        bwd = steps * np.maximum(kv_step_bwd - 2.5 * chunk, 0.0)
        return fwd, bwd

    cp_dense_f, cp_dense_b = cp_exposed(dense_t)
    cp_moe_f, cp_moe_b = cp_exposed(moe_t)

    # Expert parallel: all-to-all dispatch + combine per MoE layer per pass (GShard, Lepikhin
    # et al. 2020; Megatron-Core alltoall dispatcher), over the ep group (stride etp, folded).
    if model.moe is not None and np.any(ep > 1):
        ep_local, ep_nodes = group_span(batch.ep, batch.etp, domain)
        routed_bytes = tokens_mb / np.where(sp, tp, 1.0) * model.moe.top_k * h * BF16
        if batch.moe_dispatcher.any():
            # DeepEP (DeepSeek-V3 report Sec. 3.2.2; Megatron --moe-token-dispatcher-type flex):
            # a token crosses the network once per destination node and is forwarded over
            # NVLink there, so the network carries distinct nodes / k of the copies. With k
            # experts drawn over n nodes that is n(1 - (1 - 1/n)^k) nodes, at most the
            # router_group_topk groups of node-limited routing.
            moe = model.moe
            nodes = ep_nodes.astype(np.float64)
            distinct = nodes * (1.0 - (1.0 - 1.0 / nodes) ** moe.top_k)
            if moe.router_groups and moe.router_group_topk:
                distinct = np.minimum(distinct, float(moe.router_group_topk))
            dedup = np.where(ep_nodes > 1, np.minimum(distinct / moe.top_k, 1.0), 1.0)
            routed_bytes = routed_bytes * np.where(batch.moe_dispatcher == 1, dedup, 1.0)
        a2a, _ = collectives.collective_time("all_to_all", routed_bytes, ep_local, ep_nodes, fabric)
        ep_pass = 2.0 * a2a
    else:
        ep_pass = np.zeros(n)

    # ---------------- per-stage, per-micro-batch time
    n_first, n_middle, n_last, _ = stage_layer_split(
        model.num_layers, batch.pp, batch.pp_first_layers, batch.pp_last_layers
    )

    per_chunk, _ = partial_recompute_per_chunk(
        model.num_layers, batch.pp, batch.vpp, batch.pp_first_layers, batch.pp_last_layers, batch.recompute_layers,
        middle=n_middle,
    )
    partial = batch.recompute_layers != 0
    recomputed_per_stage = (per_chunk * batch.vpp).astype(np.float64)

    share_cache: dict[int, np.ndarray] = {}

    def recompute_share(n_layers):
        """Share of a stage's layers that full recompute covers: all, or with Megatron's block
        method the first ``per_chunk`` layers of each of its vpp chunks."""
        key = id(n_layers)
        if key not in share_cache:
            if not partial.any():
                share_cache[key] = full.astype(np.float64)
            else:
                n = np.maximum(n_layers.astype(np.float64), 1.0)
                share = np.where(partial, np.minimum(recomputed_per_stage / n, 1.0), 1.0)
                share_cache[key] = np.where(full, share, 0.0)
        return share_cache[key]

    # Selective recompute of Megatron-Core submodules (--recompute-modules; core_attn alone by
    # default): the recomputed forwards, and the communication they repeat: the TP all-gather /
    # reduce-scatter pair of a recomputed dense MLP or shared expert, the dispatch and combine
    # all-to-alls of a recomputed MoE layer.
    modules = np.where(selective, batch.recompute_modules, 0)
    has_module = lambda name: recompute_module_bit(modules, name).astype(np.float64)

    def selective_time(layer):
        t = has_module("core_attn") * layer.attention_forward
        for name, seconds in layer.module_forward.items():
            t = t + has_module(name) * seconds
        return t

    selective_dense = selective_time(dense_t)
    selective_moe = selective_time(moe_t)
    selective_tp_dense = has_module("mlp") * tp_dense / 2.0
    shared_tp = (tp_moe / 2.0) if has_shared else 0.0
    selective_tp_moe = np.maximum(has_module("moe"), has_module("shared_experts")) * shared_tp
    selective_moe_again = has_module("moe")

    ep_overlap_on = None
    if model.moe is not None and batch.ep_comm_overlap.any():
        ep_overlap_on = batch.ep_comm_overlap & ((vpp > 1) | (pp == 1))
        # Batch-level overlapping (Megatron-Core MoE README, v0.14) follows DeepSeek-V3's
        # pairing of a forward and a backward chunk (DeepSeek-V3 report Sec. 3.2.1, Fig. 4):
        # per MoE layer, each all-to-all runs beside one computation of the other micro-batch:
        # backward combine || forward attention, forward dispatch || backward MLP, backward
        # dispatch || forward MLP, forward combine || backward attention. A collective longer
        # than its partner stays exposed by the difference. Attention here is everything but
        # the MoE block; backward splits like forward.
        one_a2a = ep_pass / 2.0
        mlp_f = moe_t.module_forward["moe"]
        attn_f = np.maximum(moe_t.forward - mlp_f, 0.0)
        mlp_b = moe_t.backward * mlp_f / np.maximum(moe_t.forward, 1e-30)
        attn_b = np.maximum(moe_t.backward - mlp_b, 0.0)
        paired_exposed = sum(np.maximum(one_a2a - partner, 0.0) for partner in (attn_f, mlp_b, mlp_f, attn_b))

    def stage_terms(n_layers, first_stage, last_stage):
        nd, nm = _stage_layer_mix(model, counts, n_layers, first_stage)
        share = recompute_share(n_layers)
        compute = nd * (dense_t.forward + dense_t.backward) + nm * (moe_t.forward + moe_t.backward)
        recompute = np.where(
            full,
            share * (nd * dense_t.forward + nm * moe_t.forward),
            np.where(selective, nd * selective_dense + nm * selective_moe, 0.0),
        )
        passes = 2.0 + share  # forward, backward (+ the recomputed forward of the covered layers)
        tp_c = passes * (nd * tp_dense + nm * tp_moe) + nd * selective_tp_dense + nm * selective_tp_moe
        cp_c = (nd * cp_dense_f + nm * cp_moe_f) * (passes - 1.0) + nd * cp_dense_b + nm * cp_moe_b
        ep_c = (passes + selective_moe_again) * nm * ep_pass
        if last_stage is True:
            compute = compute + head_fwd + head_bwd
        elif last_stage is not False:
            compute = compute + np.where(last_stage, head_fwd + head_bwd, 0.0)
        if ep_overlap_on is not None:
            # Forward and backward all-to-alls pair with the other micro-batch's computation
            # (above); a recomputed forward's all-to-alls have no partner.
            exposed = nm * paired_exposed + np.maximum(ep_c - 2.0 * nm * ep_pass, 0.0)
            ep_hidden = np.where(ep_overlap_on, ep_c - exposed, 0.0)
            ep_c = np.where(ep_overlap_on, exposed, ep_c)
            compute = compute + calib.comm_sm_fraction * ep_hidden
        return compute, recompute, tp_c, cp_c, ep_c

    single = pp == 1
    # pp == 1: the first stage is also the last (embedding and head included).
    first_terms = stage_terms(n_first, True, single)
    middle_terms = stage_terms(n_middle, False, False)
    last_terms = stage_terms(n_last, False, True)
    totals = [sum(t) for t in (first_terms, middle_terms, last_terms)]
    has_middle = pp > 2
    masked = (totals[0], np.where(has_middle, totals[1], 0.0), np.where(single, 0.0, totals[2]))
    slowest = _argmax3(*masked)
    t_max = np.maximum(np.maximum(masked[0], masked[1]), masked[2])
    # Sum over all stages of one micro-batch's time = the fill + drain path.
    t_sum = np.where(
        single, totals[0], totals[0] + np.maximum(pp - 2.0, 0.0) * totals[1] + totals[2]
    )
    # Interleaved 1F1B: the fill/drain costs (p-1)/v stage-times (Narayanan et al. 2021,
    # Sec. 2.2.2); with unequal stages, m x slowest + the others once, divided by v.
    bubble = (t_sum - t_max) / vpp
    pick = lambda idx: _select3(slowest, first_terms[idx], middle_terms[idx], last_terms[idx])
    compute_t, recompute_t, tp_t, cp_t, ep_t = (m * pick(i) for i in range(5))

    # ---------------- pipeline P2P
    crosses = pipeline_crosses_network(batch.tp, batch.cp, batch.dp, batch.pp, domain)
    p2p_bytes = act_bytes / np.where(sp, tp, 1.0)  # Megatron sends the SP shard
    p2p_one = collectives.p2p_time(p2p_bytes, crosses, fabric)
    # Non-interleaved 1F1B waits on every send/recv (2 per micro-batch step); the interleaved
    # schedule overlaps the steady-state P2P (Megatron overlap_p2p_comm, on by default) but not
    # the warm-up and flush (--overlap-p2p-communication-warmup-flush is off by default), which
    # run (pp - 1)·2 + (vpp - 1)·pp chunk steps each on the first stage (Megatron-Core
    # schedules.py, get_num_warmup_microbatches for the interleaved schedule).
    warmup_steps = np.minimum(2.0 * (pp - 1.0) + (vpp - 1.0) * pp, m * vpp)
    p2p_count = np.where(vpp > 1, 2.0 * warmup_steps, 2.0 * (m + pp - 1.0))
    pp_p2p = np.where(single, 0.0, p2p_count * p2p_one)

    # ---------------- parameters per GPU on each stage
    dense_per_layer_dense = counts.dense_layer / tp
    moe_dense_part = (counts.attention_per_layer + counts.shared_expert_per_layer + counts.norms_per_layer) / tp
    moe_expert_part = counts.expert_per_layer / (ep * etp)
    tied_copy = counts.embedding_matrix if counts.lm_head == 0 else counts.lm_head

    def stage_params(n_layers, first_stage, last_stage):
        nd, nm = _stage_layer_mix(model, counts, n_layers, first_stage)
        dense = nd * dense_per_layer_dense + nm * moe_dense_part
        expert = nm * moe_expert_part if model.moe is not None else 0.0
        if first_stage:
            dense = dense + counts.embedding / tp
        # Megatron keeps a copy of a tied embedding on the last stage for the LM head.
        head = np.where(single, counts.lm_head, tied_copy) / tp + counts.final_norm
        if last_stage is True:
            dense = dense + head
        elif last_stage is not False:
            dense = dense + np.where(last_stage, head, 0.0)
        return dense, expert

    first_params = stage_params(n_first, True, single)
    middle_params = stage_params(n_middle, False, False)
    last_params = stage_params(n_last, False, True)

    dense_shard = dp * cp
    expert_shard = np.maximum(tp * cp * dp / (ep * etp), 1.0)

    # ---------------- data-parallel communication (slowest stage = the one holding most params)
    stage_dense = (first_params[0], np.where(has_middle, middle_params[0], 0.0), np.where(single, 0.0, last_params[0]))
    if model.moe is not None:
        stage_expert = (first_params[1], np.where(has_middle, middle_params[1], 0.0), np.where(single, 0.0, last_params[1]))
        heavy = _argmax3(*(d + e for d, e in zip(stage_dense, stage_expert)))
        p_expert = _select3(heavy, *stage_expert)
    else:
        heavy = _argmax3(*stage_dense)
        p_expert = 0.0
    p_dense = _select3(heavy, *stage_dense)
    dp_local, dp_nodes = group_span(batch.dp * batch.cp, batch.tp, domain)
    edp_local, edp_nodes = group_span(
        np.maximum(expert_shard.astype(np.int64), 1), batch.ep * batch.etp, domain
    )

    # Data-parallel traffic goes out in pieces, each paying the collective's latency: ZeRO-3 /
    # FSDP gathers and reduces one layer (FSDP unit) at a time; DDP and the distributed
    # optimizer use buckets of max(40M, 1M x dp) parameters (Megatron-Core DDP default
    # bucket_size; PyTorch DDP's 25 MB buckets are of the same order).
    heavy_layers = _select3(heavy, n_first, n_middle, n_last).astype(np.float64)
    bucket_params = np.maximum(4e7, 1e6 * dense_shard)
    pieces = np.where(
        batch.zero == 3,
        np.maximum(heavy_layers, 1.0),
        np.maximum(np.ceil((p_dense + p_expert) / bucket_params), 1.0),
    )

    def dp_collective(op, bytes_dense, bytes_expert):
        t_dense, algo = collectives.collective_time(op, bytes_dense / pieces, dp_local, dp_nodes, fabric)
        t_exp = 0.0
        if model.moe is not None:
            t_exp, _ = collectives.collective_time(op, bytes_expert / pieces, edp_local, edp_nodes, fabric)
        return pieces * (t_dense + t_exp), algo

    # BF16 gradient buffers (Megatron-Core grad_reduce_in_fp32=False) are kept and reduced in BF16.
    grad_bytes = np.where(batch.grad_dtype == 1, BF16, GRAD_REDUCE_BYTES)
    grad_ar, dp_algo = dp_collective("all_reduce", grad_bytes * p_dense, grad_bytes * p_expert)
    grad_rs, _ = dp_collective("reduce_scatter", grad_bytes * p_dense, grad_bytes * p_expert)
    param_ag, _ = dp_collective("all_gather", PARAM_GATHER_BYTES * p_dense, PARAM_GATHER_BYTES * p_expert)
    stage_of = lambda terms: _select3(slowest, *terms)
    window_bwd = calib.dp_overlap * stage_of([first_terms[0], middle_terms[0], last_terms[0]]) * (2.0 / 3.0)
    window_fwd = calib.dp_overlap * stage_of([first_terms[0], middle_terms[0], last_terms[0]]) * (1.0 / 3.0)
    zero = batch.zero
    # ZeRO-0: all-reduce overlapped with the last micro-batch's backward (PyTorch DDP buckets,
    # Li et al. 2020; Megatron --overlap-grad-reduce). ZeRO-1/2: reduce-scatter there, and the
    # all-gather of updated weights overlapped with the next step's first forward
    # (--overlap-param-gather).
    # ZeRO-2 keeps only a shard of the gradients, so it must reduce-scatter after every
    # micro-batch's backward (DeepSpeed stage 2 IPG buckets; FSDP SHARD_GRAD_OP without
    # no_sync), not once per step.
    # Under a pipeline, ZeRO-2/3 run as FSDP2 in torch.distributed.pipelining (torchtitan; DeepSpeed
    # and Megatron have no ZeRO-2/3 with PP): its stage turns off gradient sync and resharding
    # after backward until the last micro-batch (stage.py backward_maybe_with_nosync), so
    # gradients accumulate unsharded and are reduce-scattered once a step.
    pipelined_fsdp = (pp > 1) & (zero >= 2)
    rs_count = np.where((zero == 2) & ~pipelined_fsdp, m, 1.0)
    dp_exposed = np.where(
        zero == 0,
        np.maximum(grad_ar - window_bwd, 0.0),
        rs_count * np.maximum(grad_rs - window_bwd, 0.0) + np.maximum(param_ag - window_fwd, 0.0),
    )
    # ZeRO-3 / FSDP: every micro-batch gathers weights for forward and again for backward and
    # reduce-scatters gradients (Rajbhandari et al. 2020 Sec. 5.3; FSDP2 default), hidden
    # behind that micro-batch's compute where possible.
    z3 = (
        np.maximum(param_ag - window_fwd, 0.0) + np.maximum(param_ag + grad_rs - window_bwd, 0.0)
    ) * m
    # ZeRO-3 under a pipeline (the export's reshard_after_forward=always): weights gathered for
    # the step's first forward, freed after each forward and gathered again for its backward
    # (which keeps them), gradients reduce-scattered once a step.
    z3_pipelined = pipelined_fsdp & (zero == 3)
    z3 = np.where(
        z3_pipelined,
        np.maximum(param_ag - window_fwd, 0.0) + m * np.maximum(param_ag - window_bwd, 0.0)
        + np.maximum(grad_rs - window_bwd, 0.0),
        z3,
    )
    # Early DeepSpeed ZeRO-3 (2021): per-tensor gathers behind torch.cuda.synchronize(), nothing
    # hidden (costmodel.zero3_blocking). Its MoE-less design: expert weights counted with the rest.
    blocking = (zero == 3) & (batch.zero3_gather == 1)
    if blocking.any():
        z3_blocking = blocking_zero3_time(
            p_dense + p_expert, heavy_layers, m, full,
            PARAM_GATHER_BYTES, grad_bytes, dp_local, dp_nodes, fabric, calib.kernel_overhead_us * 1e-6,
            gpu.memory_bandwidth_gbps * 1e9 * calib.memory_bound_efficiency, parameter_tensors_per_layer(model),
        )
        z3 = np.where(blocking, z3_blocking, z3)
    zero3_exposed = np.where(zero == 3, z3, 0.0)
    dp_exposed = np.where(zero == 3, 0.0, dp_exposed)
    single_replica = dense_shard == 1
    dp_exposed = np.where(single_replica & (expert_shard <= 1), 0.0, dp_exposed)
    zero3_exposed = np.where(single_replica & (expert_shard <= 1), 0.0, zero3_exposed)

    # ---------------- hidden communication is not free: NCCL runs one thread block per
    # channel on the SMs (NCCL_MIN/MAX_NCHANNELS; 16-32 channels for rings over several NICs),
    # so compute that overlaps a collective runs on fewer SMs for that long (the cost DeepSeek-V3
    # Sec. 3.2.1 limits by giving its all-to-all only 20 of 132 SMs).
    dp_hidden = np.where(zero == 0, grad_ar, rs_count * grad_rs + param_ag) - dp_exposed
    dp_hidden = np.where((zero == 3) | (single_replica & (expert_shard <= 1)), 0.0, dp_hidden)
    z3_traffic = np.where(z3_pipelined, (1.0 + m) * param_ag + grad_rs, (2.0 * param_ag + grad_rs) * m)
    z3_hidden = np.where(zero == 3, np.maximum(z3_traffic - zero3_exposed, 0.0), 0.0)
    z3_hidden = np.where(single_replica & (expert_shard <= 1), 0.0, z3_hidden)
    contention = calib.comm_sm_fraction * np.maximum(dp_hidden + z3_hidden, 0.0)

    # ---------------- optimizer step: HBM-bound Adam over the parameters this GPU owns
    owned = np.where(zero >= 1, p_dense / dense_shard + p_expert / expert_shard, p_dense + p_expert)
    optimizer_t = OPTIMIZER_STEP_BYTES * owned / (gpu.memory_bandwidth_gbps * 1e9 * calib.memory_bound_efficiency)

    # ---------------- totals
    terms = {
        "compute": compute_t,
        "recompute": recompute_t,
        "bubble": bubble,
        "tp_comm": tp_t,
        "cp_comm": cp_t,
        "ep_comm": ep_t,
        "pp_p2p": pp_p2p,
        "dp_comm": dp_exposed,
        "zero3_gather": zero3_exposed,
        "comm_contention": contention,
        "optimizer": optimizer_t,
    }
    step = sum(terms[t] for t in TIME_TERMS)
    tokens_step = (batch.gbs * batch.seq_len).astype(np.float64)
    flops_token = model_flops_per_token(model, batch.seq_len, counts)
    peak = gpu.bf16_tflops * 1e12
    mfu = flops_token * tokens_step / (step * gpus * peak)
    # HFU adds what recompute runs again: a forward of every layer (2 FLOPs/weight + attention
    # core) for full, the attention core forward for selective.
    core_fwd = model.num_layers * attention_core_flops_per_token(model, batch.seq_len)
    layer_fwd = 2.0 * (counts.matmul_active - (counts.lm_head or counts.embedding_matrix)) + core_fwd
    # Selective: the attention core if covered, plus the recomputed submodules' GEMMs (per
    # micro-batch on one GPU -> per token of the model: x tp / tokens).
    module_flops = sum(
        has_module(name) * (counts.num_dense_layers * dense_t.module_flops[name] + counts.num_moe_layers * moe_t.module_flops[name])
        for name in dense_t.module_flops
    ) * tp / tokens_mb
    extra = np.where(full, recompute_share(n_middle) * layer_fwd,
                     np.where(selective, has_module("core_attn") * core_fwd + module_flops, 0.0))
    hfu = (flops_token + extra) * tokens_step / (step * gpus * peak)

    # ---------------- memory on each stage; the peak is the most loaded stage
    # Stored attention scores (unfused attention only) unless selective recompute drops them.
    unfused = batch.attention == 1
    scores = (
        np.where(has_module("core_attn") == 1, 0.0, attention_scores_bytes_per_token(model, tp, batch.seq_len, unfused))
        if unfused.any()
        else 0.0
    )
    a_dense = activation_bytes_per_token(model, tp, sp, moe_layer=False, fp8=fp8) + scores
    a_moe = activation_bytes_per_token(model, tp, sp, moe_layer=True, fp8=fp8) + scores
    if np.any(modules > 1):
        a_dense = a_dense - recompute_module_savings_per_token(model, tp, sp, False, fp8, modules)
        a_moe = a_moe - recompute_module_savings_per_token(model, tp, sp, True, fp8, modules)
    a_full = full_recompute_bytes_per_token(model, tp, sp)

    # Bytes per logit alive at the loss: a fused cross entropy keeps the BF16 logits and writes
    # the gradient over them (2); Megatron's unfused loss an FP32 copy (4); eager
    # F.cross_entropy(logits.float()) holds at the start of backward the FP32 log-softmax it
    # saved, the dense FP32 NLL gradient and the FP32 log-softmax gradient (12).
    logit_bytes = np.where(batch.loss == 1, 2.0, np.where(batch.loss == 2, 12.0, 4.0))
    # Full recompute rebuilds one layer's activations at a time during backward.
    working_dense = np.where(full, tokens_mb * a_dense, 0.0)

    def stage_memory(n_layers, params, rank, first_stage, last_stage):
        nd, nm = _stage_layer_mix(model, counts, n_layers, first_stage)
        share = recompute_share(n_layers)
        if model.moe is None:
            kept = tokens_mb * nd * (share * a_full + (1.0 - share) * a_dense)
            working = working_dense
        else:
            kept = tokens_mb * (share * (nd + nm) * a_full + (1.0 - share) * (nd * a_dense + nm * a_moe))
            working = np.where(full, tokens_mb * np.maximum(a_dense, np.where(nm > 0, a_moe, 0.0)), 0.0)
        inflight = inflight_microbatches(rank, pp, vpp, m)
        activations = kept * inflight + working
        # Logits on the last stage, [s, b, V/t] at ``logit_bytes`` each: FP32 for Megatron's
        # unfused loss (Korthikanti Sec. 4.3, 4sbv/t).
        logits = np.where(last_stage, logit_bytes * tokens_mb * model.vocab_size / tp, 0.0)
        weights, grads, optim = model_state_bytes(
            params[0], params[1], zero, dense_shard, expert_shard, fp8, divisors=state_divisors,
            grad_bytes=grad_bytes,
        )
        # ZeRO-3 materialises the current and the prefetched layer in full (under a pipeline the
        # whole stage is gathered after a backward, counted by state_divisors).
        layer_params = np.where(nm > 0, moe_dense_part + moe_expert_part, dense_per_layer_dense)
        weights = weights + np.where((zero == 3) & ~pipelined_fsdp, 2.0 * BF16 * layer_params, 0.0)
        return {
            "weights": weights / GIB,
            "gradients": grads / GIB,
            "optimizer": optim / GIB,
            "activations": activations / GIB,
            "logits": logits / GIB,
        }

    # Under a pipeline FSDP2 keeps a stage's gradients (and, after a backward, its weights)
    # unsharded for the whole step: ZeRO-1's footprint (optimizer states stay sharded).
    state_divisors = zero_divisors(np.where(pipelined_fsdp, 1, zero), dense_shard, expert_shard)
    mem_first = stage_memory(n_first, first_params, 0.0, True, single)
    mem_middle = stage_memory(n_middle, middle_params, 1.0, False, False)
    mem_last = stage_memory(n_last, last_params, pp - 1.0, False, True)

    def with_workspace(mem):
        mem = dict(mem)
        # Fragmentation hits the many short-lived activation blocks; weights, gradient and
        # optimizer buffers are few large allocations (Megatron allocates them contiguously).
        mem["workspace"] = calib.workspace_gib + calib.fragmentation * (mem["activations"] + mem["logits"])
        mem["peak"] = sum(mem[k] for k in MEMORY_TERMS)
        return mem

    stage_mems = [with_workspace(mm) for mm in (mem_first, mem_middle, mem_last)]
    fullest = _argmax3(
        stage_mems[0]["peak"], np.where(has_middle, stage_mems[1]["peak"], 0.0), np.where(single, 0.0, stage_mems[2]["peak"])
    )
    memory = {k: _select3(fullest, *(sm[k] for sm in stage_mems)) for k in list(MEMORY_TERMS) + ["peak"]}

    tokens_per_s = tokens_step / step
    notes = {
        "stage_layers_first": n_first,
        "stage_layers_middle": n_middle,
        "stage_layers_last": n_last,
        "slowest_stage": slowest,
        "fullest_stage": fullest,
        "dp_algorithm": dp_algo,
        "micro_batches": m,
    }
    return BatchResult(
        batch=batch,
        step_time_s=step,
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=tokens_per_s / gpus,
        mfu=mfu,
        hfu=hfu,
        time_terms=terms,
        overlapped_terms={
            "dp_comm": dp_hidden + z3_hidden,
        },
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
