"""The per-micro-batch gradient accumulation pass (costmodel.grad_accumulation), by hand.

Llama 3 8B (h 4096, 32 layers, 8 KV heads of 128, FFN 14336, vocabulary 128256, untied head) holds
per layer 4096 x (4096 + 1024 + 1024 + 4096) attention + 3 x 4096 x 14336 MLP + 2 x 4096 norm weights
= 41,943,040 + 176,160,768 + 8,192 = 218,112,000; 32 layers 6,979,584,000; embedding and head
2 x 128256 x 4096 = 1,050,673,152; final norm 4,096: 8,030,261,248 parameters.
An H100 SXM streams 3.35 TB/s (datasheet) at 0.80 of it for memory-bound kernels (Calibration).
"""

from __future__ import annotations

import pytest

from costmodel import evaluate
from costmodel.calibration import DEFAULT
from costmodel.options import Layout
from hardware_catalog import get_cluster, get_model

H100 = get_cluster("dgx-h100")
LLAMA_8B = get_model("llama3-8b")
PARAMS_8B = 32 * (4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336 + 2 * 4096) + 2 * 128256 * 4096 + 4096
BANDWIDTH = 3350e9 * DEFAULT.memory_bound_efficiency
M = 8  # micro-batches per step: gbs 8 of mbs 1 on one data-parallel rank


def _terms(dp=1, **layout):
    out = evaluate(LLAMA_8B, H100, Layout(tp=1, pp=1, dp=dp, mbs=1, gbs=M * dp, seq_len=4096, **layout))
    return float(out.step_time_s[0]), {k: float(v[0]) for k, v in out.time_terms.items()}


def test_param_count_is_the_hand_count():
    assert PARAMS_8B == 8_030_261_248


def test_cast_add_streams_26_bytes_per_gradient_every_micro_batch():
    # DeepSpeed's BF16_Optimizer: clear_lp_grads zeroes the BF16 gradient (write 2), autograd adds into it
    # (read 2 + 2, write 2), update_hp_grads casts (read 2, write 4) and adds (read 4 + 4, write 4): 26 B,
    # m times.
    fused, _ = _terms()
    cast, _ = _terms(grad_accum_pass="cast_add")
    assert cast - fused == pytest.approx(M * 26 * PARAMS_8B / BANDWIDTH, rel=1e-9)  # 0.62 s


def test_autograd_adds_6_bytes_from_the_second_micro_batch():
    # AccumulateGrad's grad += new on BF16: read 2 + 2, write 2; the first micro-batch assigns.
    fused, _ = _terms()
    auto, _ = _terms(grad_accum_pass="autograd")
    assert auto - fused == pytest.approx((M - 1) * 6 * PARAMS_8B / BANDWIDTH, rel=1e-9)
    single = evaluate(LLAMA_8B, H100, Layout(tp=1, dp=1, mbs=1, gbs=1, seq_len=4096, grad_accum_pass="autograd"))
    plain = evaluate(LLAMA_8B, H100, Layout(tp=1, dp=1, mbs=1, gbs=1, seq_len=4096))
    assert float(single.step_time_s[0]) == pytest.approx(float(plain.step_time_s[0]), rel=1e-12)  # nothing to add


def test_zero2_accumulates_one_shard_and_a_pipelined_fsdp2_stage_all_of_it():
    # ZeRO >= 2 shards the gradients over dp (Rajbhandari et al. 2020, Sec. 5.2): 1/8 of the pass on dp 8.
    # Compared on the compute term, which the pass lengthens, so the data-parallel overlap plays no part.
    z1 = _terms(dp=8, zero=1, grad_accum_pass="cast_add")[1]["compute"] - _terms(dp=8, zero=1)[1]["compute"]
    z2 = _terms(dp=8, zero=2, grad_accum_pass="cast_add")[1]["compute"] - _terms(dp=8, zero=2)[1]["compute"]
    assert z1 == pytest.approx(M * 26 * PARAMS_8B / BANDWIDTH, rel=1e-9)
    assert z2 == pytest.approx(z1 / 8, rel=1e-9)

    # Under a pipeline FSDP2 keeps a stage's gradients unsharded until its last micro-batch (torch
    # pipelining backward_maybe_with_nosync): ZeRO-3 at pp 2 accumulates every gradient, as ZeRO-1 at pp 2
    # does, but adds the BF16 gradient into an FP32 copy (read 2 + 4, write 4 = 10 B, not autograd's 6).
    def stage_pass(zero):
        lay = dict(tp=1, pp=2, dp=4, mbs=1, gbs=32, seq_len=4096, zero=zero, fsdp="fsdp2")
        on = evaluate(LLAMA_8B, H100, Layout(**lay, grad_accum_pass="autograd")).time_terms["compute"][0]
        off = evaluate(LLAMA_8B, H100, Layout(**lay)).time_terms["compute"][0]
        return float(on - off)

    assert stage_pass(3) == pytest.approx(stage_pass(1) * 10 / 6, rel=1e-9) and stage_pass(1) > 0


