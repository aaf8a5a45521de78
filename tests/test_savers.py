"""The savers users have (issue 24 item 6): FP8 scaling recipes (costmodel.quantize), CUDA graphs
(costmodel.compute), CPU activation offload (costmodel.offload), FSDP2's copy-out
(costmodel.data_parallel). Expected values derived by hand from the mechanisms' sources."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import offload, quantize
from costmodel.calibration import DEFAULT
from costmodel.compute import CUDA_GRAPH_SAVING_US
from costmodel.layout import Layout
from costmodel.params import count_params
from costmodel.step import evaluate
from hardware_catalog import get_cluster, get_gpu, get_model
from search.rules import RuleContext, check_rules


def _broken(layout, ctx):
    return [name for name, ok in check_rules(ctx, layout).items() if not bool(np.asarray(ok).ravel()[0])]

LLAMA = "llama3-8b"  # h 4096, 32 heads of 128 (8 KV), F 14336, 32 layers
BASE = dict(tp=1, pp=1, dp=8, mbs=1, seq_len=4096, gbs=16, recompute="none", zero=1)  # m = 2 micro-batches


def _compute(cluster, **kw):
    return float(evaluate(get_model(LLAMA), get_cluster(cluster), Layout(**{**BASE, **kw})).time_terms["compute"][0])


@pytest.mark.parametrize("recipe, cluster, extra_bytes", [
    ("current", "dgx-h100", 2.0),        # a second read of the BF16 tensor for its amax
    ("blockwise", "dgx-h100", 2 * 4 / 128),  # an FP32 scale per 128 elements, row- and column-wise copies
    ("mxfp8", "dgx-b200", 2 * 1 / 32),   # an E8M0 scale per 32 elements, both copies
    # NVFP4: an amax read (2 B) and a fused cast reading 2 B, writing two 4-bit copies with an E4M3 scale
    # per 16 (2 x 0.5625 B): 5.125 against delayed's 3.
    ("nvfp4", "dgx-b200", 2 + 2 * 0.5625 - 1),
])
def test_fp8_recipe_costs_its_extra_quantise_bytes(recipe, cluster, extra_bytes, monkeypatch):
    # FP8 GEMM inputs per token per layer: QKV h + output projection a·d_v + MLP up h + down F
    # = 4096 + 4096 + 4096 + 14336 = 26,624 elements; forward + backward (gradients, 2x) = 3 passes,
    # 32 layers, 2 micro-batches of 4096 tokens, at the memory-bound efficiency of HBM.
    assert quantize.quantised_elements_per_token(get_model(LLAMA), False) == 26_624
    hbm = get_gpu(get_cluster(cluster).gpu).memory_bandwidth_gbps * 1e9 * DEFAULT.memory_bound_efficiency
    expected = 3 * 32 * 2 * 4096 * extra_bytes * 26_624 / hbm
    from costmodel import compute
    monkeypatch.setattr(compute, "NVFP4_GEMM_SPEEDUP", 1.0)  # the GEMMs at the FP8 rate: only the casts differ
    monkeypatch.setattr(compute, "NVFP4_OPERAND_BYTES", 1.0)
    diff = _compute(cluster, precision="fp8", fp8_recipe=recipe) - _compute(cluster, precision="fp8")
    assert diff == pytest.approx(expected, rel=1e-6)
    # No cost without FP8.
    assert _compute(cluster, fp8_recipe=recipe) == pytest.approx(_compute(cluster))


def test_block_scaling_needs_blackwell_tensor_cores():
    model = get_model(LLAMA)
    layout = Layout(**{**BASE, "precision": "fp8", "fp8_recipe": "mxfp8"})
    hopper = RuleContext.build(model, 8, get_cluster("dgx-h100"), get_gpu("h100"))
    blackwell = RuleContext.build(model, 8, get_cluster("dgx-b300"), get_gpu("b300"))
    assert "block_scaling_needs_blackwell" in _broken(layout, hopper)
    assert "block_scaling_needs_blackwell" not in _broken(layout, blackwell)


def test_cuda_graphs_save_the_per_kernel_gap():
    # 30 kernels a layer forward, 60 backward (Calibration.kernels_per_layer), 0.4 us each
    # (NVIDIA CUDA Graphs blog: 3.8 -> 3.4 us per dependent kernel), 32 layers, 2 micro-batches.
    expected = 2 * 32 * (30 + 60) * CUDA_GRAPH_SAVING_US * 1e-6
    assert _compute("dgx-h100") - _compute("dgx-h100", cuda_graphs=True) == pytest.approx(expected, rel=1e-6)


def test_offload_copy_exposure_and_kept_share_by_hand():
    # A 570 MB layer over PCIe Gen5 (64 GB/s): 8.9 ms; behind a 3 ms forward and a 6 ms backward
    # 5.9 ms and 2.9 ms stay exposed; behind a 10 ms backward nothing.
    copy = 570e6 / 64e9
    fwd, bwd = offload.copy_exposure(copy, np.array([3e-3]), np.array([6e-3]))
    assert fwd[0] == pytest.approx(copy - 3e-3) and bwd[0] == pytest.approx(copy - 6e-3)
    assert offload.copy_exposure(copy, np.array([10e-3]), np.array([10e-3]))[1][0] == 0.0
    assert get_gpu("h100").host_bandwidth_gbps == 64.0  # PCIe Gen5 x16, per direction
    assert get_gpu("gb200").host_bandwidth_gbps == 256.0  # C2C 450, Grace LPDDR5X 511 GB/s shared by 2 GPUs


def test_offload_moves_activations_to_the_host_and_costs_time_over_pcie():
    model, cluster = get_model(LLAMA), get_cluster("dgx-h100")
    plain = evaluate(model, cluster, Layout(**BASE))
    half = evaluate(model, cluster, Layout(**BASE, cpu_offload_layers=16))
    # 16 of 32 layers offloaded, one of them in flight: 17/32 of the activations stay.
    assert half.memory_gib["activations"][0] == pytest.approx(plain.memory_gib["activations"][0] * 17 / 32, rel=1e-6)
    # BF16 Llama-3 8B keeps 8h + 2(a+2g)d + 2a·d + 6F = 139,264 bytes a token a layer
    # (costmodel.memory): 570 MB a layer over 64 GB/s = 8.9 ms, longer than the layer's compute.
    assert half.step_time_s[0] > plain.step_time_s[0]
    # Over Grace's C2C the same copies hide behind compute far better.
    gb = get_cluster("gb200-nvl72")
    slow = half.step_time_s[0] / plain.step_time_s[0]
    fast = (evaluate(model, gb, Layout(**BASE, cpu_offload_layers=16)).step_time_s[0]
            / evaluate(model, gb, Layout(**BASE)).step_time_s[0])
    assert 1.0 <= fast < slow


def test_offload_refused_under_pipeline_parallelism():
    ctx = RuleContext.build(get_model(LLAMA), 8, get_cluster("dgx-h100"), get_gpu("h100"))
    bad = Layout(**{**BASE, "pp": 2, "dp": 4, "cpu_offload_layers": 4})
    assert "cpu_offload_layers_valid" in _broken(bad, ctx)


def test_fsdp2_copy_out_by_hand():
    # ZeRO-3 over 8 GPUs, 2 micro-batches: 4 gathers a step (forward and backward each), each
    # copied out of the flat buffer: read + write 2 bytes a parameter of the whole model.
    model, cluster = get_model(LLAMA), get_cluster("dgx-h100")
    layout = dict(BASE, zero=3)
    flat = evaluate(model, cluster, Layout(**layout))
    fsdp2 = evaluate(model, cluster, Layout(**layout, fsdp="fsdp2"))
    megatron = evaluate(model, cluster, Layout(**layout, fsdp="megatron"))
    hbm = 3350e9 * DEFAULT.memory_bound_efficiency
    expected = 4 * 4.0 * count_params(model).total / hbm
    assert fsdp2.time_terms["zero3_comm"][0] - flat.time_terms["zero3_comm"][0] == pytest.approx(expected, rel=1e-6)
    assert megatron.step_time_s[0] == pytest.approx(flat.step_time_s[0])
    # Not ZeRO-3: nothing to copy.
    z1 = evaluate(model, cluster, Layout(**BASE, fsdp="fsdp2"))
    assert z1.step_time_s[0] == pytest.approx(evaluate(model, cluster, Layout(**BASE)).step_time_s[0])


def test_nvfp4_gemms_run_at_the_measured_speedup_over_fp8():
    # TE gemm_profiling (B300): NVFP4 1.90x MXFP8 on a layer's GEMMs. B200: FP4 9 PFLOP/s, FP8 4.5,
    # so the cap 2.0 leaves 1.9; B300: 13.5 / 4.5 = 3 leaves 1.9; H100 has no FP4 tensor cores: 1.
    from costmodel.compute import nvfp4_speedup
    assert nvfp4_speedup(get_gpu("b200")) == pytest.approx(1.9)
    assert nvfp4_speedup(get_gpu("b300")) == pytest.approx(1.9)
    assert nvfp4_speedup(get_gpu("h100")) == 1.0
    # The clock derate keeps the ratio (both peaks scale together).
    from costmodel.compute import power_limited
    derated = power_limited(get_gpu("b200"), None, sustained_clock=0.86)
    assert derated.fp4_tflops / derated.fp8_tflops == pytest.approx(2.0)


def test_nvfp4_is_faster_than_fp8_and_slower_than_its_gemm_ratio():
    # The linear layers' GEMMs 1.9x faster, the casts dearer (+2.125 B/element), attention and
    # everything else unchanged: compute falls, by less than 1 - 1/1.9.
    fp8 = _compute("dgx-b200", precision="fp8", fp8_recipe="mxfp8")
    fp4 = _compute("dgx-b200", precision="fp8", fp8_recipe="nvfp4")
    assert fp4 < fp8 and fp4 > fp8 / 1.9
    model = get_model(LLAMA)
    hopper = RuleContext.build(model, 8, get_cluster("dgx-h100"), get_gpu("h100"))
    assert "block_scaling_needs_blackwell" in _broken(Layout(**{**BASE, "precision": "fp8", "fp8_recipe": "nvfp4"}),
                                                      hopper)
