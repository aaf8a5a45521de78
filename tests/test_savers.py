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
])
def test_fp8_recipe_costs_its_extra_quantise_bytes(recipe, cluster, extra_bytes):
    # FP8 GEMM inputs per token per layer: QKV h + output projection a·d_v + MLP up h + down F
    # = 4096 + 4096 + 4096 + 14336 = 26,624 elements; forward + backward (gradients, 2x) = 3 passes,
    # 32 layers, 2 micro-batches of 4096 tokens, at the memory-bound efficiency of HBM.
    assert quantize.quantised_elements_per_token(get_model(LLAMA), False) == 26_624
    hbm = get_gpu(get_cluster(cluster).gpu).memory_bandwidth_gbps * 1e9 * DEFAULT.memory_bound_efficiency
    expected = 3 * 32 * 2 * 4096 * extra_bytes * 26_624 / hbm
    diff = _compute(cluster, precision="fp8", fp8_recipe=recipe) - _compute(cluster, precision="fp8")
    assert diff == pytest.approx(expected, rel=1e-6)
    # No cost without FP8.
    assert _compute(cluster, fp8_recipe=recipe) == pytest.approx(_compute(cluster))


def test_mxfp8_needs_blackwell_tensor_cores():
    model = get_model(LLAMA)
    layout = Layout(**{**BASE, "precision": "fp8", "fp8_recipe": "mxfp8"})
    hopper = RuleContext.build(model, 8, get_cluster("dgx-h100"), get_gpu("h100"))
    blackwell = RuleContext.build(model, 8, get_cluster("dgx-b300"), get_gpu("b300"))
    assert "mxfp8_needs_blackwell" in _broken(layout, hopper)
    assert "mxfp8_needs_blackwell" not in _broken(layout, blackwell)


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
