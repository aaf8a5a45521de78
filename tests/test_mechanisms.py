"""Implementation mechanisms of the cost model: TP comm overlap, eager vs fused kernels, fused
cross entropy, FlashAttention-3 on Hopper, the GEMM per-tile cost, sustained clocks and the SMs
that overlapped collectives take. Hand-derived values and properties."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from typer.testing import CliRunner

from costmodel import Layout, LayoutBatch, evaluate
from costmodel.calibration import DEFAULT
from costmodel.compute import GEMM_K_OVERHEAD, gemm_time, power_limited
from costmodel.layout import check_implementation
from hardware_catalog import get_cluster, get_gpu, get_model
from hardware_catalog.errors import PlannerInputError

H100 = get_cluster("dgx-h100")
A100 = get_cluster("dgx-a100")
LLAMA_8B = get_model("llama3-8b")
LLAMA_70B = get_model("llama3-70b")


def _run(model, cluster, **kw):
    base = dict(tp=1, pp=1, dp=8, mbs=1, gbs=64, seq_len=8192, recompute="none", zero=1)
    base.update(kw)
    return evaluate(model, cluster, Layout(**base))


def _step(model, cluster, **kw) -> float:
    return float(_run(model, cluster, **kw).step_time_s[0])


def test_gemm_k_overhead_by_hand():
    # A GEMM whose reduction is K0 elements long takes twice its large-K compute time.
    m, n, peak, eff = 8192.0, 8192.0, 1e15, 0.5
    t, flops = gemm_time(m, GEMM_K_OVERHEAD, n, peak, eff, 1e30, 2.0)
    assert flops == pytest.approx(2 * m * GEMM_K_OVERHEAD * n)
    assert t == pytest.approx(2.0 * flops / (peak * eff))
    # Longer reductions approach the asymptotic efficiency.
    t_long, f_long = gemm_time(m, 100 * GEMM_K_OVERHEAD, n, peak, eff, 1e30, 2.0)
    assert t_long == pytest.approx(1.01 * f_long / (peak * eff))


def test_sustained_clock_and_power_cap_multiply():
    gpu = get_gpu("h100")
    clocked = power_limited(gpu, 400.0, sustained_clock=0.9)
    assert clocked.bf16_tflops == pytest.approx(gpu.bf16_tflops * 0.9 * (400 / 700) ** (1 / 3))
    assert clocked.memory_bandwidth_gbps == gpu.memory_bandwidth_gbps  # HBM is not clock-bound
    assert power_limited(gpu, None, 1.0) is gpu


def test_eager_kernels_never_faster_and_fused_loss_never_slower():
    for kw in (dict(), dict(tp=2, dp=4), dict(recompute="full")):
        fused = _step(LLAMA_8B, H100, **kw)
        eager = _step(LLAMA_8B, H100, kernels="eager", **kw)
        assert eager > fused
        assert _step(LLAMA_8B, H100, loss="fused", **kw) < fused


def test_eager_rmsnorm_traffic_by_hand():
    # Extra HBM traffic of eager over fused kernels, one layer forward: 2 RMSNorms x 16 more
    # BF16 elements per hidden element, rotary 8 more per Q/K element, repeat_kv copies and the
    # contiguous attention output, SwiGLU 2F more; backward moves twice that.
    from costmodel.moe import dense_and_moe_layer_times
    from costmodel.params import count_params

    m = LLAMA_8B
    gpu = get_gpu("h100")
    batch = LayoutBatch.from_layouts([Layout(tp=1, dp=8, mbs=1, gbs=8, seq_len=4096, kernels=k) for k in ("fused", "eager")])
    dense, _ = dense_and_moe_layer_times(m, count_params(m), gpu, batch, DEFAULT)
    h, a, g, d, F = m.hidden_size, m.num_attention_heads, m.kv_heads, m.head_size, m.ffn_hidden_size
    extra_elems = 32 * h + 8 * (a + g) * d + 2 * (g * d + a * d) + 2 * a * d + 2 * F
    tokens = 4096
    expected = tokens * 2.0 * extra_elems / (gpu.memory_bandwidth_gbps * 1e9 * DEFAULT.memory_bound_efficiency)
    # ... plus the 22 extra kernel launches.
    from costmodel.compute import EAGER_EXTRA_KERNELS_PER_LAYER

    expected += EAGER_EXTRA_KERNELS_PER_LAYER * DEFAULT.kernel_overhead_us * 1e-6
    assert dense.forward[1] - dense.forward[0] == pytest.approx(expected, rel=1e-9)
    assert dense.backward[1] - dense.backward[0] == pytest.approx(2 * expected, rel=1e-9)


def test_tp_overlap_hides_tp_comm():
    kw = dict(tp=8, dp=1, mbs=1, gbs=16, seq_len=8192)
    plain = _run(LLAMA_70B, H100, **kw)
    overlapped = _run(LLAMA_70B, H100, tp_comm_overlap=True, **kw)
    assert overlapped.time_terms["tp_comm"][0] < 0.5 * plain.time_terms["tp_comm"][0]
    # Each collective keeps at least its first chunk (1/tp) exposed.
    assert overlapped.time_terms["tp_comm"][0] >= plain.time_terms["tp_comm"][0] / 8 - 1e-12
    # The reduce-scatter GEMMs lose SMs: compute grows a little.
    assert overlapped.time_terms["compute"][0] > plain.time_terms["compute"][0]
    # Without sequence parallelism Megatron cannot overlap: the flag changes nothing.
    no_sp = _step(LLAMA_70B, H100, sequence_parallel=False, tp_comm_overlap=True, **kw)
    assert no_sp == pytest.approx(_step(LLAMA_70B, H100, sequence_parallel=False, **kw))


def test_flash3_only_on_hopper():
    assert _step(LLAMA_8B, H100, attention="flash3") < _step(LLAMA_8B, H100)
    assert _step(LLAMA_8B, A100, attention="flash3") == pytest.approx(_step(LLAMA_8B, A100))


def test_comm_contention_is_fraction_of_hidden_comm():
    lay = Layout(tp=1, pp=1, dp=64, mbs=2, gbs=128, seq_len=4096, zero=3, recompute="full")
    r0 = evaluate(LLAMA_8B, H100, lay, calib=DEFAULT.with_(comm_sm_fraction=0.0))
    r1 = evaluate(LLAMA_8B, H100, lay, calib=DEFAULT.with_(comm_sm_fraction=0.2))
    assert r0.time_terms["comm_contention"][0] == 0.0
    hidden = r1.overlapped_terms["dp_comm"][0]
    assert hidden > 0
    assert r1.time_terms["comm_contention"][0] == pytest.approx(0.2 * hidden)
    assert r1.step_time_s[0] == pytest.approx(r0.step_time_s[0] + 0.2 * hidden)


def test_implementation_fields_round_trip():
    lay = Layout(tp=2, dp=4, attention="flash3", kernels="eager", loss="fused", tp_comm_overlap=True)
    back = LayoutBatch.from_layouts([lay]).layout(0)
    assert (back.attention, back.kernels, back.loss, back.tp_comm_overlap) == ("flash3", "eager", "fused", True)


def test_check_implementation_rejects_bad_values():
    with pytest.raises(PlannerInputError, match="--kernels=slow"):
        check_implementation({"kernels": "slow"})
    with pytest.raises(PlannerInputError, match="--loss=yes"):
        check_implementation({"loss": "yes"})
    with pytest.raises(PlannerInputError, match="--tp-comm-overlap"):
        check_implementation({"tp_comm_overlap": "yes"})
    assert check_implementation({"attention": None, "tp_comm_overlap": True}) == {"tp_comm_overlap": True}


def test_cli_implementation_flags():
    from planner.cli.main import app

    runner = CliRunner()
    ok = runner.invoke(app, ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--tp", "2",
                             "--tp-comm-overlap", "--loss", "fused", "--attention", "flash3", "--json"])
    assert ok.exit_code == 0, ok.output
    import json

    lay = json.loads(ok.output)["layout"]
    assert lay["tp_comm_overlap"] is True and lay["loss"] == "fused" and lay["attention"] == "flash3"
    bad = runner.invoke(app, ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--tp-comm-overlap"])
    assert bad.exit_code != 0


def test_validate_maps_framework_to_implementation():
    from planner.validate import load_runs, map_run

    rows = {r["id"]: r for r in load_runs(None)}
    eager = map_run(rows["torchtitan_h100_8b_fsdp_8gpu"])
    assert eager.pins["kernels"] == "eager" and eager.pins["loss"] == "eager"
    bridge = map_run(rows["mbridge2509_h100_llama3_70b_64gpu"])
    assert bridge.pins["loss"] == "fused" and bridge.pins["attention"] == "flash3"
    assert bridge.searched["tp_comm_overlap"] == [0, 1]
    mcore = map_run(rows["megatron2024_h100_weak_32b"])
    assert mcore.pins["tp_comm_overlap"] is True  # the README lists --tp-comm-overlap
    old = map_run(rows["megatron2021_t1_1p7b"])
    assert old.pins["attention"] == "unfused" and "tp_comm_overlap" not in old.searched


def test_logit_memory_by_loss_kernel():
    # Last-stage logits memory: 2 / 4 / 12 bytes per logit for fused / Megatron unfused / eager.
    kw = dict(tp=1, dp=8, mbs=1, gbs=8, seq_len=4096, zero=3)
    per = {loss: float(_run(LLAMA_8B, H100, loss=loss, **kw).memory_gib["logits"][0]) for loss in ("fused", "unfused", "eager")}
    logits_gib = 4096 * LLAMA_8B.vocab_size / 2**30
    assert per == pytest.approx({"fused": 2 * logits_gib, "unfused": 4 * logits_gib, "eager": 12 * logits_gib})


def test_interleaved_warmup_and_flush_p2p_by_hand():
    # Interleaved 1F1B, first stage: (pp-1)*2 + (vpp-1)*pp warm-up chunk steps, as many in the
    # flush, each waiting on its send/recv; pp=4, vpp=2: 2*3 + 1*4 = 10, so 20 transfers.
    from costmodel import collectives
    from hardware_catalog import get_interconnect

    m = LLAMA_70B
    lay = Layout(tp=8, pp=4, dp=1, vpp=2, mbs=1, gbs=8, seq_len=4096, recompute="full")
    r = evaluate(m, H100, lay)
    fabric = collectives.fabric_from_cluster(H100, get_gpu("h100"), get_interconnect(H100.nic))
    one = collectives.p2p_time(np.array([4096 * m.hidden_size * 2.0 / 8]), np.array([True]), fabric)
    assert r.time_terms["pp_p2p"][0] == pytest.approx(20 * float(one[0]))
    # More virtual stages never wait on fewer transfers.
    r4 = evaluate(m, H100, dataclasses.replace(lay, vpp=4, gbs=16))
    assert r4.time_terms["pp_p2p"][0] > r.time_terms["pp_p2p"][0]


def test_ep_overlap_hides_all_to_all_where_the_schedule_allows():
    dsv3 = get_model("deepseek-v3")
    base = dict(tp=2, pp=8, dp=64, ep=64, vpp=4, mbs=1, gbs=8192, seq_len=4096, recompute="full",
                recompute_share=2, precision="fp8")
    plain = evaluate(dsv3, H100, Layout(**base))
    hidden = evaluate(dsv3, H100, Layout(ep_comm_overlap=True, **base))
    assert hidden.time_terms["ep_comm"][0] < plain.time_terms["ep_comm"][0]
    assert hidden.step_time_s[0] < plain.step_time_s[0]
    # Exposed = what exceeds the other micro-batch's computation: never below ep - compute.
    lower = plain.time_terms["ep_comm"][0] - plain.time_terms["compute"][0] - plain.time_terms["recompute"][0]
    assert hidden.time_terms["ep_comm"][0] >= lower - 1e-9
    # Plain 1F1B (vpp 1, pp > 1) has no chunk pairs to overlap: unchanged.
    base1 = dict(base, vpp=1, gbs=8192)
    assert evaluate(dsv3, H100, Layout(ep_comm_overlap=True, **base1)).step_time_s[0] == pytest.approx(
        evaluate(dsv3, H100, Layout(**base1)).step_time_s[0])


@pytest.mark.parametrize("dispatcher,grouped_gemm,synced", [("deepep", "fused", False), ("alltoall", "loop", True)])
def test_ep_overlap_pairs_each_all_to_all_with_one_computation(dispatcher, grouped_gemm, synced):
    # DeepSeek-V3 report Fig. 4 pairing, by hand from the layer times the model uses: per MoE
    # layer and micro-batch, sum over the four all-to-alls of (all-to-all - its partner)+. Where
    # the forward syncs the host before its dispatch (alltoall dispatcher, TE's per-expert loop:
    # Megatron-Core token_dispatcher.py), that dispatch has no partner (the backward MLP queued
    # before the sync runs first).
    from costmodel.moe import dense_and_moe_layer_times
    from costmodel.params import count_params

    dsv3 = get_model("deepseek-v3")
    base = dict(tp=2, pp=8, dp=64, ep=64, vpp=4, mbs=1, gbs=8192, seq_len=4096, recompute="none", precision="bf16",
                moe_dispatcher=dispatcher, moe_grouped_gemm=grouped_gemm)
    plain = evaluate(dsv3, H100, Layout(**base))
    hidden = evaluate(dsv3, H100, Layout(ep_comm_overlap=True, **base))
    batch = LayoutBatch.from_layouts([Layout(ep_comm_overlap=True, **base)])
    counts = count_params(dsv3)
    gpu = power_limited(get_gpu("h100"), H100.power_limit_watts, DEFAULT.sustained_clock_fraction)
    _, moe = dense_and_moe_layer_times(dsv3, counts, gpu, batch, DEFAULT)
    m = 8192 / 64
    # Stages 6 + 6x8 + 7 layers: stage 1 holds 8 MoE layers, the last 7 and the head with the MTP
    # module's MoE layer, whose all-to-alls count as the others' (8).
    moe_layers = {1: 8, 2: 8}
    slow_plain, slow_hidden = plain.notes["slowest_stage"][0], hidden.notes["slowest_stage"][0]
    per_mb = plain.time_terms["ep_comm"][0] / m  # 2 passes x moe layers x (dispatch + combine), BF16 both ways
    mlp_f = moe.module_forward["moe"][0]
    attn_f = moe.forward[0] - mlp_f
    mlp_b = moe.backward[0] * mlp_f / moe.forward[0]
    attn_b = moe.backward[0] - mlp_b
    one = per_mb / (2 * moe_layers[slow_plain] * 2)
    partners = (attn_f, 0.0 if synced else mlp_b, mlp_f, attn_b)
    expected = m * moe_layers[slow_hidden] * sum(max(one - x, 0.0) for x in partners)
    assert hidden.time_terms["ep_comm"][0] == pytest.approx(expected, rel=1e-6)


def test_cli_ep_overlap_needs_interleaving():
    from planner.cli.main import app

    runner = CliRunner()
    bad = runner.invoke(app, ["evaluate", "--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "h100", "--tp", "2",
                              "--pp", "4", "--ep", "8", "--ep-comm-overlap"])
    assert bad.exit_code != 0


def test_deepep_dedup_by_hand():
    # EP64 folded over 8 nodes: DeepSeek-V3's node-limited routing sends a token to at most 4
    # nodes, so DeepEP's network copies are 4 of the k = 8 (all-to-all: 8).
    from costmodel import collectives
    from costmodel.placement import group_span
    from hardware_catalog import get_interconnect

    dsv3 = get_model("deepseek-v3")
    base = dict(tp=2, pp=8, dp=64, ep=64, vpp=4, mbs=1, gbs=8192, seq_len=4096, recompute="full", precision="fp8")
    a2a = evaluate(dsv3, H100, Layout(**base)).time_terms["ep_comm"][0]
    deep = evaluate(dsv3, H100, Layout(moe_dispatcher="deepep", **base)).time_terms["ep_comm"][0]
    fabric = collectives.fabric_from_cluster(H100, get_gpu("h100"), get_interconnect(H100.nic))
    local, nodes = group_span(np.array([64]), np.array([1]), 8)
    routed = 4096 / 2 * 8 * dsv3.hidden_size * 2.0
    full, _ = collectives.collective_time("all_to_all", np.array([routed]), local, nodes, fabric)
    half, _ = collectives.collective_time("all_to_all", np.array([routed / 2]), local, nodes, fabric)
    # Under FP8, DeepEP also dispatches FP8 (1 byte + an FP32 scale per 128) and combines BF16.
    half_fp8, _ = collectives.collective_time("all_to_all", np.array([routed / 2 * (1 + 4 / 128) / 2]), local,
                                              nodes, fabric)
    assert deep / a2a == pytest.approx(float((half_fp8[0] + half[0]) / (2 * full[0])))
    # Inside one node DeepEP changes nothing (no network copies to save).
    mix = get_model("mixtral-8x7b")
    one = dict(tp=1, pp=1, dp=8, ep=8, mbs=1, gbs=8, seq_len=4096, recompute="full")
    assert _step(mix, H100, moe_dispatcher="deepep", **one) == pytest.approx(_step(mix, H100, **one))


def test_bf16_gradients_halve_gradient_memory_and_reduce_bytes():
    # Megatron-Core grad_reduce_in_fp32=False: gradient buffers of 2 B instead of 4 B per
    # parameter, and the data-parallel reduction moves half the bytes.
    kw = dict(tp=8, pp=1, dp=16, mbs=1, gbs=64, seq_len=8192, zero=1, recompute="full")
    cluster = H100
    fp32 = evaluate(LLAMA_70B, cluster, Layout(**kw))
    bf16 = evaluate(LLAMA_70B, cluster, Layout(grad_dtype="bf16", **kw))
    assert bf16.memory_gib["gradients"][0] == pytest.approx(fp32.memory_gib["gradients"][0] / 2)
    for term in ("weights", "optimizer", "activations"):
        assert bf16.memory_gib[term][0] == pytest.approx(fp32.memory_gib[term][0])
    # Less to reduce is never slower; the reduction itself (hidden + exposed) shrinks.
    assert bf16.step_time_s[0] <= fp32.step_time_s[0]
    dp_total = lambda r: r.time_terms["dp_comm"][0] + r.overlapped_terms["dp_comm"][0]
    assert dp_total(bf16) < dp_total(fp32)


def test_grad_dtype_round_trip_cli_and_bad_value():
    from planner.cli.main import app

    back = LayoutBatch.from_layouts([Layout(dp=8, grad_dtype="bf16")]).layout(0)
    assert back.grad_dtype == "bf16"
    with pytest.raises(PlannerInputError, match="--grad-dtype=fp16: allowed fp32, bf16"):
        check_implementation({"grad_dtype": "fp16"})
    runner = CliRunner()
    ok = runner.invoke(app, ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--grad-dtype", "bf16",
                             "--tp", "2"])
    assert ok.exit_code == 0, ok.output
    assert "bf16-grads" in ok.output
    # The console entry point turns the error into one line and exit 2.
    import subprocess
    import sys

    bad = subprocess.run([sys.executable, "-m", "planner", "evaluate", "--model", "llama3-8b", "--gpus", "8",
                          "--gpu", "h100", "--grad-dtype", "fp16"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip() == "error: --grad-dtype=fp16: allowed fp32, bf16"


def test_validate_nemo_fp8_rows_reduce_gradients_in_bf16():
    # NeMo's FP8 recipes set grad_sync_dtype bf16 (NeMo 1 launcher) / grad_reduce_in_fp32=False
    # (NeMo 2, Megatron-Bridge performance scripts).
    from planner.validate import load_runs, map_run

    rows = {r["id"]: r for r in load_runs(None)}
    assert map_run(rows["nemo2407_h100_fp8_nemotron_340b_128gpu"]).pins["grad_dtype"] == "bf16"
    assert "grad_dtype" not in map_run(rows["torchtitan_h100_8b_fsdp_8gpu"]).pins  # FSDP2 reduces in fp32


def test_validate_nemotron_340b_fp8_runs_without_recompute():
    # Nemotron-4 340B on 128 GPUs runs without recompute (NeMo launcher 24.07 nemotron_340b.yaml: no
    # checkpointing) with BF16 gradients and, as that recipe's optim.dtype bf16 keeps them, BF16
    # Adam moments and no FP32 master; the FP8 weight cache of its BF16 parameters is counted.
    from planner.validate import load_runs, map_run, predict_run

    rows = {r["id"]: r for r in load_runs(None)}
    run = map_run(rows["nemo2407_h100_fp8_nemotron_340b_128gpu"])
    assert run.searched["optimizer_states"] == ["fp32", "bf16"]
    res = predict_run(run)
    assert res.chosen["recompute"] == "none"
    assert abs(res.error) < 0.10


def test_blocking_zero3_by_hand():
    from costmodel.collectives import Fabric, LinkLevel, collective_time
    from costmodel.zero3_blocking import backward_regather_fraction, blocking_zero3_time, parameter_tensors_per_layer
    from hardware_catalog import get_model

    # 1e9 elements stay live between recompute and backward: a 2e9-element layer gathers half again.
    assert backward_regather_fraction(2e9) == pytest.approx(0.5)
    assert backward_regather_fraction(5e8) == 0.0
    # GPT-3: 4 weights, 4 biases, 2 LayerNorms with scale and shift; Llama: 4 weights, 2 RMSNorm scales.
    assert parameter_tensors_per_layer(get_model("gpt3-175b")) == 12
    assert parameter_tensors_per_layer(LLAMA_8B) == 6
    # One 8-GPU switched domain: ring AG / RS = 7 a + 7/8 S / B (collectives.py).
    level = LinkLevel(bandwidth=100e9, latency=2e-6, topology="switch")
    fabric = Fabric(intra=level, inter=level, domain_size=8)
    params, layers, op, hbm = 8e9, 4, 10e-6, 1e12  # 2e9 elements a layer, 16 weights
    # + per rank: DeepSpeed's narrow and PyTorch's copy for the all-gather, view, narrow and copy
    # for the reduce-scatter, each a host operation; and one pass of the buffer through HBM
    # (read + write) for the copies.
    ag = 7 * 2e-6 + 7 / 8 * (2.0 * params / 16) / 100e9 + 2 * 8 * op + 2 * (2.0 * params / 16) / hbm
    rs = 7 * 2e-6 + 7 / 8 * (4.0 * params / 16) / 100e9 + 3 * 8 * op + 2 * (4.0 * params / 16) / hbm
    small = 7 * 2e-6 + 3 * 8 * op  # a bias or norm: latency and the per-rank operations
    assert collective_time("all_gather", 2.0 * params / 16, 8, 1, fabric)[0] == pytest.approx(
        7 * 2e-6 + 7 / 8 * (2.0 * params / 16) / 100e9)
    args = (2.0, 4.0, 8, 1, fabric, op, hbm, 12)  # 12 tensors a layer: 8 small ones each
    no_recompute = blocking_zero3_time(params, layers, 3, False, *args)
    assert no_recompute == pytest.approx(3 * (2 * 16 * ag + 16 * rs + 32 * small))  # forward + backward gathers
    full = blocking_zero3_time(params, layers, 3, True, *args)
    assert full == pytest.approx(3 * (2.5 * 16 * ag + 16 * rs + 32 * small))  # + recompute, half again for backward
    assert blocking_zero3_time(params, layers, 3, True, 2.0, 4.0, 1, 1, fabric, op, hbm) == 0.0  # one rank


def test_blocking_zero3_hides_nothing_and_is_never_faster():
    # Early DeepSpeed ZeRO-3 synchronises before every per-tensor gather: all of the gather
    # and reduce-scatter time is on the critical path, in 4x as many gathers, each with per-rank copies.
    kw = dict(tp=1, pp=1, dp=64, mbs=1, gbs=64, seq_len=4096, zero=3, recompute="full")
    pre = evaluate(LLAMA_8B, H100, Layout(**kw))
    blk = evaluate(LLAMA_8B, H100, Layout(zero3_gather="blocking", **kw))
    # (overlapped_terms["dp_comm"] holds the hidden data-parallel and ZeRO-3 traffic)
    assert blk.overlapped_terms["dp_comm"][0] == pytest.approx(0.0, abs=1e-12)
    assert blk.time_terms["comm_contention"][0] == pytest.approx(0.0, abs=1e-12)
    assert pre.overlapped_terms["dp_comm"][0] > 0.0
    assert blk.step_time_s[0] > pre.step_time_s[0]
    exposed_total = pre.time_terms["zero3_comm"][0] + pre.overlapped_terms["dp_comm"][0]
    assert blk.time_terms["zero3_comm"][0] > exposed_total  # more pieces: more latency
    # Not ZeRO-3: the setting changes nothing.
    z1 = dict(kw, zero=1)
    assert evaluate(LLAMA_8B, H100, Layout(zero3_gather="blocking", **z1)).step_time_s[0] == pytest.approx(
        evaluate(LLAMA_8B, H100, Layout(**z1)).step_time_s[0])


def test_fsdp_backward_post_exposes_one_gather_per_unit_and_micro_batch():
    # FSDP1's BACKWARD_POST (Composer's default) issues each backward all-gather only after the
    # previous unit's gradients: it hides behind no compute. Llama 3 8B on one 8-GPU H100 node,
    # compute-bound, so prefetched gathers hide entirely; with post every micro-batch pays the
    # stage's weights gathered once more, at least 7/8 x 2 B x 8.03e9 over NVLink's 450 GB/s a
    # direction = 31.2 ms (more with the link's efficiency and 32 units' ring latencies).
    exposed = []
    for ga in (1, 2):
        kw = dict(tp=1, pp=1, dp=8, mbs=1, gbs=8 * ga, seq_len=4096, zero=3, recompute="full")
        pre = evaluate(LLAMA_8B, H100, Layout(**kw))
        post = evaluate(LLAMA_8B, H100, Layout(zero3_gather="post", **kw))
        assert pre.time_terms["zero3_comm"][0] == pytest.approx(0.0, abs=1e-12)
        assert post.step_time_s[0] > pre.step_time_s[0]
        exposed.append(post.time_terms["zero3_comm"][0])
    line_rate = 7 / 8 * 2.0 * 8.03e9 / 450e9
    assert line_rate < exposed[0] < 1.5 * line_rate
    assert exposed[1] == pytest.approx(2 * exposed[0])  # one gather per unit and micro-batch


def test_validate_deepspeed_2021_rows_use_blocking_gathers():
    from planner.validate import load_runs, map_run

    rows = {r["id"]: r for r in load_runs(None)}
    assert map_run(rows["megatron2021_t2_zero3_174p6b_768gpu"]).pins["zero3_gather"] == "blocking"
    # Composer's FSDP1 prefetches its backward gathers only after each unit's gradients (BACKWARD_POST).
    assert map_run(rows["mpt_7b_h100_80gb_8gpu_seq2048"]).pins["zero3_gather"] == "post"
    assert "zero3_gather" not in map_run(rows["torchtitan_h100_8b_fsdp_8gpu"]).pins  # FSDP2 prefetches
