"""What a --framework release's Megatron-Core refuses or needs that main (the table's target) does
not: each case is a file planner wrote that stopped in that release's validate_args,
TransformerConfig or parallel_state (Megatron-LM at the release's tag, cited per test)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from planner.cli.main import app


def export(tmp_path, *args: str):
    res = CliRunner().invoke(app, ["export", "--out", str(tmp_path / "out"), *args])
    return res.exit_code, res.output


def refused(tmp_path, rule: str, *args: str) -> None:
    code, out = export(tmp_path, *args)
    assert code == 2 and f"rule {rule}" in out and len(out.strip().splitlines()) == 1, out
    assert not (tmp_path / "out").exists()


def args_file(tmp_path) -> str:
    return (tmp_path / "out" / "megatron_args.sh").read_text()


def test_r08_sets_device_connections_at_tp1(tmp_path):
    # arguments.py@core_r0.8.0 validate_args raises unless CUDA_DEVICE_MAX_CONNECTIONS is "1" while
    # async_tensor_model_parallel_allreduce is on, its default without sequence parallelism, at any TP.
    code, out = export(tmp_path, "--model", "8b", "--gpus", "8", "--gpu", "h100", "--tp", "1", "--recompute", "full",
                       "--framework", "megatron-core-0.8", "--format", "megatron")
    assert code == 0, out
    assert "\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n" in args_file(tmp_path)


def test_r08_refuses_ep_that_does_not_divide_dp_without_cp(tmp_path):
    # 32 GPUs / (tp 2 x cp 4) = dp 4, which ep 8 does not divide: parallel_state.py@core_r0.8.0
    # raises (later releases fold EP over dp x cp = 16).
    job = ("--model", "mixtral-8x7b", "--gpus", "32", "--gpu", "h100", "--tp", "2", "--etp", "2", "--ep", "8",
           "--recompute", "full", "--seq-len", "16384", "--format", "megatron")
    refused(tmp_path, "megatron_release_ep_divides_dp", *job, "--cp", "4", "--framework", "megatron-core-0.8")


def test_v013_refuses_cuda_graphs_with_any_recompute(tmp_path):
    # transformer_config.py@core_v0.13.0: "CUDA graphs not supported with activation recomputation".
    job = ("--model", "70b", "--gpus", "64", "--gpu", "h100", "--tp", "8", "--pp", "2", "--cuda-graphs",
           "--format", "megatron", "--framework", "megatron-core-0.13")
    refused(tmp_path, "megatron_release_cuda_graphs_recompute", *job, "--recompute", "selective")


def test_v012_refuses_mxfp8_with_fp8_parameters(tmp_path):
    # transformer_config.py@core_v0.12.0: "MXFP8 currently does not support fp8_param"; NeMo 25.04's
    # profile keeps FP8 parameters, so the user turns them off.
    job = ("--model", "8b", "--gpus", "8", "--gpu", "b200", "--tp", "1", "--precision", "fp8", "--fp8-recipe",
           "mxfp8", "--framework", "nemo-25.04", "--format", "megatron")
    refused(tmp_path, "megatron_release_mxfp8_fp8_params", *job)
    code, out = export(tmp_path, *job, "--no-fp8-param-gather")
    assert code == 0, out
    assert "--fp8-param-gather" not in args_file(tmp_path)


def test_v012_writes_one_uneven_stage_flag_for_two_stages(tmp_path):
    # Both --decoder-first/last-pipeline-num-layers at pp 2 leave transformer_config.py@core_v0.12.0
    # no middle stage to divide by (ZeroDivisionError); the first's 39 of 80 layers fixes the last's 41.
    code, out = export(tmp_path, "--model", "70b", "--gpus", "64", "--gpu", "h100", "--tp", "8", "--pp", "2",
                       "--pp-first-layers", "39", "--pp-last-layers", "41", "--recompute", "full",
                       "--framework", "nemo-25.04", "--format", "megatron")
    assert code == 0, out
    text = args_file(tmp_path)
    assert "--decoder-first-pipeline-num-layers 39" in text and "--decoder-last-pipeline-num-layers" not in text
    res = CliRunner().invoke(app, ["evaluate", "--from-launch", str(tmp_path / "out" / "megatron_args.sh"),
                                   "--gpus", "64", "--gpu", "h100"])
    assert res.exit_code == 0, res.output
    assert "stages 39 + 41 layers (first + last)" in res.output


@pytest.mark.parametrize("cp, rule", [(1, None), (2, "megatron_release_mtp_cp")])
def test_deepseek_v3_on_v012_and_v013(tmp_path, cp, rule):
    # MLA: transformer_config.py@core_v0.12.0 raises "multi_latent_attention does not support
    # apply_rope_fusion" (on by default): --no-rope-fusion. MTP with CP: arguments.py@core_v0.13.0
    # (and v0.12.0) assert "Multi-Token Prediction (MTP) is not supported with Context Parallelism".
    job = ("--model", "deepseek-v3", "--gpus", "1024", "--gpu", "h100", "--tp", "2", "--pp", "16", "--ep", "32",
           "--recompute", "full", "--cp", str(cp), "--format", "megatron")
    if rule:
        refused(tmp_path, rule, *job, "--framework", "megatron-core-0.13")
        return
    code, out = export(tmp_path, *job, "--framework", "nemo-25.04")
    assert code == 0, out
    assert "--multi-latent-attention" in args_file(tmp_path) and "--no-rope-fusion" in args_file(tmp_path)
