"""Hybrid Mamba-2 / attention / MLP models (costmodel/ssm.py): values derived by hand from the
Mamba-2 layer's shapes (Dao & Gu 2024; Megatron-Core mamba_mixer.py) and Nemotron-H 8B's
config (nvidia/Nemotron-H-8B-Base-8K config.json = Megatron-Bridge NemotronHModelProvider8B)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from costmodel import ssm, ssm_layer
from costmodel.calibration import DEFAULT
from costmodel.moe import dense_and_moe_layer_times
from costmodel.flops import attention_core_flops_per_token, model_flops_per_token
from costmodel.layout import Layout, LayoutBatch
from costmodel.params import count_params
from costmodel.step import evaluate
from hardware_catalog import get_cluster, get_gpu, get_model
from hardware_catalog.errors import PlannerInputError
from hardware_catalog.hf_config import model_from_hf_config

H8 = "nemotron-h-8b"


def test_pattern_counts_and_parameters_by_hand():
    m = get_model(H8)
    assert ssm.layer_kinds(m) == {"M": 24, "*": 4, "-": 24, "E": 0}
    # Mamba layer, h 4096, H 128 heads of P 64 (d_inner 8192), G 8, N 128, K 4:
    # in_proj 4096 x (2·8192 + 2·8·128 + 128 = 18,560) = 76,021,760; conv (8192 + 2048) x (4 + 1)
    # = 51,200; A_log, D, dt_bias 3 x 128 = 384; gated norm 8192; out_proj 8192 x 4096 =
    # 33,554,432; pre-norm 4096 -> 109,640,064.
    assert ssm.mamba_params(m) == 109_640_064
    # Attention layer: QKV 4096 x (32 + 2·8) x 128 = 25,165,824 + out 16,777,216 + norm 4096;
    # MLP layer (squared ReLU, 2 matrices): 2 x 4096 x 21504 = 176,160,768 + norm 4096.
    layers = 24 * 109_640_064 + 4 * 41_947_136 + 24 * 176_164_864
    embeddings = 2 * 131_072 * 4096  # untied
    assert count_params(m).total == layers + embeddings + 4096  # + final norm = 8,100,852,736
    assert count_params(m).total == pytest.approx(8.1e9, rel=0.001)  # "8B" (8.1B) Nemotron-H


def test_ssd_and_model_flops_by_hand():
    m = get_model(H8)
    # Per token: C·Bᵀ 2·Q·N·G = 2·128·128·8 = 262,144; scores·x 2·Q·P·H = 2,097,152; chunk states
    # and state -> output 2 x 2·N·P·H = 4,194,304.
    assert ssm.ssd_flops_per_token(m) == 262_144 + 2_097_152 + 4_194_304
    # Megatron's counter: 7·d_inner·N per Mamba layer forward, x3 fwd + bwd: 3 x 24 x 7 x 8192 x 128.
    assert ssm.scan_model_flops_per_token(m) == 3 * 24 * 7 * 8192 * 128
    # Attention core counted in the 4 attention layers only: 3 x 4 x 2·32·(128 + 128)·8192/2.
    counts = count_params(m)
    extra = model_flops_per_token(m, 8192, counts) - 6.0 * counts.matmul_active - ssm.scan_model_flops_per_token(m)
    assert extra == pytest.approx(3 * 4 * 2 * 32 * 256 * 4096)
    assert extra == pytest.approx(3 * 4 * attention_core_flops_per_token(m, 8192))


def test_activation_bytes_per_token_by_hand():
    m = get_model(H8)
    # tp 1: every layer keeps 4h = 16,384; attention Q, K, V 2·(32 + 16)·128 + output 2·32·128 =
    # 20,480; MLP 4F = 86,016; Mamba 2 x (18,560 + 10,240 + 2·8192) = 90,368; averaged over 52.
    expected = 16_384 + (4 * 20_480 + 24 * 86_016 + 24 * 90_368) / 52
    assert float(ssm.layer_activation_bytes_per_token(m, 1, False)) == pytest.approx(expected)
    # TP 4 with SP: everything splits 4 ways.
    assert float(ssm.layer_activation_bytes_per_token(m, 4, True)) == pytest.approx(expected / 4)


def test_an_attention_and_an_mlp_layer_price_as_one_transformer_layer():
    """Pattern '*-' is a transformer layer cut in two: twice the average pattern layer is the
    attention + MLP layer costmodel.compute prices (forward, backward, FLOPs)."""
    base = get_model("llama3-8b")
    split = base.model_copy(update={"name": "split", "num_layers": 2, "hybrid_pattern": "*-"})
    gpu = get_gpu("h100")
    batch = LayoutBatch.from_layouts([Layout(tp=2, pp=1, dp=4, mbs=1, seq_len=4096, gbs=64)])
    dense, _ = dense_and_moe_layer_times(base, count_params(base), gpu, batch, DEFAULT)
    avg = ssm_layer.hybrid_layer_times(split, gpu, batch, DEFAULT, dense)
    np.testing.assert_allclose(2 * avg.forward, dense.forward)
    np.testing.assert_allclose(2 * avg.backward, dense.backward)
    np.testing.assert_allclose(2 * avg.flops_forward, dense.flops_forward)
    np.testing.assert_allclose(2 * avg.attention_forward, dense.attention_forward)


def test_a_mamba_layer_is_its_gemms_and_scan_by_roofline():
    """A Mamba layer's forward FLOPs are in_proj + out_proj + the SSD scan (tokens x per-token)."""
    m = get_model(H8)
    only_mamba = m.model_copy(update={"name": "m", "num_layers": 1, "hybrid_pattern": "M"})
    gpu = get_gpu("h100")
    batch = LayoutBatch.from_layouts([Layout(tp=1, pp=1, dp=8, mbs=1, seq_len=8192, gbs=64)])
    dense, _ = dense_and_moe_layer_times(only_mamba, count_params(only_mamba), gpu, batch, DEFAULT)
    layer = ssm_layer.hybrid_layer_times(only_mamba, gpu, batch, DEFAULT, dense)
    per_token = 2 * 4096 * 18_560 + 2 * 8192 * 4096 + ssm.ssd_flops_per_token(m)
    np.testing.assert_allclose(layer.flops_forward, 8192 * per_token)
    assert layer.attention_forward[0] == 0.0
    # Backward: dgrad + wgrad of both GEMMs (2x) and the scan's 2.5x: between 2x and 2.5x forward.
    assert 2.0 * layer.forward[0] < layer.backward[0] < 2.5 * layer.forward[0]


