"""A clamped GLU (gpt-oss: HF ``swiglu_limit`` 7.0) in every launch file.

Expectations by hand from the sources:
* Megatron-Core TransformerConfig.activation_func_clamp_value (transformer_config.py) is the clamp;
  its __post_init__ refuses it for a SwiGLU without experts ("only supported with MoE"), and
  Megatron-LM's arguments.py has no flag for it, so a Megatron-LM command line cannot state it.
* Megatron-Bridge models/gpt_oss/gpt_oss_provider.py sets activation_func_clamp_value = 7.0: an
  override file merged over that recipe for a model without a clamp must clear it (null).
* Megatron-DeepSpeed (f4157bea) clamps no activation.
"""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from hardware_catalog import get_model
from hardware_catalog.errors import PlannerInputError
from hardware_catalog.schema import ModelSpec
from planner.launch import read_launch
from test_export import export, record
from test_window_export import _args_file, _gpt_oss_record

GPT_OSS = get_model("gpt-oss-120b")
QWEN3_30B = get_model("qwen3-30b-a3b")


def _bridge_yaml(tmp_path, model, rec) -> tuple:
    export(rec, model, tmp_path, formats="megatron-bridge")
    path = tmp_path / "megatron_bridge_overrides.yaml"
    return path, yaml.safe_load(path.read_text())["model"]


def test_a_clamp_needs_experts_and_a_gated_mlp():
    dense = dict(name="dense-clamped", family="llama", num_layers=2, hidden_size=256, num_attention_heads=4,
                 ffn_hidden_size=512, vocab_size=1000, glu_clamp=7.0)
    with pytest.raises(ValidationError, match="glu_clamp=7.0 needs a gated MLP with experts"):
        ModelSpec(**dense)
    assert GPT_OSS.glu_clamp == 7.0 and QWEN3_30B.glu_clamp is None


def test_bridge_writes_the_clamp_and_clears_a_recipes(tmp_path):
    _, oss = _bridge_yaml(tmp_path / "oss", GPT_OSS, _gpt_oss_record())
    assert oss["activation_func_clamp_value"] == 7.0
    # Qwen3 has none: null, so that gpt_oss_provider.py's 7.0 is not inherited when merged over it.
    _, qwen = _bridge_yaml(tmp_path / "qwen", QWEN3_30B, record(QWEN3_30B, ep=8, dp=8, gbs=64))
    assert "activation_func_clamp_value" in qwen and qwen["activation_func_clamp_value"] is None


def test_the_bridge_file_reads_back_with_its_clamp(tmp_path):
    path, _ = _bridge_yaml(tmp_path, GPT_OSS, _gpt_oss_record())
    assert read_launch(path).model is GPT_OSS
    # The same shape stating no clamp is not gpt-oss-120b: it is priced without the clamp's kernels.
    path.write_text(path.read_text().replace("activation_func_clamp_value: 7.0", "activation_func_clamp_value: null"))
    launch = read_launch(path)
    assert launch.model is not GPT_OSS and launch.model.glu_clamp is None
    assert "glu_clamp None vs 7.0" in launch.model_note
    # Named with --model, the file's other clamp is said.
    assert "model.activation_func_clamp_value null" in read_launch(path, model=GPT_OSS).model_note


def test_a_megatron_command_line_keeps_the_presets_clamp(tmp_path):
    # Megatron-LM has no flag for the clamp, so a command line with gpt-oss's shape is gpt-oss.
    launch = read_launch(_args_file(tmp_path, "--window-size", "127,0", "--window-attn-skip-freq", "2"), "megatron")
    assert launch.model is GPT_OSS and launch.model.glu_clamp == 7.0


def test_a_bad_clamp_is_one_line(tmp_path):
    path, _ = _bridge_yaml(tmp_path, GPT_OSS, _gpt_oss_record())
    path.write_text(path.read_text().replace("activation_func_clamp_value: 7.0", "activation_func_clamp_value: -1"))
    with pytest.raises(PlannerInputError, match=r"model.activation_func_clamp_value=-1: .*positive number"):
        read_launch(path)


def test_megatron_lm_export_says_it_does_not_clamp(tmp_path):
    export(_gpt_oss_record(), GPT_OSS, tmp_path, formats="megatron")
    text = (tmp_path / "megatron_args.sh").read_text()
    assert "GLU clamp 7 (TransformerConfig.activation_func_clamp_value) has no Megatron-LM flag" in text
    assert "activation-func-clamp" not in text


def test_deepspeed_refuses_a_clamped_model_and_its_reader_says_so(tmp_path):
    clamped = QWEN3_30B.model_copy(update={"name": "qwen3-clamped", "glu_clamp": 7.0})
    with pytest.raises(PlannerInputError) as err:
        export(record(clamped, ep=8, dp=8, gbs=64, zero=1), clamped, tmp_path / "ds", formats="deepspeed")
    assert "deepspeed_model_kind" in str(err.value) and "a GLU clamped at 7 (glu_clamp)" in str(err.value)
    assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").iterdir())
    export(record(QWEN3_30B, ep=8, dp=8, gbs=64, zero=1, grad_accum_pass="cast_add", grad_reduce="all_reduce"), QWEN3_30B, tmp_path / "q",
           formats="deepspeed")
    note = read_launch(tmp_path / "q" / "deepspeed_config.json", model=clamped).model_note
    assert "clamps its GLU at 7, which Megatron-DeepSpeed's model code does not" in note


def test_the_runs_format_takes_the_clamp():
    from planner.validate import map_run

    # gpt-oss-20b's shape (HF config.json: 24 layers, 32 experts) on the gpt-oss family: its biases,
    # alternating 128-key window and clamp come with the family.
    shape = {"name": "my-oss", "family": "gpt-oss", "num_layers": 24, "hidden_size": 2880, "num_attention_heads": 64,
             "num_kv_heads": 8, "head_dim": 64, "ffn_hidden_size": 2880, "vocab_size": 201088,
             "moe": {"num_experts": 32, "top_k": 4, "expert_ffn_hidden_size": 2880}}
    row = {"id": "o", "gpu": "H100", "num_gpus": 8, "seq_len": 4096, "gbs": 64, "tp": 1, "pp": 1, "ep": 8,
           "tokens_per_s_per_gpu": 10_000, "model": shape}
    model = map_run(row).model
    assert (model.glu_clamp, model.linear_bias, model.sliding_window, model.windowed_layers) == (7.0, True, 128, 12)
    # HF's spelling states it on another family; on a dense model it is refused in one line.
    assert map_run({**row, "model": {**shape, "family": "qwen3-moe", "swiglu_limit": 5.0}}).model.glu_clamp == 5.0
    dense = {"name": "d", "family": "llama", "num_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
             "ffn_hidden_size": 512, "vocab_size": 1000, "glu_clamp": 7.0}
    with pytest.raises(PlannerInputError, match="glu_clamp=7.0 needs a gated MLP with experts"):
        map_run({**row, "ep": 1, "model": dense})