def test_the_pass_never_speeds_a_step_and_grows_with_micro_batches():
    for layout in (dict(), dict(dp=2, zero=3), dict(dp=2, zero=1)):
        fused = _terms(**layout)[0]
        auto = _terms(grad_accum_pass="autograd", **layout)[0]
        cast = _terms(grad_accum_pass="cast_add", **layout)[0]
        assert fused <= auto <= cast
    few = evaluate(LLAMA_8B, H100, Layout(dp=1, mbs=2, gbs=8, seq_len=4096, grad_accum_pass="cast_add"))
    many = evaluate(LLAMA_8B, H100, Layout(dp=1, mbs=1, gbs=8, seq_len=4096, grad_accum_pass="cast_add"))
    few0 = evaluate(LLAMA_8B, H100, Layout(dp=1, mbs=2, gbs=8, seq_len=4096))
    many0 = evaluate(LLAMA_8B, H100, Layout(dp=1, mbs=1, gbs=8, seq_len=4096))
    assert float(many.step_time_s[0] - many0.step_time_s[0]) == pytest.approx(
        2 * float(few.step_time_s[0] - few0.step_time_s[0]), rel=1e-9)  # 8 passes against 4


# ------------------------------------------------------------- the framework tables and profiles


def _refusal(fmt, tmp_path, **layout):
    from test_export import LLAMA3_8B, export, record

    from hardware_catalog.errors import PlannerInputError

    with pytest.raises(PlannerInputError) as err:
        export(record(LLAMA3_8B, tp=2, dp=4, gbs=64, **layout), LLAMA3_8B, tmp_path, formats=fmt)
    return str(err.value)


def test_each_framework_refuses_the_passes_it_does_not_run(tmp_path):
    # Megatron adds into main_grad inside the wgrad GEMM; DeepSpeed and torchtitan have no such fusion;
    # DeepSpeed's FP32 accumulation below ZeRO-2 is the BF16_Optimizer's cast-and-add.
    assert "megatron_grad_accum_pass" in _refusal("megatron", tmp_path / "m", grad_accum_pass="autograd")
    assert "deepspeed_grad_accum_pass" in _refusal("deepspeed", tmp_path / "d")
    assert "deepspeed_grad_accum_cast" in _refusal("deepspeed", tmp_path / "c", grad_accum_pass="cast_add",
                                                   grad_dtype="bf16")
    assert "deepspeed_grad_accum_bf16_optimizer" in _refusal("deepspeed", tmp_path / "a", grad_accum_pass="autograd")
    assert "torchtitan_grad_accum_pass" in _refusal("torchtitan", tmp_path / "t", zero=3, fsdp="fsdp2", loss="eager",
                                                    recompute="full")


def test_deepspeed_reads_the_pass_from_its_accumulation_dtype(tmp_path):
    from test_export import LLAMA3_8B, export, record

    from planner.launch import read_launch

    export(record(LLAMA3_8B, tp=2, dp=4, gbs=64, grad_accum_pass="cast_add", grad_reduce="all_reduce"), LLAMA3_8B, tmp_path / "f",
           formats="deepspeed")
    assert read_launch(tmp_path / "f" / "deepspeed_config.json", model=LLAMA3_8B).values["grad_accum_pass"] == "cast_add"
    export(record(LLAMA3_8B, tp=2, dp=4, gbs=64, grad_dtype="bf16", grad_accum_pass="autograd"), LLAMA3_8B,
           tmp_path / "b", formats="deepspeed")
    assert read_launch(tmp_path / "b" / "deepspeed_config.json", model=LLAMA3_8B).values["grad_accum_pass"] == "autograd"


def test_validate_prices_bloom_and_neox_as_deepspeed_ran_them():
    from planner.validate.runs import load_runs, map_run

    rows = {r["id"]: r for r in load_runs(None)}
    bloom = map_run(rows["bloom_176b_384gpu"])  # BF16_Optimizer (tr11 'Deepspeed config')
    neox = map_run(rows["gpt_neox_20b_96gpu"])  # DeepSpeed fp16, ZeRO-1
    assert bloom.pins["grad_accum_pass"] == "cast_add" and neox.pins["grad_accum_pass"] == "autograd"
    assert any("BF16_Optimizer" in a and "added into FP32" in a for a in bloom.assumptions)