def test_hybrid_model_is_priced_end_to_end():
    m = get_model(H8)
    res = evaluate(m, get_cluster("dgx-h100"), Layout(tp=2, pp=2, dp=16, mbs=1, seq_len=8192, gbs=768, precision="fp8"))
    assert res.fits[0] and 0 < res.mfu[0] < 1
    # TP collectives: one all-gather + reduce-scatter pair per pattern layer, not two.
    tp_only = evaluate(m, get_cluster("dgx-h100"), Layout(tp=2, pp=1, dp=32, mbs=1, seq_len=8192, gbs=768))
    assert tp_only.time_terms["tp_comm"][0] > 0


def test_pattern_rules_and_refusals():
    m = get_model(H8)
    with pytest.raises(ValueError, match="52 layers but num_layers=50"):
        m.model_validate({**m.model_dump(), "num_layers": 50})
    with pytest.raises(ValueError, match="allowed M"):
        m.model_validate({**m.model_dump(), "hybrid_pattern": "M-X" + m.hybrid_pattern[3:]})
    with pytest.raises(ValueError, match="MoE layers"):
        m.model_validate({**m.model_dump(), "hybrid_pattern": "E" + m.hybrid_pattern[1:]})
    # Stage marks are not layers.
    marked = m.model_validate({**m.model_dump(), "hybrid_pattern": m.hybrid_pattern[:26] + "|" + m.hybrid_pattern[26:]})
    assert marked.hybrid_layers == m.hybrid_pattern
    moe = get_model("qwen3-30b-a3b").moe
    with_moe = m.model_validate({**m.model_dump(), "moe": moe.model_dump(), "hybrid_pattern": "E" + m.hybrid_pattern[1:]})
    with pytest.raises(PlannerInputError, match="not priced yet"):
        ssm.check_priced(with_moe)


NEMOTRON_H_8B_CONFIG = {  # nvidia/Nemotron-H-8B-Base-8K config.json, the fields read
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "hidden_size": 4096, "num_hidden_layers": 52, "num_attention_heads": 32, "num_key_value_heads": 8,
    "attention_head_dim": 128, "intermediate_size": 21504, "mlp_hidden_act": "relu2", "ssm_state_size": 128,
    "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8, "conv_kernel": 4, "chunk_size": 128,
    "vocab_size": 131072, "tie_word_embeddings": False, "max_position_embeddings": 8192,
}


