"""MoE mechanisms (costmodel/moe.py, the dispatchers in costmodel/expert_parallel.py, the FLOAT
option kind): each value derived by hand from the formula and its source, in the comments."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from costmodel import expert_parallel, moe
from costmodel.calibration import DEFAULT
from costmodel.collectives import Fabric, LinkLevel
from costmodel.compute import LayerTimes
from costmodel.context import chunk_context
from costmodel.layout import LayoutBatch
from costmodel.options import DISPATCHERS, GROUPED_GEMMS, OPTIONS_BY_NAME, Layout
from costmodel.params import count_params
from hardware_catalog import get_cluster, get_gpu, get_model
from hardware_catalog.errors import PlannerInputError

H100 = get_cluster("dgx-h100")
QWEN3_30B = get_model("qwen3-30b-a3b")  # h 2048, 128 experts, top-8, expert FFN 768, gated
MIXTRAL = get_model("mixtral-8x7b")  # h 4096, 8 experts, top-2
B_IN, ALPHA_IN = 100e9, 1e-6
FABRIC = Fabric(intra=LinkLevel(bandwidth=B_IN, latency=ALPHA_IN, topology="switch"),
                inter=LinkLevel(bandwidth=10e9, latency=10e-6, topology="switch"), domain_size=8)


def _batch(**columns):
    columns.setdefault("seq_len", 4096)
    return LayoutBatch.from_arrays(**columns)


def _ctx(model, **columns):
    batch = _batch(**columns)
    return chunk_context(model, H100, batch, get_gpu(H100.gpu), DEFAULT, FABRIC, count_params(model))


def test_tokens_per_expert_on_the_busiest_rank():
    # Qwen3-30B-A3B, 4096 tokens, k = 8 of E = 128, ep 8, etp 1, tp 1: a rank holds E/ep = 16
    # experts, each receiving 4096·8·8/(1·128) = 2048 routed tokens; 16·2048 = 32768 = 4096·8.
    shape = moe.moe_shape(QWEN3_30B, _batch(ep=8, dp=8), 4096.0, 1.0)
    assert shape.local_experts[0] == 16.0
    assert shape.tokens_per_expert[0] == 2048.0
    assert shape.routed_tokens[0] == 4096 * 8
    # The busiest rank at imbalance 1.5 gets 1.5x: 3072 per expert.
    busy = moe.moe_shape(QWEN3_30B, _batch(ep=8, dp=8, moe_imbalance=1.5), 4096.0, 1.0)
    assert busy.tokens_per_expert[0] == 3072.0
    # The busiest of 8 ranks holds at most every routed token, 8x the mean: 16 x 2048 x 8 / 16 per
    # expert at any imbalance above 8; at EP 1 the one rank is the mean, whatever the router does.
    most = moe.moe_shape(QWEN3_30B, _batch(ep=8, dp=8, moe_imbalance=64.0), 4096.0, 1.0)
    assert most.tokens_per_expert[0] == 2048.0 * 8 and most.routed_tokens[0] == 4096 * 8 * 8
    alone = moe.moe_shape(QWEN3_30B, _batch(ep=1, dp=8, moe_imbalance=2.0), 4096.0, 1.0)
    assert alone.routed_tokens[0] == 4096 * 8 and alone.local_experts[0] == 128.0


def test_expert_gemm_efficiency_follows_deepgemm_tables():
    # DeepGEMM README (H800, FP8, N 4096, K 7168): 932 TFLOP/s at 256 rows per group, 1288 at
    # 4096, of 1979 peak: 0.471 and 0.651. e·M/(M+128) with e = 0.67: 0.67·256/384 = 0.4467,
    # 0.67·4096/4224 = 0.6497: within 6% and 1%.
    e = moe.expert_gemm_efficiency(np.array([256.0, 4096.0]), 0.67)
    assert e[0] == pytest.approx(0.67 * 256 / 384)
    assert e[1] == pytest.approx(0.67 * 4096 / 4224)
    assert e[0] == pytest.approx(932 / 1979, rel=0.06)
    assert e[1] == pytest.approx(1288 / 1979, rel=0.01)


def test_wgrad_is_memory_bound_with_few_tokens():
    # One expert's dW[4096 x 4096] over 16 tokens on 1000 TFLOP/s at e 1, 2 TB/s, 2-byte
    # operands: compute 2·4096·16·4096 / 1e15 · (1 + 350/16) = 0.537e9/1e15 · 22.875 = 12.3 us;
    # traffic (2·4096·16·2 + 4096²·8) / 2e12 = (262144 + 134217728) / 2e12 = 67.2 us: memory-bound.
    t, _ = moe.wgrad_time(4096.0, 16.0, 4096.0, 1e15, 1.0, 2e12, 2.0)
    assert t == pytest.approx((2 * 4096 * 16 * 2 + 4096 ** 2 * 8) / 2e12)
    # With 8192 tokens it is compute-bound: 2·4096·8192·4096/1e15·(1 + 350/8192) = 286.6 us.
    t, _ = moe.wgrad_time(4096.0, 8192.0, 4096.0, 1e15, 1.0, 2e12, 2.0)
    assert t == pytest.approx(2 * 4096 * 8192 * 4096 / 1e15 * (1 + 350 / 8192))


def _kern(peak=1e15, eff=0.7, hbm=3e12, elem=2.0):
    return SimpleNamespace(peak=peak, eff=eff, hbm=hbm, elem=elem)


def test_loop_adds_a_call_per_extra_expert():
    # Qwen3-30B, ep 8: 16 local experts. TransformerEngine's loop costs 28 us for each expert
    # beyond the first, per call: forward 2 calls · 15 · 28 us = 840 us, backward 4 · 15 · 28
    # = 1680 us more than one fused launch (TE PR #3134: (0.267 - 0.069) ms / 7 = 28 us).
    shape = moe.moe_shape(QWEN3_30B, _batch(ep=8, dp=8), 4096.0, 1.0)
    loop = moe.expert_gemms(QWEN3_30B, _batch(ep=8, dp=8), shape, _kern(), DEFAULT)
    fused = moe.expert_gemms(QWEN3_30B, _batch(ep=8, dp=8, moe_grouped_gemm=GROUPED_GEMMS.index("fused")), shape,
                             _kern(), DEFAULT)
    assert loop.forward[0] - fused.forward[0] == pytest.approx(840e-6)
    assert loop.backward[0] - fused.backward[0] == pytest.approx(1680e-6)
    assert loop.calls[0] == pytest.approx(2520e-6)
    # One local expert (Mixtral at ep 8): the loop is one call, nothing added.
    one = moe.moe_shape(MIXTRAL, _batch(ep=8, dp=8), 4096.0, 1.0)
    assert moe.expert_gemms(MIXTRAL, _batch(ep=8, dp=8), one, _kern(), DEFAULT).calls[0] == 0.0


def test_expert_epilogues_of_biased_clamped_experts():
    # gpt-oss-120b at ep 8: 16 local experts, 4096 tokens x top-4 = 16384 routed copies of h = Fe =
    # 2880; one BF16 pass over them is 16384 * 2880 * 2 B = 94.37 MB, 31.46 us at 3 TB/s.
    # fc2 bias (experts.py _apply_bias): 6 passes + (2*16 + 1) kernels forward, 8 passes +
    # (4*16 + 1) backward; the clamp and cat (fused_bias_geglu.py): 8 passes + 3 kernels + one host
    # sync (2 ops x 12 us) forward, 10 passes + 3 kernels backward; 8 us a kernel.
    gpt_oss = get_model("gpt-oss-120b")
    calib = DEFAULT.with_(kernel_overhead_us=8.0)
    batch = _batch(ep=8, dp=8)
    shape = moe.moe_shape(gpt_oss, batch, 4096.0, 1.0)
    kern = SimpleNamespace(mem_bw=3e12)
    epi = moe.expert_epilogues(gpt_oss, batch, shape, kern, calib)
    p = 16384 * 2880 * 2.0 / 3e12
    assert epi.forward[0] == pytest.approx(6 * p + 33 * 8e-6 + 8 * p + 3 * 8e-6 + 24e-6)
    assert epi.backward[0] == pytest.approx(8 * p + 65 * 8e-6 + 10 * p + 3 * 8e-6)
    assert epi.activation_forward[0] == pytest.approx(8 * p + 3 * 8e-6 + 24e-6)
    # No biases and no clamp (Qwen3), or one fused grouped kernel: nothing.
    qwen = moe.moe_shape(QWEN3_30B, batch, 4096.0, 1.0)
    assert moe.expert_epilogues(QWEN3_30B, batch, qwen, kern, calib).forward[0] == 0.0
    fused = _batch(ep=8, dp=8, moe_grouped_gemm=GROUPED_GEMMS.index("fused"))
    assert moe.expert_epilogues(gpt_oss, fused, shape, kern, calib).backward[0] == 0.0


def test_capacity_caps_or_pads_the_busiest_rank():
    # Megatron-Core get_capacity: each expert takes at most F x its balanced share. Qwen3-30B
    # at ep 8 (2048 rows per expert when balanced): dropless at imbalance 1.5 -> 3072; capacity
    # factor 1.25 caps it at 1.25 x 2048 = 2560; a rank loaded below capacity (imbalance 1.0)
    # runs its 2048 unless padded, when every expert runs exactly 2560.
    rows = {}
    for name, cols in {"dropless": dict(moe_imbalance=1.5),
                       "capped": dict(moe_imbalance=1.5, moe_capacity_factor=1.25),
                       "under": dict(moe_imbalance=1.0, moe_capacity_factor=1.25),
                       "padded": dict(moe_imbalance=1.0, moe_capacity_factor=1.25, moe_pad_to_capacity=True),
                       "padded_drop": dict(moe_imbalance=1.5, moe_capacity_factor=1.25, moe_pad_to_capacity=True)}.items():
        rows[name] = moe.moe_shape(QWEN3_30B, _batch(ep=8, dp=8, **cols), 4096.0, 1.0).tokens_per_expert[0]
    assert rows == {"dropless": 3072.0, "capped": 2560.0, "under": 2048.0, "padded": 2560.0, "padded_drop": 2560.0}


def test_padded_all_to_all_carries_capacity_rows():
    # Mixtral ep 8, alltoall, BF16 both ways: padded to capacity 1.5 the dispatch and combine carry
    # 1.5x the balanced copies (C x E rows per rank, token_dispatcher.py drop_and_pad) whatever the
    # router did: the same bytes as dropless at imbalance 1.5.
    padded = _ctx(MIXTRAL, tp=1, dp=8, ep=8, mbs=1, moe_capacity_factor=1.5, moe_pad_to_capacity=True)
    skewed = _ctx(MIXTRAL, tp=1, dp=8, ep=8, mbs=1, moe_imbalance=1.5)
    elems = 4096 * 2 * 4096 * 1.5
    expected = 2 * (7 * ALPHA_IN + 7 / 8 * elems * 2 / B_IN)
    assert expert_parallel.all_to_all_per_pass(padded)[0] == pytest.approx(expected, rel=1e-12)
    assert expert_parallel.all_to_all_per_pass(skewed)[0] == pytest.approx(expected, rel=1e-12)


def test_graphed_loop_pays_a_launch_gap_per_expert():
    # Padded to capacity the alltoall dispatcher never syncs, so a CUDA graph holds the whole
    # layer and TransformerEngine's loop costs each extra expert its launch gap (8 - 0.4 us at
    # the shipped kernel overhead less the graph saving) instead of 28 us of host setup: Qwen3-30B
    # at ep 8, forward 2 calls x 15 x 7.6 us = 228 us over one fused launch.
    cols = dict(ep=8, dp=8, moe_capacity_factor=1.0, moe_pad_to_capacity=True, cuda_graphs=True)
    b = _batch(**cols)
    shape = moe.moe_shape(QWEN3_30B, b, 4096.0, 1.0)
    graphed = moe.expert_gemms(QWEN3_30B, b, shape, _kern(), DEFAULT)
    fused = moe.expert_gemms(QWEN3_30B, _batch(**cols, moe_grouped_gemm=GROUPED_GEMMS.index("fused")), shape,
                             _kern(), DEFAULT)
    gap = (DEFAULT.kernel_overhead_us - 0.4) * 1e-6
    assert graphed.forward[0] - fused.forward[0] == pytest.approx(2 * 15 * gap)
    # Without padding the dispatcher syncs, the layer cannot be captured: 28 us each again.
    eager = _batch(ep=8, dp=8, moe_capacity_factor=1.0, cuda_graphs=True)
    assert moe.expert_gemms(QWEN3_30B, eager, shape, _kern(), DEFAULT).calls[0] == pytest.approx(6 * 15 * 28e-6)


def test_backward_is_dgrad_plus_wgrad_not_twice_forward():
    # Few tokens per expert (ep 1: 4096·8/128 = 256 each): wgrad reduces over 256 tokens and
    # pays 1 + 350/256 = 2.37x per tile, so backward > 2 x forward.
    b = _batch(moe_grouped_gemm=GROUPED_GEMMS.index("fused"))
    shape = moe.moe_shape(QWEN3_30B, b, 4096.0, 1.0)
    g = moe.expert_gemms(QWEN3_30B, b, shape, _kern(), DEFAULT)
    assert shape.tokens_per_expert[0] == 256.0
    assert g.backward[0] > 2.0 * g.forward[0]


def test_host_sync_by_dispatcher_and_grouped_gemm():
    # Megatron-Core token_dispatcher.py syncs the host for the all-to-all splits; the loop needs
    # the splits on the host; DeepEP / HybridEP with a fused kernel keep them on the device.
    d = {name: DISPATCHERS.index(name) for name in DISPATCHERS}
    loop, fused = GROUPED_GEMMS.index("loop"), GROUPED_GEMMS.index("fused")
    batch = LayoutBatch.from_arrays(moe_dispatcher=[d["alltoall"], d["alltoall"], d["deepep"], d["hybridep"],
                                                    d["hybridep"], d["allgather"]],
                                    moe_grouped_gemm=[loop, fused, fused, fused, loop, fused])
    assert moe.syncs_host(batch).tolist() == [True, True, False, False, True, True]
    # Padded to capacity (token_dispatcher.py drop_and_pad: counts built on the host from the
    # capacity, cuda_sync_point 'no_sync') alltoall and HybridEP never sync, even with the loop;
    # allgather copies its counts back in every mode; dropping without padding still syncs.
    pad = LayoutBatch.from_arrays(moe_dispatcher=[d["alltoall"], d["hybridep"], d["allgather"], d["alltoall"]],
                                  moe_grouped_gemm=[loop, loop, fused, loop], moe_capacity_factor=[1.0, 1.0, 1.0, 1.0],
                                  moe_pad_to_capacity=[True, True, True, False])
    assert moe.syncs_host(pad).tolist() == [False, False, True, True]


def test_host_bound_layer():
    # A layer of 100 us forward, 200 us backward on the GPU issuing 48 operators forward at
    # 12 us each (576 us) and 96 backward (1152 us): host-bound both ways; the synced forward
    # also waits 2 operators (24 us) after the sync: 600 us.
    lt = LayerTimes(np.array([100e-6, 100e-6]), np.array([200e-6, 200e-6]), np.zeros(2), np.zeros(2), ())
    out = moe.host_bound(lt, 48.0, np.array([True, False]))
    assert out.forward == pytest.approx([600e-6, 576e-6])
    assert out.backward == pytest.approx([1152e-6, 1152e-6])
    # A GPU-bound layer keeps its GPU time (plus the sync wait).
    big = LayerTimes(np.array([5e-3]), np.array([1e-2]), np.zeros(1), np.zeros(1), ())
    assert moe.host_bound(big, 48.0, np.array([False])).forward[0] == 5e-3


def test_fp8_dispatch_bf16_combine():
    # Mixtral ep 8 in one domain, FP8: deepep dispatches 1 + 4/128 bytes per element, combines
    # in 2: (n-1)·alpha + (n-1)/n · S/B each, S = 4096 tokens · k 2 · h 4096 · bytes.
    ctx = _ctx(MIXTRAL, tp=1, dp=8, ep=8, mbs=1, precision=1, moe_dispatcher=DISPATCHERS.index("deepep"))
    elems = 4096 * 2 * 4096
    expected = (7 * ALPHA_IN + 7 / 8 * elems * (1 + 4 / 128) / B_IN) + (7 * ALPHA_IN + 7 / 8 * elems * 2 / B_IN)
    assert expert_parallel.all_to_all_per_pass(ctx)[0] == pytest.approx(expected, rel=1e-12)
    # alltoall sends BF16 both ways whatever the precision.
    ctx = _ctx(MIXTRAL, tp=1, dp=8, ep=8, mbs=1, precision=1)
    assert expert_parallel.all_to_all_per_pass(ctx)[0] == pytest.approx(2 * (7 * ALPHA_IN + 7 / 8 * elems * 2 / B_IN))


def test_imbalance_scales_the_busiest_ranks_all_to_all():
    # The bandwidth term grows with the busiest rank's bytes, the latency term does not.
    base = expert_parallel.all_to_all_per_pass(_ctx(MIXTRAL, tp=1, dp=8, ep=8, mbs=1))[0]
    busy = expert_parallel.all_to_all_per_pass(_ctx(MIXTRAL, tp=1, dp=8, ep=8, mbs=1, moe_imbalance=1.5))[0]
    latency = 2 * 7 * ALPHA_IN
    assert busy - latency == pytest.approx(1.5 * (base - latency))


def test_allgather_dispatcher_moves_every_ranks_tokens():
    # Mixtral ep 8 in one domain, allgather: all-gather of 8 x 4096 tokens x h in BF16 and the
    # reduce-scatter back, each (n-1)·alpha + (n-1)/n · S/B with S the gathered size.
    ctx = _ctx(MIXTRAL, tp=1, dp=8, ep=8, mbs=1, moe_dispatcher=DISPATCHERS.index("allgather"))
    S = 8 * 4096 * 4096 * 2.0
    assert expert_parallel.all_to_all_per_pass(ctx)[0] == pytest.approx(2 * (7 * ALPHA_IN + 7 / 8 * S / B_IN), rel=1e-9)


def test_moe_imbalance_is_a_float_option():
    opt = OPTIONS_BY_NAME["moe_imbalance"]
    assert opt.column_dtype == "float64"
    assert opt.parse("1.25") == 1.25
    assert opt.decode(opt.encode(1.25)) == 1.25
    with pytest.raises(PlannerInputError, match=r"--moe-imbalance=0.5: must be a number from 1 to 64"):
        opt.parse(0.5)
    with pytest.raises(PlannerInputError, match="--moe-imbalance"):
        opt.parse("lots")
    batch = LayoutBatch.from_layouts([Layout(moe_imbalance=1.3)])
    assert batch.moe_imbalance.dtype == np.float64 and batch.layout(0).moe_imbalance == 1.3


def test_imbalance_slows_an_moe_step_and_a_dense_model_refuses_it():
    from costmodel import evaluate
    from search.rules import check_layout

    cluster = get_cluster("dgx-h100")
    even = evaluate(QWEN3_30B, cluster, Layout(dp=8, ep=8, gbs=64, seq_len=4096))
    skew = evaluate(QWEN3_30B, cluster, Layout(dp=8, ep=8, gbs=64, seq_len=4096, moe_imbalance=1.5))
    assert skew.step_time_s[0] > even.step_time_s[0]
    assert skew.memory_gib["peak"][0] > even.memory_gib["peak"][0]
    with pytest.raises(PlannerInputError, match="moe_imbalance"):
        check_layout(get_model("llama3-8b"), cluster, get_gpu(cluster.gpu), Layout(dp=8, gbs=64, moe_imbalance=1.2),
                     gpus=8)


def test_hybridep_prices_on_an_nvl72_rack():
    # EP 64 inside one 72-GPU NVLink domain: HybridEP never crosses the network, so with FP8
    # dispatch it is faster than the all-to-all dispatcher on the same rack.
    from costmodel import evaluate

    nvl72 = get_cluster("gb200-nvl72")
    model = get_model("deepseek-v3")
    lay = dict(pp=4, vpp=4, dp=64, ep=64, gbs=2048, seq_len=4096, precision="fp8")
    a2a = evaluate(model, nvl72, Layout(**lay))
    hyb = evaluate(model, nvl72, Layout(**lay, moe_dispatcher="hybridep"))
    assert np.isfinite(hyb.step_time_s[0])
    assert hyb.time_terms["ep_comm"][0] < a2a.time_terms["ep_comm"][0]


def test_cross_validation_prints_families():
    from planner.validate.crossval import format_cross_validation

    st = {"rows": 2, "median_abs_error": 0.05, "p90_abs_error": 0.1, "mape": 0.06, "mean_signed_error": 0.0}
    cv = {"per_source": {"a": {"in_sample": st, "held_out": st, "constants": dict(DEFAULT.__dict__)}},
          "in_sample": st, "held_out": st, "families": [{"family": "MoE", "in_sample": st, "held_out": st}]}
    text = format_cross_validation(cv)
    line = next(line for line in text.splitlines() if line.startswith("MoE"))
    assert line.split()[1] == "2" and line.count("5.0% / 10.0%") == 2


def test_profiles_set_the_grouped_gemm_and_search_hybridep_by_release():
    from planner.frameworks.profiles import RowFacts, apply_profiles

    moe_parts = frozenset({"moe"})
    # Megatron-Core r0.8's --moe-grouped-gemm ran the legacy GroupedMLP (one CUTLASS launch).
    settings, _ = apply_profiles(RowFacts(framework="megatron-core v0.8 (dropless)", year=2024, model_parts=moe_parts))
    assert settings["moe_grouped_gemm"] == "fused"
    # torchtitan's MoE calls torch._grouped_mm.
    settings, _ = apply_profiles(RowFacts(framework="torchtitan", year=2025, model_parts=moe_parts))
    assert settings["moe_grouped_gemm"] == "fused"
    # Megatron-Bridge 25.09 (Megatron-Core before v0.15): TransformerEngine's loop, alltoall.
    settings, _ = apply_profiles(RowFacts(framework="megatron-bridge / nemo 25.09", year=2025, gpu="b200",
                                          model_parts=moe_parts))
    assert "moe_grouped_gemm" not in settings and "moe_dispatcher" not in settings
    # From 25.11 on HybridEP is offered and the recipes pick per model and GPU: searched.
    settings, _ = apply_profiles(RowFacts(framework="megatron-bridge / nemo 26.04.01", year=2026, gpu="h100-sxm",
                                          model_parts=moe_parts))
    assert settings["moe_dispatcher"] == ["alltoall", "hybridep"]
    # A dense model gets none of it.
    settings, _ = apply_profiles(RowFacts(framework="megatron-bridge / nemo 26.04.01", year=2026, gpu="h100-sxm"))
    assert "moe_dispatcher" not in settings and "moe_grouped_gemm" not in settings


def test_moe_imbalance_reads_back_from_a_search_csv():
    from planner.records import _cell

    opt = OPTIONS_BY_NAME["moe_imbalance"]
    assert _cell(opt, "1.25", "row 1: moe_imbalance") == 1.25
    with pytest.raises(PlannerInputError, match="must be a number"):
        _cell(opt, "x", "row 1: moe_imbalance")


def test_cuda_graphs_lift_the_host_timeline_only_where_the_layer_does_not_sync():
    # A captured graph is replayed by one host launch. At 256 tokens a micro-batch the MoE layers
    # are host-bound (issuing ~40 operators at 12 us each outlasts their kernels): with DeepEP and
    # a fused grouped GEMM (no host sync) graphs lift that, so they save more than on a long
    # sequence, where they only trim the kernels' launch gaps; the alltoall dispatcher syncs the
    # host, which no graph can hold, so its host-bound step does not move.
    from costmodel import evaluate
    from costmodel.options import Layout
    from hardware_catalog import get_cluster, get_model

    model, cluster = get_model("qwen3-30b-a3b"), get_cluster("dgx-h100")

    def saving(dispatcher, seq):
        base = dict(tp=1, pp=1, ep=8, dp=8, mbs=1, gbs=64, seq_len=seq, recompute="none", precision="bf16",
                    moe_dispatcher=dispatcher, moe_grouped_gemm="fused")
        plain, graphed = (evaluate(model, cluster, Layout(cuda_graphs=g, **base)).step_time_s[0] for g in (False, True))
        return plain - graphed

    assert saving("deepep", 256) > 1.5 * saving("deepep", 4096) > 0
    assert saving("alltoall", 256) == pytest.approx(0.0, abs=1e-9)


def test_token_drop_never_runs_more_than_dropless_or_padded():
    # Properties of expert_load over a grid: dropping caps the busiest rank (never above dropless),
    # padding runs exactly the capacity (never below what dropping without padding runs).
    imb, cap = np.meshgrid(np.linspace(1.0, 3.0, 9), np.linspace(0.5, 2.5, 9))
    imb, cap = imb.ravel(), cap.ravel()
    dropless = moe.expert_load(LayoutBatch.from_arrays(moe_imbalance=imb))
    capped = moe.expert_load(LayoutBatch.from_arrays(moe_imbalance=imb, moe_capacity_factor=cap))
    padded = moe.expert_load(LayoutBatch.from_arrays(moe_imbalance=imb, moe_capacity_factor=cap,
                                                     moe_pad_to_capacity=np.ones(imb.size, dtype=bool)))
    assert np.all(capped <= dropless) and np.all(capped <= padded) and np.all(padded == cap)


def test_moe_under_tp_needs_sequence_parallel():
    """Megatron-Core's MoELayer refuses to train under TP without SP (moe_layer.py, core_r0.9.0 on),
    and the cost model prices the all-to-all for the whole sequence on every TP rank there while the
    expert GEMMs keep 1/tp of the tokens: refused, as Megatron does. Dense layers may run without."""
    from search.rules import check_layout

    cluster = get_cluster("dgx-h100")
    gpu = get_gpu(cluster.gpu)
    with pytest.raises(PlannerInputError, match="moe_tp_needs_sequence_parallel"):
        check_layout(MIXTRAL, cluster, gpu, Layout(tp=4, pp=2, ep=8, dp=8, gbs=256, seq_len=4096,
                                                   sequence_parallel=False), gpus=64)
    check_layout(MIXTRAL, cluster, gpu, Layout(tp=4, pp=2, ep=8, dp=8, gbs=256, seq_len=4096), gpus=64)
    check_layout(get_model("llama3-8b"), cluster, gpu, Layout(tp=2, dp=4, gbs=64, sequence_parallel=False), gpus=8)


def test_expert_tp_all_gathers_the_received_rows_and_reduce_scatters_the_outputs():
    """Megatron-Core's alltoall dispatcher, under etp > 1, all-gathers the rows it received over
    the expert-TP group and reduce-scatters the experts' outputs before the combine
    (token_dispatcher.py); they were not priced, so ETP 4 looked free. Mixtral at TP4 SP, EP1
    ETP4, one 4,096-token micro-batch: each rank holds 1,024 tokens x top-2 x 4,096 = 8.39M
    elements; gathered over 4 ranks in BF16, S = 67,108,864 B. On the test fabric's 100 GB/s
    switch with 1 us steps: all-gather and reduce-scatter 3 x 1 us + 3/4 x S / 100 GB/s each."""
    ctx = _ctx(MIXTRAL, tp=4, ep=1, etp=4, dp=16, sequence_parallel=True, mbs=1)
    S = 1024 * 2 * 4096 * 2 * 4
    expected = 2 * (3 * ALPHA_IN + 0.75 * S / B_IN)
    assert expert_parallel.all_to_all_per_pass(ctx)[0] == pytest.approx(expected, rel=1e-9)
    assert expert_parallel.all_to_all_per_pass(_ctx(MIXTRAL, tp=4, ep=1, etp=1, dp=16, sequence_parallel=True,
                                                    mbs=1))[0] == 0.0