def test_deepspeed_runs_the_bf16_optimizer_at_zero_1_only_and_one_micro_batch_is_moot(tmp_path):
    # runtime/engine.py _do_optimizer_sanity_check: BFLOAT16 (the BF16_Optimizer) for a BF16 model with FP32
    # accumulation at ZeRO stage 1 only; ZeRO 2-3 add the reduced partitions themselves (autograd's price).
    from test_export import LLAMA3_8B, export, record

    from planner.launch import read_launch

    assert "deepspeed_grad_accum_cast" in _refusal("deepspeed", tmp_path / "z2", zero=2, grad_accum_pass="cast_add")
    export(record(LLAMA3_8B, dp=8, gbs=64, zero=2, grad_accum_pass="autograd"), LLAMA3_8B, tmp_path / "a",
           formats="deepspeed")
    back = read_launch(tmp_path / "a" / "deepspeed_config.json", model=LLAMA3_8B)
    assert back.values["zero"] == 2 and back.values["grad_accum_pass"] == "autograd"
    # One micro-batch a step (gbs = dp x mbs): autograd adds nothing, so Megatron's fused plan is DeepSpeed's
    # with 16-bit gradients, and torchtitan's; not under the BF16_Optimizer, which passes once a step anyway.
    export(record(LLAMA3_8B, dp=8, gbs=8, grad_dtype="bf16"), LLAMA3_8B, tmp_path / "m1", formats="deepspeed")
    export(record(LLAMA3_8B, tp=2, dp=4, gbs=4, zero=3, fsdp="fsdp2", loss="eager", recompute="full"), LLAMA3_8B,
           tmp_path / "t1", formats="torchtitan")
    from hardware_catalog.errors import PlannerInputError

    with pytest.raises(PlannerInputError, match="deepspeed_grad_accum_pass"):
        export(record(LLAMA3_8B, dp=8, gbs=8), LLAMA3_8B, tmp_path / "b1", formats="deepspeed")


# ------------------------------------------------------------- Megatron ZeRO-2/3 (Megatron-FSDP, FSDP2)


def test_main_grad_copy_streams_the_whole_gradient_every_micro_batch():
    # Megatron-FSDP without gradient accumulation fusion (megatron_fsdp.py _grad_acc:
    # param.main_grad.copy_(param.grad)): read the BF16 gradient (2 B), write it into the reduce-scatter
    # bucket in the priced grad dtype (FP32: 4 B), 6 B on every held gradient, unsharded (the copy comes
    # before the reduce-scatter), on all M = 8 micro-batches including the first:
    # 8 x 6 x 8,030,261,248 / (3.35e12 x memory_bound_efficiency) on ZeRO-3 over dp 8, the same on ZeRO-2.
    for zero in (2, 3):
        lay = dict(dp=8, zero=zero, fsdp="megatron")
        fused = _terms(**lay)[1]["compute"]
        copy = _terms(grad_accum_pass="main_grad_copy", **lay)[1]["compute"]
        assert copy - fused == pytest.approx(M * 6 * PARAMS_8B / BANDWIDTH, rel=1e-9)
    # BF16 buckets (grad_dtype bf16): 2 + 2 = 4 B. One micro-batch a step still copies once: 6 B x params.
    fused = _terms(dp=8, zero=3, fsdp="megatron", grad_dtype="bf16")[1]["compute"]
    copy = _terms(dp=8, zero=3, fsdp="megatron", grad_dtype="bf16", grad_accum_pass="main_grad_copy")[1]["compute"]
    assert copy - fused == pytest.approx(M * 4 * PARAMS_8B / BANDWIDTH, rel=1e-9)
    one = evaluate(LLAMA_8B, H100, Layout(tp=1, dp=8, mbs=1, gbs=8, seq_len=4096, zero=3, fsdp="megatron",
                                          grad_accum_pass="main_grad_copy")).time_terms["compute"][0]
    one0 = evaluate(LLAMA_8B, H100, Layout(tp=1, dp=8, mbs=1, gbs=8, seq_len=4096, zero=3,
                                           fsdp="megatron")).time_terms["compute"][0]
    assert float(one - one0) == pytest.approx(6 * PARAMS_8B / BANDWIDTH, rel=1e-9)  # 0.018 s at 0.8