def test_nemotron_h_config_json_imports_as_the_preset():
    spec = model_from_hf_config(NEMOTRON_H_8B_CONFIG, "nh8")
    assert spec.hybrid_pattern == get_model(H8).hybrid_pattern and not spec.gated_mlp
    assert count_params(spec).total == count_params(get_model(H8)).total


def test_cli_evaluates_and_searches_a_hybrid_model():
    out = subprocess.run([sys.executable, "-m", "planner", "evaluate", "--model", "Nemotron-H 8B", "--gpu", "GB300",
                          "--gpus", "72", "--tp", "1", "--pp", "1", "--seq-len", "8192", "--gbs", "576"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "nemotron-h-8b (8.1B params) on 72 x gb300 (gb300-nvl72" in out.stdout and "tokens/s/GPU" in out.stdout


GPT_OSS_120B_CONFIG = {  # openai/gpt-oss-120b config.json, the fields read
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 36,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880,
    "num_local_experts": 128, "num_experts_per_tok": 4, "vocab_size": 201088, "attention_bias": True,
    "tie_word_embeddings": False, "max_position_embeddings": 131072, "sliding_window": 128, "swiglu_limit": 7.0,
}
LLAMA4_SCOUT_CONFIG = {  # meta-llama/Llama-4-Scout-17B-16E config.json, text_config fields read
    "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
    "text_config": {"model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 40,
                    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
                    "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
                    "vocab_size": 202048, "tie_word_embeddings": False, "max_position_embeddings": 10485760},
}


def test_2025_moe_presets_count_by_hand_and_import_from_config_json():
    # gpt-oss-120b per layer: attention 2880·(64 + 16)·64 + 64·64·2880 + biases (5120 + 2880) =
    # 26,550,080; 128 experts of 3·2880·2880 + biases 3·2880 = 24,891,840 each; router 2880·128;
    # embeddings 2 x 201,088 x 2880; final norm 2880. Model card: 116.8B.
    layer = 26_542_080 + 8_000 + 128 * 24_891_840 + 2880 * 128
    assert count_params(get_model("gpt-oss-120b")).total == 36 * layer + 2 * 201_088 * 2880 + 2880 + 36 * 2 * 2880
    spec = model_from_hf_config(GPT_OSS_120B_CONFIG, "oss")
    assert count_params(spec).total == count_params(get_model("gpt-oss-120b")).total
    # swiglu_limit is the clamp Megatron-Core calls activation_func_clamp_value (priced by
    # costmodel.moe.expert_epilogues); the catalog preset carries the same 7.0.
    assert spec.glu_clamp == get_model("gpt-oss-120b").glu_clamp == 7.0
    # Llama 4 Scout text model: 48 x (attention 62,914,560 + norms 10,240 + 16 routed and 1 shared
    # expert of 3·5120·8192 = 125,829,120 + router 81,920) + 2 x 202,048 x 5120 + 5120.
    scout = 48 * (62_914_560 + 10_240 + 17 * 125_829_120 + 81_920) + 2 * 202_048 * 5120 + 5120
    assert count_params(get_model("llama4-scout")).total == scout
    assert count_params(model_from_hf_config(LLAMA4_SCOUT_CONFIG, "scout")).total == scout
    # Kimi K2: "1T total, 32B activated" (model card).
    kimi = count_params(get_model("kimi-k2"))
    assert kimi.total == pytest.approx(1.03e12, rel=0.01) and kimi.active == pytest.approx(32.9e9, rel=0.01)


def test_the_runs_format_takes_a_hybrid_pattern():
    from planner.validate import map_run, validate_rows

    row = {"id": "h", "gpu": "GB300", "num_gpus": 72, "seq_len": 8192, "gbs": 576, "tp": 1, "pp": 1,
           "tokens_per_s_per_gpu": 10_000,
           "model": {"name": "my-hybrid", "family": "nemotron-h", "hidden_size": 4096, "num_attention_heads": 32,
                     "num_kv_heads": 8, "ffn_hidden_size": 21504, "hybrid_override_pattern": "M-M*-M-M*-"}}
    model = map_run(row).model
    assert model.num_layers == 10 and model.hybrid_pattern == "M-M*-M-M*-"
    assert model.mamba == get_model(H8).mamba  # the family's mixer, as the row gives none
    (res,) = validate_rows([row])
    assert res.predicted > 0
