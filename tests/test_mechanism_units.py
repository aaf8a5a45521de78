"""One unit test per cost-model mechanism module: a tiny setup (catalog models, a hand-made fabric
of round numbers) and a value derived by hand from the formula and its source, in the comments.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from costmodel import context_parallel, data_parallel, expert_parallel, mtp, quantize, recompute, schedule, tensor_parallel
from costmodel.calibration import DEFAULT
from costmodel.collectives import Fabric, LinkLevel
from costmodel.compute import LayerTimes
from costmodel.context import chunk_context
from costmodel.layout import LayoutBatch, recompute_modules_mask
from costmodel.options import FSDP_IMPLS
from costmodel.memory import (activation_bytes, fp8_weight_copy_bytes, inflight_microbatches, model_state_bytes,
                              pipeline_runtime_bytes, stage_activations)
from costmodel.optimizer import optimizer_time, owned_params
from costmodel.params import count_params
from costmodel.pipeline import StageSplit
from costmodel.stage_params import heaviest_stage, layer_params, params_per_stage
from costmodel.utilization import recomputed_flops_per_token, utilization
from hardware_catalog import get_cluster, get_gpu, get_model

H100 = get_cluster("dgx-h100")  # 8 GPUs per NVLink domain
LLAMA_8B = get_model("llama3-8b")  # h 4096, 32 layers, g 8 KV heads of d 128, V 128256, untied
MIXTRAL = get_model("mixtral-8x7b")  # h 4096, 8 experts, top-2, no shared experts
DEEPSEEK_V3 = get_model("deepseek-v3")  # top-8 of 256 experts, 8 router groups, top-4 groups

# Round numbers: NVLink 100 GB/s and 1 us per step, network 10 GB/s and 10 us, 8 GPUs a domain.
B_IN, ALPHA_IN = 100e9, 1e-6
B_NET, ALPHA_NET = 10e9, 10e-6
FABRIC = Fabric(
    intra=LinkLevel(bandwidth=B_IN, latency=ALPHA_IN, topology="switch"),
    inter=LinkLevel(bandwidth=B_NET, latency=ALPHA_NET, topology="switch"),
    domain_size=8,
)
RECOMPUTE_CODE = {"none": 0, "selective": 1, "full": 2}


def _ctx(model, recompute="none", **columns):
    """ChunkContext of one layout (LayoutBatch codes; recompute by name) on the round fabric."""
    columns.setdefault("seq_len", 4096)
    batch = LayoutBatch.from_arrays(recompute=RECOMPUTE_CODE[recompute], **columns)
    return chunk_context(model, H100, batch, get_gpu(H100.gpu), DEFAULT, FABRIC, count_params(model))


def _layer(forward=0.0, backward=0.0, attention=0.0, modules=None, gemms=(0.0, 0.0, 0.0, 0.0)):
    lt = LayerTimes(np.array([forward]), np.array([backward]), np.array([attention]), np.array([0.0]), gemms)
    lt.module_forward = {name: 0.0 for name in ("layernorm", "mla_up_proj", "mlp", "moe_act", "shared_experts", "moe")}
    lt.module_forward.update(modules or {})
    return lt


def test_context_micro_batches_and_tokens():
    # m = gbs / (dp · b) = 512 / (4 · 2) = 64; tokens per micro-batch per GPU b·s/c = 2·8192/2.
    ctx = _ctx(LLAMA_8B, tp=2, cp=2, dp=4, pp=2, mbs=2, gbs=512, seq_len=8192)
    assert ctx.m[0] == 64.0
    assert ctx.tokens_mb[0] == 8192.0
    assert ctx.gpus[0] == 2 * 2 * 4 * 2
    assert ctx.act_bytes[0] == 8192.0 * 4096 * 2  # [s/c, b, h] in BF16


def test_tensor_parallel_pair_is_two_ring_collectives():
    # tp 4 inside one NVLink domain, SP: all-gather + reduce-scatter of the micro-batch's
    # activations S = s·b·h·2 bytes, each a ring: (n-1)·alpha + (n-1)/n · S/B (Patarasuk & Yuan
    # 2009). Without SP one ring all-reduce, 2(n-1)·alpha + 2(n-1)/n · S/B: the same time
    # (Korthikanti et al. 2022, Sec. 4.2.2). Megatron runs one pair per block, two per layer.
    S = 4096 * 4096 * 2.0
    ring = 3 * ALPHA_IN + 0.75 * S / B_IN
    for sp in (True, False):
        ctx = _ctx(LLAMA_8B, tp=4, dp=2, sequence_parallel=sp)
        pair, _, _ = tensor_parallel.collective_pair(ctx)
        assert pair[0] == pytest.approx(2 * ring, rel=1e-12)
        dense = _layer()
        comm = tensor_parallel.layer_comm(ctx, dense, dense)
        assert comm.dense[0] == pytest.approx(4 * ring, rel=1e-12)


def test_tensor_parallel_overlap_exposure_and_sm_margin():
    # Userbuffers overlap: a collective beside a GEMM stays exposed by max(collective - GEMM,
    # collective / tp) (the first of tp chunks has no partner). Collective 1 ms, tp 4: beside a
    # 0.5 ms GEMM 0.5 ms, beside a 2 ms GEMM the 0.25 ms chunk.
    one, tp = np.array([1e-3]), np.array([4.0])
    exposed = tensor_parallel.overlapped_exposure(one, tp, (np.array([0.5e-3]), np.array([2e-3])))
    assert exposed[0] == pytest.approx(0.5e-3 + 0.25e-3)
    # SM margin (NeMo userbuffers configs): 24 of 132 SMs beside the output projection, 16
    # beside the MLP down projection, each costing n / (132 - n) of that GEMM's time.
    layer = _layer(gemms=(0.0, np.array([1e-3]), 0.0, np.array([2e-3])))
    cost = tensor_parallel.sm_margin_cost(np.array([True, False]), layer)
    assert cost[0] == pytest.approx(1e-3 * 24 / 108 + 2e-3 * 16 / 116)
    assert cost[1] == 0.0


def test_ring_exchange_reduce_scatters_hold_one_sm_and_pay_the_summing_kernel():
    # Megatron-Bridge's H100 FP8 userbuffers config runs proj_fprop / fc2_fprop as
    # RingExchangeOverlapCfg(num_sm=1, set_sm_margin=True): each GEMM loses 1 of 132 SMs, 1/131 of
    # its time, and TE's split_overlap_rs then sums the tp chunks with reduce_bf16 (read the whole
    # [s, b, h] BF16 activation, write 1/tp of it) on HBM at 3.35 TB/s x 0.90 (the memory-bound
    # efficiency, Calibration.memory_bound_efficiency). Llama 3 8B, s 4096,
    # b 1, tp 4: S = 4096 x 4096 x 2 B = 33.55 MB, 1.25 S / 3.015e12 B/s = 13.91 us per
    # reduce-scatter, two per dense layer. Output projection 1 ms, MLP down 2 ms:
    # ring 3 ms / 131 + 2 x 13.91 us = 50.73 us; pipelined (24 / 16 SMs) 1 ms x 24/108 + 2 ms x 16/116
    # = 498.1 us.
    S = 4096 * 4096 * 2.0
    reduce = 1.25 * S / (3350e9 * DEFAULT.memory_bound_efficiency)
    gemms = (np.array([0.0]), np.array([1e-3]), np.array([0.0]), np.array([2e-3]))
    forward = {}
    for ring in (False, True):
        ctx = _ctx(LLAMA_8B, tp=4, dp=2, sequence_parallel=True, tp_comm_overlap=True, tp_overlap_rs_ring=ring)
        assert tensor_parallel.ring_reduce_seconds(ctx)[0] == pytest.approx(reduce, rel=1e-12)
        comm = tensor_parallel.layer_comm(ctx, _layer(gemms=gemms), _layer(gemms=gemms))
        forward[ring] = comm.dense_layer.forward[0]
    assert forward[True] == pytest.approx(3e-3 / 131 + 2 * reduce, rel=1e-9)
    assert forward[False] == pytest.approx(1e-3 * 24 / 108 + 2e-3 * 16 / 116, rel=1e-9)
    # Without TP overlap the flag is moot: nothing is added either way.
    off = _ctx(LLAMA_8B, tp=4, dp=2, sequence_parallel=True, tp_comm_overlap=False, tp_overlap_rs_ring=True)
    assert tensor_parallel.layer_comm(off, _layer(gemms=gemms), _layer(gemms=gemms)).dense_layer.forward[0] == 0.0


def test_hybrid_sharding_shards_inside_the_group_and_all_reduces_across_replicas():
    # dp 32, tp 1, dp_shard 8: ZeRO-1 shards over the 8 ranks of one NVLink domain and keeps
    # 32 / 8 = 4 replicas, one per domain (stride 8). Each rank's gradient shard, 4 B x 8e9 / 8
    # params, is all-reduced across the 4 replicas in 200 pieces of 2e7 B: a ring over 4 domains,
    # 2(n-1) alpha + 2(n-1)/n S/B per piece = 6 x 10 us + 1.5 x 2e7 / 10 GB/s = 3.06 ms; 0.612 s.
    ctx = _ctx(LLAMA_8B, tp=1, dp=32, zero=1, dp_shard=8)
    sh = data_parallel.sharding(ctx)
    assert (sh.dense_shard[0], sh.replicas[0]) == (8.0, 4.0)
    heavy = SimpleNamespace(dense=np.array([8e9]), expert=np.array([0.0]))
    t = data_parallel.replica_all_reduce(ctx, sh, heavy, np.array([200.0]))
    assert t[0] == pytest.approx(200 * (6 * ALPHA_NET + 1.5 * 2e7 / B_NET), rel=1e-9)
    # dp_shard = dp is plain ZeRO: one replica, nothing to all-reduce.
    full = data_parallel.sharding(_ctx(LLAMA_8B, tp=1, dp=32, zero=1, dp_shard=32))
    assert (full.dense_shard[0], full.replicas[0]) == (32.0, 1.0)


def test_async_tp_hides_the_forward_passes_only():
    # tp 4, SP, each collective 1 ms beside 2 ms GEMMs: userbuffers leave the 1/tp chunk,
    # 0.25 ms, of each of the 4 collectives a layer runs per pass, in every pass. PyTorch async TP
    # (forward ~29% faster, end to end ~8%: the backward's collectives stay exposed) leaves the
    # full 4 ms in backward. Full recompute, 2 layers: userbuffers 2 x 3 x 1 ms = 6 ms; async TP
    # 2 x (2 x 1 ms + 4 ms) = 12 ms; no overlap 2 x 3 x 4 ms = 24 ms.
    S = 4096 * 4096 * 2.0
    ring = 3 * ALPHA_IN + 0.75 * S / B_IN  # one collective of the pair, in seconds
    gemms = tuple(np.array([2 * ring]) for _ in range(4))
    exposed = {}
    for overlap, kind in ((False, 0), (True, 0), (True, 1)):
        ctx = _ctx(LLAMA_8B, tp=4, dp=2, sequence_parallel=True, tp_comm_overlap=overlap, tp_overlap_kind=kind)
        layer = _layer(gemms=gemms)
        comm = tensor_parallel.layer_comm(ctx, layer, layer)
        exposed[(overlap, kind)] = tensor_parallel.stage_time(comm, 3.0, 2, 0)[0]
    assert exposed[(True, 0)] == pytest.approx(2 * 3 * 4 * ring / 4, rel=1e-9)
    assert exposed[(True, 1)] == pytest.approx(2 * (2 * ring + 4 * ring), rel=1e-9)
    assert exposed[(False, 0)] == pytest.approx(2 * 3 * 4 * ring, rel=1e-9)


def test_context_parallel_ring_exposure_and_kv_bytes():
    # Ring attention: c - 1 steps, each hidden behind one of c attention chunks (forward) or its
    # backward (2.5x, FlashAttention recomputes). c = 4, attention 2 s -> chunk 0.5 s; K/V step
    # 1 s forward, 2 s backward: exposed 3 x 0.5 = 1.5 s forward, 3 x (2 - 1.25) = 2.25 s backward.
    fwd, bwd = context_parallel.ring_exposed(3.0, 1.0, 2.0, 2.0, 4.0)
    assert (fwd, bwd) == (pytest.approx(1.5), pytest.approx(2.25))
    # K/V of one step: tokens b·s/c times K and V of g/t heads of d = 128, BF16. tp 2: 4 heads
    # -> 2·4·128 per token; tp 16 > g = 8: one (replicated) head per rank.
    for tp, heads in ((2, 4), (16, 1)):
        ctx = _ctx(LLAMA_8B, tp=tp, cp=4, dp=1, mbs=1, seq_len=32768)
        assert context_parallel.kv_bytes(ctx)[0] == pytest.approx(8192 * 2 * heads * 128 * 2)


def test_ring_attention_chunks_run_below_long_sequence_efficiency():
    # FlashAttention's efficiency e(L) = e_max L / (L + L0) at the keys L each kernel sees:
    # splitting an 8K sequence over cp = 2 runs 4K chunks, so the attention core takes
    # (1 + L0 / 4096) / (1 + L0 / 8192) = (1 + 2 L0 / s) / (1 + L0 / s) as long.
    from costmodel.compute import ATTENTION_L0
    from costmodel.moe import dense_and_moe_layer_times

    counts = count_params(LLAMA_8B)
    gpu = get_gpu(H100.gpu)
    times = {}
    for cp in (1, 2):
        batch = LayoutBatch.from_arrays(cp=cp, mbs=cp, seq_len=8192, recompute=0)  # same tokens per GPU
        dense, _ = dense_and_moe_layer_times(LLAMA_8B, counts, gpu, batch, DEFAULT)
        times[cp] = dense.attention_forward[0]
    s, L0 = 8192.0, ATTENTION_L0
    assert times[2] / times[1] == pytest.approx((1 + 2 * L0 / s) / (1 + L0 / s))
    # L0 from the lent-H100 measurements: e(4K) / e(32K) = 0.260 / 0.328.
    assert (4096 / (4096 + L0)) / (32768 / (32768 + L0)) == pytest.approx(0.260 / 0.328, rel=0.01)


def test_context_parallel_step_is_one_p2p_send():
    # tp 2 x cp 2 in one domain: a ring step is one NVLink send alpha + S/B of the K/V chunk.
    ctx = _ctx(LLAMA_8B, tp=2, cp=2, dp=2, mbs=1, seq_len=8192)
    kv = 4096 * 2 * 4 * 128 * 2.0
    layer = _layer(attention=1e-9)  # attention far shorter than the send: nearly all exposed
    comm = context_parallel.layer_comm(ctx, layer, layer)
    chunk = 1e-9 / 2
    assert comm.dense_forward[0] == pytest.approx(ALPHA_IN + kv / B_IN - chunk, rel=1e-12)


def test_expert_parallel_deepep_distinct_nodes():
    # k experts drawn uniformly over n nodes reach n(1 - (1 - 1/n)^k) distinct nodes; DeepEP
    # sends one network copy per node (DeepSeek-V3 Sec. 3.2.2). n = 4, k = 8: 4(1 - 0.75^8).
    assert expert_parallel.distinct_nodes(4.0, 8) == pytest.approx(4 * (1 - 0.75**8))
    # DeepSeek-V3 (k 8) over 1, 4 and 8 nodes: all copies inside one node; 4(1 - 0.75^8) / 8 of
    # them; over 8 nodes 8(1 - (7/8)^8) = 5.25 nodes, capped by node-limited routing at 4 groups.
    share = expert_parallel.deepep_traffic_share(np.array([1, 4, 8]), DEEPSEEK_V3.moe)
    np.testing.assert_allclose(share, [1.0, 4 * (1 - 0.75**8) / 8, 4 / 8])


def test_expert_parallel_all_to_all_inside_one_domain():
    # Mixtral, ep 8 in one NVLink domain: per pass a dispatch and a combine all-to-all of the
    # k = 2 routed copies of 4096 tokens x h 4096 in BF16, each a direct exchange:
    # (n-1)·alpha + (n-1)/n · S/B (Thakur et al. 2005, Sec. 3.6).
    ctx = _ctx(MIXTRAL, tp=1, dp=8, ep=8, mbs=1, seq_len=4096)
    S = 4096 * 2 * 4096 * 2.0
    assert expert_parallel.all_to_all_per_pass(ctx)[0] == pytest.approx(2 * (7 * ALPHA_IN + 7 / 8 * S / B_IN), rel=1e-12)


def test_expert_parallel_overlap_pairing():
    # DeepSeek-V3 Fig. 4: each all-to-all beside one computation of the other micro-batch.
    # Forward 4 s, of which the MoE block 1 s (attention 3 s); backward 8 s splits alike (MLP 2,
    # attention 6). All-to-all 2.5 s: exposed 0 + 0.5 + 1.5 + 0 = 2 s per layer.
    moe = _layer(forward=4.0, backward=8.0, modules={"moe": np.array([1.0])})
    paired = expert_parallel.paired_exposure(np.array([2.5]), moe)
    assert paired[0] == pytest.approx(2.0)
    # A forward that syncs the host before its dispatch (alltoall dispatcher) waits for the
    # partner's backward MLP queued before it: that dispatch stays exposed, 2.5 not 0.5.
    synced = expert_parallel.paired_exposure(np.array([2.5]), moe, np.array([True]))
    assert synced[0] == pytest.approx(0 + 2.5 + 1.5 + 0)
    # A stage of 2 MoE layers, 3 runs (forward, backward, a recomputed forward) of 5 s each:
    # 30 s; paired: 2 x 2 s for forward + backward, the recomputed forward's 10 s unpaired;
    # the 16 s hidden cost comm_sm_fraction of compute.
    comm = expert_parallel.ExpertParallelComm(np.array([5.0]), np.array([True]), paired)
    exposed, sm_cost = expert_parallel.stage_time(comm, 3.0, 2.0, 0.12)
    assert exposed[0] == pytest.approx(14.0)
    assert sm_cost[0] == pytest.approx(0.12 * 16.0)


def test_recompute_block_share_and_selective_modules():
    # Megatron's block method: per chunk round(q/4 · chunk) layers. pp 4 -> 8 layers a stage,
    # vpp 2 -> chunks of 4, 2 quarters -> 2 layers a chunk, 4 of the stage's 8: share 1/2.
    ctx = _ctx(LLAMA_8B, "full", tp=1, pp=4, vpp=2, dp=2, recompute_share=2)
    split = StageSplit(LLAMA_8B, ctx.batch, ctx.pp)
    assert recompute.FullRecompute(ctx, split.middle).share(split.middle)[0] == 0.5
    assert recompute.block_share(np.array([4.0]), np.array([8]), np.array([False]), np.array([True]))[0] == 1.0
    # Selective core_attn + mlp: their forwards run again, 1 s + 0.5 s; the recomputed MLP
    # repeats its TP pair, half of the layer's two.
    ctx = _ctx(LLAMA_8B, "selective", tp=2, dp=4, recompute_modules=recompute_modules_mask(["core_attn", "mlp"]))
    sel = recompute.SelectiveRecompute(ctx)
    layer = _layer(attention=1.0, modules={"mlp": np.array([0.5]), "layernorm": np.array([0.25])})
    cost = recompute.selective_cost(sel, layer, layer, np.array([0.2]), np.array([0.2]), False)
    assert cost.dense_forward[0] == pytest.approx(1.5)
    assert cost.tp_dense[0] == pytest.approx(0.1)


def test_schedule_bubble_and_p2p_count():
    # Interleaved 1F1B: fill and drain cost (p - 1)/v stage times (Narayanan et al. 2021,
    # Sec. 2.2.2): p 4, v 2, equal stages of 1 s -> 1.5 s.
    ctx = _ctx(LLAMA_8B, tp=1, pp=4, vpp=2, dp=2)
    split = StageSplit(LLAMA_8B, ctx.batch, ctx.pp)
    t = np.array([1.0])
    assert schedule.bubble(split, (t, t, t), t, ctx.pp, ctx.vpp)[0] == pytest.approx(1.5)
    # 1F1B waits on 2 sends per micro-batch step: 2(m + p - 1) = 2(8 + 3) = 22. Interleaved
    # (v 2) only in warm-up and flush: 2 x min(2(p-1) + (v-1)p, m·v) = 2 x min(10, 16) = 20.
    assert schedule.p2p_count(4.0, 1.0, 8.0) == 22.0
    assert schedule.p2p_count(4.0, 2.0, 8.0) == 20.0
    # Without the steady-state overlap (Megatron-LM before May 2023) every chunk step blocks:
    # 2(m·v + p - 1) = 2(16 + 3) = 38; 1F1B is blocking either way (22). Never fewer than with it.
    assert schedule.p2p_count(4.0, 2.0, 8.0, overlap=False) == 38.0
    assert schedule.p2p_count(4.0, 1.0, 8.0, overlap=False) == 22.0
    p, v, m = np.meshgrid([2.0, 4.0, 8.0, 16.0], [1.0, 2.0, 3.0, 6.0], [1.0, 4.0, 16.0, 64.0])
    assert np.all(schedule.p2p_count(p, v, m, overlap=False) >= schedule.p2p_count(p, v, m))


def test_schedule_p2p_inside_one_domain():
    # pp 4 x tp 2 = 8 GPUs, one domain: each of 2(m + p - 1) sends of the SP shard of the
    # activations (s·b·h·2 / t bytes) costs alpha + S/B on NVLink. m = 16 / (1 · 1) = 16.
    ctx = _ctx(LLAMA_8B, tp=2, pp=4, dp=1, mbs=1, gbs=16)
    split = StageSplit(LLAMA_8B, ctx.batch, ctx.pp)
    S = 4096 * 4096 * 2.0 / 2
    assert schedule.p2p_exposed(ctx, split)[0] == pytest.approx(2 * (16 + 3) * (ALPHA_IN + S / B_IN), rel=1e-12)


def test_schedule_p2p_scatter_gather_sends_a_tp_slice_and_gathers_it():
    # tp 8 x pp 2 = 16 GPUs: the pipeline crosses the network. Without SP Megatron-Core sends the
    # whole activation S = s·b·h·2 from every TP rank: 2(m + p - 1) = 2(16 + 1) = 34 sends of
    # alpha + S/B on the network. Scatter/gather (Megatron-LM scatter_gather_tensors_in_pipeline,
    # Narayanan et al. 2021 Sec. 4.1; DeepSpeed is_pipe_partitioned) sends S/8 per rank and the
    # receiver all-gathers S over its 8 NVLink peers, a ring: 7·alpha + 7/8 · S/B.
    S = 4096 * 4096 * 2.0
    whole = _ctx(LLAMA_8B, tp=8, pp=2, dp=1, mbs=1, gbs=16, sequence_parallel=False)
    split = StageSplit(LLAMA_8B, whole.batch, whole.pp)
    assert schedule.p2p_exposed(whole, split)[0] == pytest.approx(34 * (ALPHA_NET + S / B_NET), rel=1e-12)
    sliced = _ctx(LLAMA_8B, tp=8, pp=2, dp=1, mbs=1, gbs=16, sequence_parallel=False, p2p_scatter_gather=True)
    one = ALPHA_NET + S / 8 / B_NET + 7 * ALPHA_IN + 7 / 8 * S / B_IN
    assert schedule.p2p_exposed(sliced, split)[0] == pytest.approx(34 * one, rel=1e-12)
    # With SP the send is already the 1/t shard: scatter/gather changes nothing (Megatron skips it).
    sp = _ctx(LLAMA_8B, tp=8, pp=2, dp=1, mbs=1, gbs=16, sequence_parallel=True, p2p_scatter_gather=True)
    assert schedule.p2p_exposed(sp, split)[0] == pytest.approx(34 * (ALPHA_NET + S / 8 / B_NET), rel=1e-12)


def test_stage_params_heaviest_stage():
    # pp 2: 16 layers a stage; the first adds the input embedding V·h, the last the (untied) LM
    # head V·h and the final norm h: the last is heavier by h.
    ctx = _ctx(LLAMA_8B, tp=1, pp=2, dp=4)
    split = StageSplit(LLAMA_8B, ctx.batch, ctx.pp)
    counts = count_params(LLAMA_8B)
    params = params_per_stage(ctx, split, layer_params(ctx))
    heavy = heaviest_stage(ctx, split, params)
    V, h = 128256, 4096
    assert heavy.index[0] == 2
    assert heavy.dense[0] == 16 * counts.dense_layer + V * h + h
    assert params[0][0][0] == 16 * counts.dense_layer + V * h
    assert heavy.layers[0] == 16.0


def test_data_parallel_zero_exposure():
    # ZeRO-0: the all-reduce beyond the backward window; ZeRO-1: reduce-scatter beyond the
    # backward window (max(0, 3 - 2.5)) + all-gather beyond the forward one (max(0, 2 - 1)).
    sh = SimpleNamespace(zero=np.array([0, 1]))
    tr = SimpleNamespace(grad_all_reduce=np.array([4.0, 4.0]), grad_reduce_scatter=np.array([3.0, 3.0]),
                         param_all_gather=np.array([2.0, 2.0]), grad_replica_all_reduce=np.zeros(2))
    exposed = data_parallel.replicated_exposure(sh, tr, (1.0, 2.5), 1.0)
    np.testing.assert_allclose(exposed, [1.5, 1.5])
    # Hybrid sharding: the replicas' all-reduce (1 s) follows the last reduce-scatter in the same
    # backward window: ZeRO-1 max(0, 3 + 1 - 2.5) + 1 = 2.5.
    tr.grad_replica_all_reduce = np.array([1.0, 1.0])
    np.testing.assert_allclose(data_parallel.replicated_exposure(sh, tr, (1.0, 2.5), 1.0), [1.5, 2.5])
    # ZeRO-2 reduce-scatters after every micro-batch, with or without a pipeline (Llama 3's FSDP
    # under PP 16); pipelined FSDP2 (ZeRO-3) once a step, ZeRO-1 once a step.
    sh = SimpleNamespace(zero=np.array([1, 2, 3]), pipelined_fsdp=np.array([False, False, True]))
    np.testing.assert_array_equal(data_parallel.reduce_scatters_per_step(sh, 8.0), [1.0, 8.0, 1.0])


def test_zero2_under_a_pipeline_with_fsdp2_keeps_gradients_whole():
    # torch.distributed.pipelining turns FSDP2's gradient sync off until the last micro-batch
    # (stage.py backward_maybe_with_nosync), whatever reshard_after_forward is: torchtitan's ZeRO-2
    # under PP holds whole gradients (ZeRO-1's divisor 1) and reduce-scatters once a step. Other
    # ZeRO-2 under PP (Llama 3's FSDP) shards them over dp = 4 and reduce-scatters every micro-batch.
    fsdp2 = FSDP_IMPLS.index("fsdp2")
    for fsdp, pp, whole in ((fsdp2, 2, True), (FSDP_IMPLS.index("flat"), 2, False), (fsdp2, 1, False)):
        ctx = _ctx(LLAMA_8B, tp=2, pp=pp, dp=4, zero=2, fsdp=fsdp, gbs=64, mbs=1)
        sh = data_parallel.sharding(ctx)
        _, grad_divisor, optimizer_divisor = (d[0] for d in sh.state_divisors)
        assert bool(sh.pipelined_fsdp[0]) == whole
        assert grad_divisor[0] == (1.0 if whole else 4.0) and optimizer_divisor[0] == 4.0
        rs = data_parallel.reduce_scatters_per_step(sh, ctx.m)[0]
        assert rs == (1.0 if whole else float(ctx.m[0]))


def test_data_parallel_overlap_off_exposes_every_collective():
    # The backward window is 2/3 of a micro-batch's compute, the forward one 1/3, times the
    # achievable fraction; with --no-dp-comm-overlap (Megatron without --overlap-grad-reduce)
    # there is none, so ZeRO-1 exposes its whole reduce-scatter and all-gather.
    on = _ctx(LLAMA_8B, tp=1, dp=8, zero=1)
    off = _ctx(LLAMA_8B, tp=1, dp=8, zero=1, dp_comm_overlap=False)
    fwd, bwd = data_parallel.overlap_windows(on, np.array([3.0]))
    np.testing.assert_allclose((fwd, bwd), ([DEFAULT.dp_overlap * 1.0], [DEFAULT.dp_overlap * 2.0]))
    fwd, bwd = data_parallel.overlap_windows(off, np.array([3.0]))
    np.testing.assert_array_equal((fwd, bwd), ([0.0], [0.0]))
    sh = SimpleNamespace(zero=np.array([1]))
    tr = SimpleNamespace(grad_all_reduce=np.array([4.0]), grad_reduce_scatter=np.array([3.0]),
                         param_all_gather=np.array([2.0]), grad_replica_all_reduce=np.zeros(1))
    np.testing.assert_allclose(data_parallel.replicated_exposure(sh, tr, (fwd, bwd), 1.0), [5.0])


def test_nccl_user_buffers_cut_the_sm_cost_of_hidden_dp_traffic_inside_one_domain():
    # Megatron-Core DistributedDataParallelConfig.nccl_ub: with NCCL user buffers an all-gather /
    # reduce-scatter inside one NVLink domain holds 4 / 5 SMs, against 16 / 16 over NVLink + IB
    # without SHARP (the 16 channels comm_sm_fraction = 0.12 stands for). So FSDP (ZeRO-3) over
    # the 8 GPUs of one DGX-H100 slows compute by 0.12 x 5/16 = 0.0375 of its hidden traffic, not
    # 0.12; the hidden traffic itself is unchanged. Over two domains (dp 16) it stays 0.12.
    def dp_comm(dp, nccl_ub):
        ctx = _ctx(LLAMA_8B, tp=1, dp=dp, zero=3, mbs=1, gbs=8 * dp, nccl_ub=nccl_ub)
        split = StageSplit(LLAMA_8B, ctx.batch, ctx.pp)
        heavy = heaviest_stage(ctx, split, params_per_stage(ctx, split, layer_params(ctx)))
        return data_parallel.data_parallel_comm(ctx, data_parallel.sharding(ctx), heavy, np.array([10.0]))

    for dp, share in ((8, 5.0 / 16.0), (16, 1.0)):
        off, on = dp_comm(dp, False), dp_comm(dp, True)
        assert on.hidden[0] == pytest.approx(off.hidden[0], rel=1e-12) and off.hidden[0] > 0
        assert off.contention[0] == pytest.approx(0.12 * off.hidden[0], rel=1e-12)
        assert on.contention[0] == pytest.approx(0.12 * share * off.hidden[0], rel=1e-12)


def test_data_parallel_sharding_groups():
    # Dense states shard over dp·c = 8; experts over t·c·dp / (ep·etp) = 2·2·4 / (4·1) = 4.
    ctx = _ctx(MIXTRAL, tp=2, cp=2, dp=4, ep=4, etp=1, zero=1)
    sh = data_parallel.sharding(ctx)
    assert (sh.dense_shard[0], sh.expert_shard[0]) == (8.0, 4.0)
    assert not sh.unreplicated[0]


def test_optimizer_step_bytes():
    # ZeRO-1 over 8 ranks owns 1/8 of 1e9 dense parameters; Megatron-Core's step moves 38 B per
    # owned parameter (the norm reads the FP32 grad: 4; Adam reads grad, master, m, v and writes
    # master, m, v: 28; the master is copied to the BF16 weight: 4 + 2) at the memory-bound share
    # of HBM bandwidth.
    owned = owned_params(np.array([1, 0]), 1e9, 0.0, 8.0, 1.0)
    np.testing.assert_allclose(owned, [1.25e8, 1e9])
    ctx = _ctx(LLAMA_8B, tp=1, dp=8, zero=1)
    heavy = SimpleNamespace(dense=np.array([1e9]), expert=0.0)
    sh = SimpleNamespace(zero=np.array([1]), dense_shard=np.array([8.0]), expert_shard=np.array([1.0]))
    gpu = get_gpu(H100.gpu)
    expected = (4 + 28 + 6) * 1.25e8 / (gpu.memory_bandwidth_gbps * 1e9 * DEFAULT.memory_bound_efficiency)
    assert optimizer_time(ctx, sh, heavy)[0] == pytest.approx(expected)


def test_memory_inflight_and_full_recompute_activations():
    # 1F1B: stage i holds min(m, p - i) micro-batches (Narayanan et al. 2021, Sec. 2.2.1).
    np.testing.assert_array_equal(inflight_microbatches(np.array([0, 3, 0]), 4, 1, np.array([8, 8, 2])), [4, 1, 2])
    # Full recompute keeps each layer's input, 2h / t bytes per token under SP (Korthikanti
    # Table 2): 8 layers x 4096 tokens x 4096 B per micro-batch. Stage 0 holds 4 micro-batches,
    # stage 3 one: 3 x that more (the rebuilt working layer is the same on both).
    ctx = _ctx(LLAMA_8B, "full", tp=2, pp=4, dp=1, mbs=1, gbs=8)
    act = activation_bytes(ctx, recompute.SelectiveRecompute(ctx))
    one, n = np.array([1.0]), np.array([8.0])
    first = stage_activations(ctx, act, one, n, 0.0 * n, 0.0)
    last = stage_activations(ctx, act, one, n, 0.0 * n, 3.0)
    assert (first - last)[0] == pytest.approx(3 * 8 * 4096 * 4096.0)


def test_logit_bytes_by_loss_kernel_and_vocab_sharding():
    # Per logit alive at the loss: fused 2 (BF16, gradient in place), unfused 4 (FP32 copy), eager
    # 12 (saved FP32 log-softmax + NLL gradient + log-softmax gradient); eager on a vocab shard
    # (TP > 1, PyTorch loss_parallel) 16: the saved log-softmax, zeros_like, exp and their sum,
    # all FP32 (torch/distributed/tensor/parallel/loss.py _nll_loss_and_log_softmax_backward).
    from costmodel.compute import logit_bytes

    batch = LayoutBatch.from_arrays(loss=np.array([1, 0, 2, 2, 0]), tp=np.array([8, 8, 1, 8, 1]))
    np.testing.assert_array_equal(logit_bytes(batch), [2.0, 4.0, 12.0, 16.0, 4.0])


def test_memory_pipelining_runtime_buffers():
    # torch.distributed.pipelining (ZeRO-3 under PP: FSDP2 + PP, torchtitan): a boundary tensor
    # is [b, s, h] BF16 split by TP under SP: 1 x 4096 x 4096 x 2 / 2 = 16 MiB. m = 8, p = 4.
    boundary = 4096 * 4096 * 2 / 2
    ctx = _ctx(LLAMA_8B, "full", tp=2, pp=4, dp=1, zero=3, mbs=1, gbs=8, sequence_parallel=True)
    sh = data_parallel.sharding(ctx)
    # Stage 0 (4 in flight): 8 gradient receive buffers + 4 outputs kept until their backward.
    first, logits = pipeline_runtime_bytes(ctx, sh, 0.0, True, False)
    assert first[0] == pytest.approx(12 * boundary) and logits[0] == 0.0
    # Stage 1 (3 in flight): 8 - 3 activation receive buffers beyond the 3 that the first
    # layer saves anyway, 8 gradient receive buffers, 3 outputs.
    middle, _ = pipeline_runtime_bytes(ctx, sh, 1.0, False, False)
    assert middle[0] == pytest.approx(16 * boundary)
    # Last stage (1 in flight): 7 receive buffers, and fwd_cache keeps the BF16 logits
    # [b, s, V/t] of the micro-batch at the loss: 2 B x 4096 x 128256 / 2 (the unfused loss
    # counts its FP32 copy only).
    last, logits = pipeline_runtime_bytes(ctx, sh, 3.0, False, True)
    assert last[0] == pytest.approx(7 * boundary)
    assert logits[0] == pytest.approx(2.0 * 4096 * 128256 / 2)
    # Interleaved, 2 chunks per rank: stage 0 holds min(m v, 2(p-1) + (v-1)p + 1) = 11 chunks in
    # flight (5.5 stages); its second chunk receives (8 - 5.5 buffers beyond the saved ones),
    # both chunks send (2 x 8) and 11 outputs wait for backward: 2.5 + 16 + 11 = 29.5.
    ctx_v = _ctx(LLAMA_8B, "full", tp=2, pp=4, dp=1, zero=3, mbs=1, gbs=8, vpp=2, sequence_parallel=True)
    first_v, _ = pipeline_runtime_bytes(ctx_v, data_parallel.sharding(ctx_v), 0.0, True, False)
    assert first_v[0] == pytest.approx(29.5 * boundary)
    # Megatron's and DeepSpeed's pipelines (ZeRO-1 here) allocate per transfer: nothing kept.
    ctx1 = _ctx(LLAMA_8B, "full", tp=2, pp=4, dp=1, zero=1, mbs=1, gbs=8, sequence_parallel=True)
    none, no_logits = pipeline_runtime_bytes(ctx1, data_parallel.sharding(ctx1), 3.0, False, True)
    assert none[0] == 0.0 and no_logits[0] == 0.0
    # More micro-batches never hold less.
    ctx16 = _ctx(LLAMA_8B, "full", tp=2, pp=4, dp=1, zero=3, mbs=1, gbs=16, sequence_parallel=True)
    sh16 = data_parallel.sharding(ctx16)
    for rank, is_first, is_last in ((0.0, True, False), (1.0, False, False), (3.0, False, True)):
        a, la = pipeline_runtime_bytes(ctx, sh, rank, is_first, is_last)
        b, lb = pipeline_runtime_bytes(ctx16, sh16, rank, is_first, is_last)
        assert b[0] >= a[0] and lb[0] >= la[0]


def test_fp8_weight_copies_transformer_engine_caches_per_step():
    # TransformerEngine keeps the quantised weights of its linear layers for the whole step
    # (module/base.py get_weight_workspace, cache_name "weight"). Llama 3 8B, one layer's linear
    # weights: QKV h(a+2g)d = 4096·48·128, output a·d·h = 32·128·4096, gated MLP 3·h·F =
    # 3·4096·14336: 218,103,808 elements, half of them per GPU at TP 2; 32 layers on one stage.
    per_layer = 4096 * 48 * 128 + 32 * 128 * 4096 + 3 * 4096 * 14336
    assert per_layer == 218_103_808
    elements = 32 * per_layer / 2

    def copies(gpu="h100-sxm", **columns):
        ctx = _ctx(LLAMA_8B, tp=2, dp=4, **columns)
        ctx = replace(ctx, gpu=get_gpu(gpu))
        return fp8_weight_copy_bytes(ctx, data_parallel.sharding(ctx), layer_params(ctx), 32.0, 0.0)[0]

    assert copies(precision=0) == 0.0  # BF16: no copy
    # Hopper, delayed or current scaling: FP8 data + its transpose for the dgrad GEMM (quantizer.cpp
    # Float8Quantizer::create_tensor, with_transpose unless non-TN FP8 GEMMs exist): 2 B.
    assert copies(precision=1, fp8_recipe=0) == pytest.approx(2.0 * elements)
    assert copies(precision=1, fp8_recipe=1) == pytest.approx(2.0 * elements)
    # Blackwell (sm100) runs non-TN FP8 GEMMs: the data alone, 1 B.
    assert copies("b200", precision=1, fp8_recipe=0) == pytest.approx(1.0 * elements)
    # MXFP8: row-wise and column-wise copies with an E8M0 scale per 32 each: 2 + 2/32 B.
    assert copies("b200", precision=1, fp8_recipe=3) == pytest.approx(2.0625 * elements)
    # NVFP4: two 4-bit copies with an E4M3 scale per 16 each: 2 (0.5 + 1/16) = 1.125 B.
    assert copies("b200", precision=1, fp8_recipe=4) == pytest.approx(1.125 * elements)
    # ZeRO-3 through Megatron-FSDP keeps the cached copies of the whole layers (only TP-sharded);
    # through FSDP2 (torchao Float8Linear, torchtitan) no copy outlives a GEMM.
    assert copies(precision=1, zero=3, fsdp=2) == pytest.approx(2.0 * elements)
    assert copies(precision=1, zero=3, fsdp=1) == 0.0
    # FP8 parameters (--fp8-param-gather): no cache; the parameter holds the quantised data in place
    # of the BF16 value: nothing more on Hopper (data + transpose = 2 B), 1 B less per weight on
    # Blackwell under delayed scaling, sharded like the weights (ZeRO-3 over dp 4: a quarter).
    assert copies(precision=1, fp8_param_gather=True) == 0.0
    assert copies("b200", precision=1, fp8_param_gather=True) == pytest.approx(-1.0 * elements)
    assert copies("b200", precision=1, zero=3, fsdp=2, fp8_param_gather=True) == pytest.approx(-elements / 4)
    assert copies("b200", precision=1, fp8_recipe=3, fp8_param_gather=True) == pytest.approx(0.0625 * elements)
    # Property: the copies are of the weights this GPU holds, so they split with TP (bytes x t constant).
    for t in (1, 4, 8):
        ctx_t = _ctx(LLAMA_8B, tp=t, dp=8 // t, precision=1)
        held = fp8_weight_copy_bytes(ctx_t, data_parallel.sharding(ctx_t), layer_params(ctx_t), 32.0, 0.0)[0]
        assert held * t == pytest.approx(2.0 * 32 * per_layer)
    # Mixtral 8x7B at EP 8: one expert of 3·4096·14336 per GPU and attention 4096·48·128 + 32·128·4096;
    # the router (4096 x 8) and the norms run in BF16 and are not cached.
    ctx = _ctx(MIXTRAL, tp=1, dp=8, ep=8, precision=1)
    mixtral = fp8_weight_copy_bytes(ctx, data_parallel.sharding(ctx), layer_params(ctx), 0.0, 32.0)[0]
    assert mixtral == pytest.approx(2.0 * 32 * (3 * 4096 * 14336 + 4096 * 48 * 128 + 32 * 128 * 4096))


def test_optimizer_states_bytes_by_kind():
    # Adam's bytes per owned parameter (Apex distributed_fused_adam.py StateBucket; Megatron-Core
    # theoretical_memory_usage.py): FP32 master + m + v = 4 + 4 + 4; an int16 remainder of the master
    # + FP32 m, v = 2 + 4 + 4; BF16 m, v and no master = 2 + 2. 1e9 parameters on a GPU at DP 4,
    # ZeRO-1: the states of a quarter of them; weights (2 B) and FP32 gradients (4 B) unsharded.
    def states(kind):
        ctx = _ctx(LLAMA_8B, tp=2, dp=4, zero=1, optimizer_states=kind)
        sh = data_parallel.sharding(ctx)
        w, g, o = model_state_bytes(np.array([1e9]), 0.0, sh.zero, sh.dense_shard, sh.expert_shard, ctx.fp8,
                                    divisors=sh.state_divisors, grad_bytes=sh.grad_bytes,
                                    optimizer_bytes=sh.optimizer_bytes)
        return float(w[0]), float(g[0]), float(o[0])

    assert states(0) == pytest.approx((2e9, 4e9, 12e9 / 4))  # fp32
    assert states(1) == pytest.approx((2e9, 4e9, 10e9 / 4))  # remainders
    assert states(2) == pytest.approx((2e9, 4e9, 4e9 / 4))  # bf16


def test_utilization_counts_recompute_as_hardware_flops():
    # Full recompute of every layer adds a forward: 2 FLOPs per layer weight (attention + MLP +
    # norms of 32 dense layers; the head is not recomputed) + the attention core forward.
    from costmodel.flops import attention_core_flops_per_token, model_flops_per_token

    ctx = _ctx(LLAMA_8B, "full", tp=1, dp=8)
    counts = count_params(LLAMA_8B)
    layer = _layer()
    layer.module_flops = {name: 0.0 for name in layer.module_forward}
    extra = recomputed_flops_per_token(ctx, np.array([1.0]), recompute.SelectiveRecompute(ctx), layer, layer)
    expected = 2.0 * 32 * counts.dense_layer + 32 * attention_core_flops_per_token(LLAMA_8B, 4096)
    assert extra[0] == pytest.approx(expected)
    # MFU = model FLOPs per step / (step x GPUs x peak): a step of exactly that many seconds at
    # half the peak gives 0.5; HFU adds the recomputed FLOPs.
    tokens = 4096.0 * 1
    flops = model_flops_per_token(LLAMA_8B, np.array([4096]), counts)
    peak = get_gpu(H100.gpu).bf16_tflops * 1e12
    step = flops * tokens / (0.5 * 8 * peak)
    mfu, hfu = utilization(ctx, step, np.array([tokens]), extra)
    assert mfu[0] == pytest.approx(0.5)
    assert hfu[0] == pytest.approx(0.5 * (flops[0] + expected) / flops[0])


def test_attention_efficiency_by_kernel_length_and_architecture():
    # Calibrated at a kernel over the whole sequence s; a kernel over L keys runs at
    # e(L) / e(s) = (1 + L0/s) / (1 + L0/L): FA2 class L0 1272 (lent H100), Hopper's native
    # kernels L0 1200 (cuDNN's H200 benchmark). FlashAttention-2 on Blackwell keeps 0.48 of its
    # Hopper fraction of peak (cuDNN-frontend's B200 artifact: 0.163 of 2250 against the lent
    # H100's 0.341 of 989).
    from costmodel.compute import ATTENTION_L0, NATIVE_ATTENTION_L0, attention_efficiency

    cal = DEFAULT.with_(attention_efficiency=0.4, native_attention_speedup=1.5)
    s = 8192.0
    flash = LayoutBatch.from_arrays(attention=0, seq_len=8192)
    flash3 = LayoutBatch.from_arrays(attention=2, seq_len=8192)
    h100, b200 = get_gpu("h100-sxm"), get_gpu("b200")
    assert attention_efficiency(h100, flash, cal, s)[0] == pytest.approx(0.4)
    L0 = ATTENTION_L0
    assert attention_efficiency(h100, flash, cal, L0)[0] == pytest.approx(0.4 * (1 + L0 / s) / 2)
    L0n = NATIVE_ATTENTION_L0["hopper"]
    assert attention_efficiency(h100, flash3, cal, L0n)[0] == pytest.approx(0.6 * (1 + L0n / s) / 2)
    assert attention_efficiency(b200, flash, cal, s)[0] == pytest.approx(0.4 * 0.48)
    # The cuDNN GB200 figures the Blackwell L0 comes from: 886 TFLOP/s at 2K, 1536 at 32K
    # (fwd+bwd) fit e_max L / (L + L0) with L0 = 1680 to within 1%.
    ratio = (32768 / (32768 + 1680)) / (2048 / (2048 + 1680))
    assert ratio == pytest.approx(1536 / 886, rel=0.01)


def test_blackwell_native_attention_beyond_its_reference_length():
    # Blackwell's native kernels: the whole-sequence anchor stops at 8K (the longest Blackwell
    # reference row). A 1M-token sequence over CP 16 runs 64K-key kernels at
    # e_seq (1 + L0/8192) / (1 + L0/65536) with L0 = 1680: 0.6 x 1.2051 / 1.0256 = 0.7050, 17.5%
    # above an 8K kernel; a 4K sequence is unchanged (its own length, 0.6); Hopper keeps the
    # whole-sequence anchor: 0.6 x (1 + 1200/2^20) / (1 + 1200/65536) = 0.5899.
    from costmodel.compute import attention_efficiency

    cal = DEFAULT.with_(attention_efficiency=0.4, native_attention_speedup=1.5)
    long_seq = LayoutBatch.from_arrays(attention=2, seq_len=1048576)
    short = LayoutBatch.from_arrays(attention=2, seq_len=4096)
    h100, b200 = get_gpu("h100-sxm"), get_gpu("b200")
    assert attention_efficiency(b200, long_seq, cal, 65536.0)[0] == pytest.approx(0.6 * (1 + 1680 / 8192) / (1 + 1680 / 65536))
    assert attention_efficiency(b200, long_seq, cal, 65536.0)[0] == pytest.approx(0.7050, abs=1e-4)
    assert attention_efficiency(b200, short, cal, 4096.0)[0] == pytest.approx(0.6)
    assert attention_efficiency(h100, long_seq, cal, 65536.0)[0] == pytest.approx(0.5899, abs=1e-4)


def test_cudnn_2024_attention_runs_at_its_measured_fraction():
    # cuDNN-frontend's H200 benchmark, causal, head dim 128, fwd+bwd TFLOP/s: cuDNN 9.1.0 (2024-05,
    # benchmark_results.csv) 490.27 / 520.26 / 519.64 at 8K / 16K / 32K tokens; cuDNN 9.19 (2026,
    # llama3.1 top_left rows) combined from its forward and backward times, FLOPs(bwd) = 2.5 FLOPs(fwd):
    # 16K: (673 x 6.531 + 579 x 19.002) / (6.531 + 19.002) = 603.0. 490.27/566.9, 520.26/603.0 and
    # 519.64/608.0 are 0.865, 0.863, 0.855: the fraction 0.86. Priced on the native kernels only:
    # a flash3 layout of a 2024 container runs at 1.5 x 0.86 = 1.29 times FlashAttention-2's 0.4;
    # FlashAttention-2 itself does not change, nor does the native kernel of today's container.
    from costmodel.compute import CUDNN_2024_ATTENTION_FRACTION, attention_efficiency

    def combined(fwd, bwd, t_fwd, t_bwd):
        return (fwd * t_fwd + bwd * t_bwd) / (t_fwd + t_bwd)

    new = [combined(644, 541, 1.708, 5.083), combined(673, 579, 6.531, 19.002), combined(688, 581, 25.566, 75.688)]
    old = [490.27, 520.26, 519.64]
    assert new[1] == pytest.approx(603.0, abs=0.1)
    for o, n in zip(old, new):
        assert o / n == pytest.approx(CUDNN_2024_ATTENTION_FRACTION, abs=0.006)
    cal = DEFAULT.with_(attention_efficiency=0.4, native_attention_speedup=1.5)
    h100, s = get_gpu("h100-sxm"), 8192.0
    batch = LayoutBatch.from_arrays(attention=[2, 2, 0, 0], cudnn=[0, 1, 0, 1], seq_len=8192)
    eff = attention_efficiency(h100, batch, cal, s)
    np.testing.assert_allclose(eff, [0.6, 0.6 * 0.86, 0.4, 0.4])


def test_attention_kernel_length_by_cp_comm_type():
    # s = 64K over cp = 8 with tp 2 in 8-GPU domains: p2p chunks of s/c = 8K; a2a and allgather
    # kernels see all 64K keys; a2a+p2p all-to-alls over the 8 / 2 = 4 CP ranks of a domain and
    # rings over 8 / 4 = 2: chunks of 32K.
    batch = LayoutBatch.from_arrays(tp=2, cp=8, seq_len=65536, cp_comm_type=[0, 1, 2, 3])
    lengths = context_parallel.attention_kernel_length(batch, 8)
    np.testing.assert_allclose(lengths, [8192, 65536, 65536, 32768])


def test_context_parallel_a2a_and_allgather_are_exposed_collectives():
    # Llama 3 8B, tp 1, cp 4 in one domain, 16K tokens: each rank holds 4096 tokens.
    # a2a: Q, K, V, O of 32 + 8 + 8 + 32 heads x 128 per token, BF16, all-to-all over 4 ranks
    # before and after attention (pairwise exchange on a switch: 3 alpha + 3/4 S / B), the same
    # each way.
    # allgather: K, V (2 x 8 x 128 per token) of all 4 ranks gathered, a ring (3 alpha +
    # 3/4 S / B); backward gathers again and reduce-scatters dK, dV (the same time).
    tokens = 4096
    layer = _layer(attention=1.0)  # a ring would hide everything; these types do not overlap
    a2a_bytes = tokens * (2 * 32 + 2 * 8) * 128 * 2.0
    ctx = _ctx(LLAMA_8B, tp=1, cp=4, dp=2, mbs=1, seq_len=16384, cp_comm_type=1)
    comm = context_parallel.layer_comm(ctx, layer, layer)
    t_a2a = 3 * ALPHA_IN + 0.75 * a2a_bytes / B_IN
    assert comm.dense_forward[0] == pytest.approx(t_a2a, rel=1e-9)
    assert comm.dense_backward[0] == pytest.approx(t_a2a, rel=1e-9)
    gathered = 4 * tokens * 2 * 8 * 128 * 2.0
    ring = 3 * ALPHA_IN + 0.75 * gathered / B_IN
    ctx = _ctx(LLAMA_8B, tp=1, cp=4, dp=2, mbs=1, seq_len=16384, cp_comm_type=2)
    comm = context_parallel.layer_comm(ctx, layer, layer)
    assert comm.dense_forward[0] == pytest.approx(ring, rel=1e-9)
    assert comm.dense_backward[0] == pytest.approx(2 * ring, rel=1e-9)


def test_cp_all_to_all_needs_heads_divisible():
    # Ulysses splits each TP rank's heads over the all-to-all ranks: Llama 3 8B has 8 KV heads,
    # so a2a over cp = 16 cannot run (8 / 16), cp = 4 can; a2a+p2p at tp 4 in 8-GPU domains
    # all-to-alls over 8 / 4 = 2 ranks (2 KV heads per TP rank: fine); a type other than p2p
    # needs cp > 1.
    from costmodel.options import Layout
    from search.rules import check_layout

    gpu = get_gpu(H100.gpu)
    for kind, cp, tp, ok in (("a2a", 4, 1, True), ("a2a", 16, 1, False), ("a2a+p2p", 16, 4, True),
                             ("allgather", 1, 1, False)):
        lay = Layout(tp=tp, cp=cp, dp=1, seq_len=65536, cp_comm_type=kind)
        if ok:
            check_layout(LLAMA_8B, H100, gpu, lay, gpus=tp * cp)
        else:
            with pytest.raises(Exception, match="cp_a2a_divides_heads|cp_comm_type_needs_cp"):
                check_layout(LLAMA_8B, H100, gpu, lay, gpus=tp * cp)
    # The message counts each TP rank's heads: Llama 3 8B at tp 8 holds 4 query and 1 KV head a rank.
    with pytest.raises(Exception, match=r"its 2 all-to-all ranks: the 4 query and 1 KV heads of each tp=8 rank"):
        check_layout(LLAMA_8B, H100, gpu, Layout(tp=8, cp=2, dp=1, seq_len=65536, cp_comm_type="a2a"), gpus=16)


def test_mtp_adds_one_layer_projection_and_head_on_the_last_stage():
    # DeepSeek-V3 trains one MTP module (report Sec. 2.2): one more MoE layer (forward 5 ms,
    # backward 10 ms; its all-to-alls and TP collectives are the stage's EP and TP terms, one MoE
    # layer more: mtp.layers), the [4096 x 2h] @ [2h x h/t] projection
    # and the head again (2 ms forward, 4 ms backward). The projection on a 1000 TFLOP/s GPU at
    # efficiency 0.5, t = 2, h = 7168: 2·4096·14336·3584 FLOPs / 5e14 · (1 + 350/14336), above its
    # traffic (4096·14336 + 14336·3584 + 4096·3584)·2 B / 2 TB/s = 0.12 ms.
    assert DEEPSEEK_V3.mtp_layers == 1
    h = 7168
    gpu = SimpleNamespace(bf16_tflops=1000.0, memory_bandwidth_gbps=2000.0, gemm_efficiency_bf16=0.5)
    ctx = SimpleNamespace(model=DEEPSEEK_V3, n=1, tokens_mb=4096.0, tp=np.array([2.0]), gpu_clocked=gpu, calib=DEFAULT)
    moe = _layer(forward=5e-3, backward=10e-3)
    proj = 2 * 4096 * 2 * h * (h / 2) / 5e14 * (1 + 350 / (2 * h))
    fwd, bwd = mtp.last_stage_time(ctx, _layer(), moe, 2e-3, 4e-3)
    assert fwd[0] == pytest.approx(5e-3 + proj + 2e-3)
    assert bwd[0] == pytest.approx(10e-3 + 2 * proj + 4e-3)
    assert mtp.layers(DEEPSEEK_V3) == (0.0, 1.0) and mtp.layers(MIXTRAL) == (0.0, 0.0)
    # Its parameters: the layer's non-expert part and 2h·h/t of projection, an embedding copy
    # over t, the experts over ep x etp as passed.
    counts = SimpleNamespace(embedding=129280 * h)
    ctx = SimpleNamespace(model=DEEPSEEK_V3, counts=counts, tp=2.0)
    dense, expert = mtp.last_stage_params(ctx, moe_dense=1e8, moe_expert=3e8, dense_layer=0.0)
    assert dense == pytest.approx(1e8 + 2 * h * h / 2 + 129280 * h / 2)
    assert expert == 3e8
    # A model without MTP adds nothing.
    ctx = SimpleNamespace(model=MIXTRAL, n=1)
    fwd, bwd = mtp.last_stage_time(ctx, _layer(), moe, 2e-3, 4e-3)
    assert fwd[0] == bwd[0] == 0.0


def test_per_expert_quantise_kernels_by_recipe():
    # Qwen3-30B-A3B at EP 8: 128 / 8 = 16 experts a rank, each its own tensor in TransformerEngine's
    # GroupedLinear. Two grouped quantisations a pass: delayed scaling casts the 16 in one fused
    # launch (0 more); current scaling runs amax, scale and cast for each, 2 x (3·16 - 1) = 94
    # more; MXFP8 one cast each, 2 x (16 - 1) = 30; a fused grouped kernel quantises one tensor,
    # 2 x (3 - 1) = 4 under current scaling; BF16 none.
    qwen = get_model("qwen3-30b-a3b")
    recipes = {"delayed": 0, "current": 1, "blockwise": 2, "mxfp8": 3}
    def kernels(recipe, precision=1, grouped=0):
        ctx = _ctx(qwen, ep=8, dp=8, precision=precision, fp8_recipe=recipes[recipe], moe_grouped_gemm=grouped)
        return quantize.per_expert_kernels(ctx)[0]
    assert kernels("delayed") == 0.0
    assert kernels("current") == 94.0
    assert kernels("mxfp8") == kernels("blockwise") == 30.0
    assert kernels("current", grouped=1) == 4.0
    assert kernels("current", precision=0) == 0.0
    # Each is a short kernel C++ launches back to back: 3.8 us (3.4 us in a CUDA graph; NVIDIA's
    # 'Getting Started with CUDA Graphs'), so the loop's 94 against the fused kernel's 4 cost
    # 90 x 3.8 = 342 us more a pass (the bytes they move are the same), 90 x 3.4 = 306 us graphed.
    layer = LayerTimes(forward=np.zeros(1), backward=np.zeros(1), attention_forward=np.zeros(1),
                       flops_forward=np.zeros(1))

    def moe_forward(grouped, graphs=False):
        ctx = _ctx(qwen, ep=8, dp=8, precision=1, fp8_recipe=1, moe_grouped_gemm=grouped, cuda_graphs=graphs)
        return quantize.with_recipe(ctx, layer, replace(layer))[1].forward[0]
    assert moe_forward(0) - moe_forward(1) == pytest.approx(90 * 3.8e-6, rel=1e-9)
    assert moe_forward(0, True) - moe_forward(1, True) == pytest.approx(90 * 3.4e-6, rel=1e-9)


def test_blocking_launches_add_their_idle_time_per_kernel():
    # CUDA_LAUNCH_BLOCKING=1: 30 us more per kernel (costmodel.compute.LAUNCH_BLOCKING_US, from
    # BigScience's 97.20 vs 91.04 TFLOP/s A/B). A layer launches 30 kernels forward and twice as
    # many backward (Calibration.kernels_per_layer): 30 x 30 us = 0.9 ms more forward, 1.8 ms
    # backward, whatever the layer's size; nothing under a CUDA graph (one launch replays them).
    from costmodel.compute import LAUNCH_BLOCKING_US, dense_layer_parts
    from costmodel.options import Layout

    model, gpu = get_model("llama3-8b"), get_gpu("h100")

    def layer(**kw):
        batch = LayoutBatch.from_layouts([Layout(tp=1, pp=1, dp=1, mbs=1, gbs=1, seq_len=4096, **kw)])
        return dense_layer_parts(model, count_params(model), gpu, batch, DEFAULT)[0]

    plain, blocking = layer(), layer(launch_blocking=True)
    assert LAUNCH_BLOCKING_US == pytest.approx(30.0)
    assert float(blocking.forward[0] - plain.forward[0]) == pytest.approx(30 * 30e-6)
    assert float(blocking.backward[0] - plain.backward[0]) == pytest.approx(2 * 30 * 30e-6)
    graphed, both = layer(cuda_graphs=True), layer(cuda_graphs=True, launch_blocking=True)
    assert float(both.forward[0]) == pytest.approx(float(graphed.forward[0]))


def test_the_mtp_layers_all_to_alls_are_communication_not_compute():
    """DeepSeek-V3's MTP all-to-alls were added to the head's compute, so compute changed with the
    network (30.9 s with 8 NICs a node, 46.9 s with 1): now the EP term holds them, and compute is
    the same on both clusters."""
    from costmodel import Layout, evaluate
    from hardware_catalog.schema import ClusterSpec

    lay = Layout(tp=2, pp=8, vpp=4, dp=64, ep=64, gbs=8192, seq_len=4096)
    base = get_cluster("dgx-h100")
    runs = [evaluate(DEEPSEEK_V3, base.model_copy(update={"nics_per_node": n}), lay, gpu=get_gpu(base.gpu))
            for n in (8, 1)]
    compute = [r.time_terms["compute"][0] for r in runs]
    ep = [r.time_terms["ep_comm"][0] for r in runs]
    assert compute[0] == pytest.approx(compute[1], rel=1e-9) and ep[1] > 4 * ep[0]