def test_megatron_refuses_passes_its_zero_rows_do_not_run(tmp_path):
    # Below ZeRO-2 the wgrad GEMM accumulates (fused); Megatron-FSDP ZeRO-2/3 copy (main_grad_copy); FSDP2
    # ZeRO-3 adds its shards (autograd).
    assert "megatron_grad_accum_pass" in _refusal("megatron", tmp_path / "z1", zero=1, grad_accum_pass="autograd")
    assert "megatron_grad_accum_pass" in _refusal("megatron", tmp_path / "z1c", zero=1,
                                                  grad_accum_pass="main_grad_copy")
    assert "megatron_grad_accum_pass" in _refusal("megatron", tmp_path / "z3", zero=3, fsdp="megatron",
                                                  grad_accum_pass="fused")
    assert "megatron_grad_accum_pass" in _refusal("megatron", tmp_path / "z2", zero=2, grad_accum_pass="autograd")
    assert "megatron_grad_accum_pass" in _refusal("megatron", tmp_path / "f2", zero=3, fsdp="fsdp2",
                                                  grad_accum_pass="main_grad_copy")
    assert "megatron_grad_accum_pass" in _refusal("megatron", tmp_path / "f2f", zero=3, fsdp="fsdp2",
                                                  grad_accum_pass="fused")


@pytest.mark.parametrize("fsdp, release, value", [("megatron", "", "main_grad_copy"),
                                                  ("megatron", "core_v0.13.0", "main_grad_copy"),
                                                  ("fsdp2", "", "autograd")])
def test_megatron_zero3_exports_and_reads_back_its_pass(tmp_path, fsdp, release, value):
    # tp 2 x dp 4, gbs 64 of mbs 1: 16 micro-batches a step.
    from test_export import LLAMA3_8B, export, record

    from planner.launch import read_launch

    kw = {"options": {"megatron_release": release}} if release else {}
    export(record(LLAMA3_8B, tp=2, dp=4, gbs=64, zero=3, fsdp=fsdp, grad_accum_pass=value), LLAMA3_8B, tmp_path,
           formats="megatron", **kw)
    text = (tmp_path / "megatron_args.sh").read_text()
    assert "--no-gradient-accumulation-fusion" in text
    back = read_launch(tmp_path / "megatron_args.sh", model=LLAMA3_8B)
    assert (back.values["zero"], back.values["fsdp"], back.values["grad_accum_pass"]) == (3, fsdp, value)


def test_a_search_without_framework_prices_megatron_zero2_3_as_they_run():
    # search.rules.sharded_grad_accum_pass: the fused default becomes the pass Megatron runs at ZeRO >= 2.
    from search.rules import sharded_grad_accum_pass_name as name

    assert name(1, "flat", "fused") == "fused"
    assert name(2, "flat", "fused") == "main_grad_copy"
    assert name(3, "megatron", "fused") == "main_grad_copy"
    assert name(3, "fsdp2", "fused") == "autograd"
    # Flat-parameter ZeRO-3 is DeepSpeed's or FSDP1's (Megatron has none: megatron_fsdp_flat); both add
    # each micro-batch's reduced gradient into their shard.
    assert name(3, "flat", "fused") == "autograd"
    assert name(2, "flat", "cast_add") == "cast_add"  # what a profile pins stays


def test_zero1_gradient_all_reduce_moves_twice_a_reduce_scatter():
    """grad_reduce (costmodel.data_parallel.traffic). Llama 3 8B on one DGX H100 (dp 8 over NVLink),
    ZeRO-1, BF16 gradients, nothing overlapped: a step reduce-scatters S = 2 B x params and all-gathers
    the same 2 B x params of weights, each (n-1) alpha + (n-1)/n S/B on the ring (or the recursive
    halving's fewer latencies), so both cost X. An all-reduce of the same gradient (DeepSpeed's
    BF16_Optimizer) is a reduce-scatter then an all-gather, 2X: the exposed DP time goes from 2X to 3X.
    All-reduced in FP32 (Aleph Alpha's allreduce_tensor_in_float32) it moves 4 B an element, what
    all_reduce moves for FP32 gradients."""
    def dp_comm(**kw):
        return _terms(dp=8, zero=1, dp_comm_overlap=False, **kw)[1]["dp_comm"]

    rs = dp_comm(grad_dtype="bf16")
    assert dp_comm(grad_dtype="bf16", grad_reduce="all_reduce") == pytest.approx(1.5 * rs, rel=1e-3)
    assert dp_comm(grad_dtype="bf16", grad_reduce="all_reduce_fp32") == pytest.approx(
        dp_comm(grad_dtype="fp32", grad_reduce="all_reduce"), rel=1e-9)
    assert dp_comm(grad_dtype="bf16", grad_reduce="all_reduce_fp32") > dp_comm(grad_dtype="bf16", grad_reduce="all_reduce")
