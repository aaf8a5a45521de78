"""Megatron-Bridge (release 25.09, exporter v0.2.0) review fixes: MLA plans merged over the
DeepSeek-V3 recipe, the FP8 recipe of the 25.09 MoE presets, token drop kept to the benchmark rows,
and a search whose layouts fit but lie outside the release saying so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from costmodel.options import Layout
from hardware_catalog import get_model
from planner.export.common import CannotExpress, build_plan
from planner.frameworks.megatron import TABLE
from planner.frameworks.profiles import PROFILES
from planner.frameworks.releases import RELEASES, framework_settings

from test_export import DEEPSEEK_LIKE, DGX_H100, export, record


def _planner(*args):
    proc = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


# ------------------------------------------------------------------ 1. MLA over the DeepSeek-V3 recipe


def _bridge_yaml(tmp_path, model):
    rec = record(model, tp=2, dp=4, ep=8, gbs=8, recompute="full")
    path = export(rec, model, tmp_path, formats="megatron-bridge").written[0]
    return path.read_text()


def test_mla_plan_is_written_for_the_deepseek_v3_recipe(tmp_path):
    # DeepSeek-V3's config.json: q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128,
    # qk_rope_head_dim 64, v_head_dim 128 -> Megatron-Core MLATransformerConfig's q_lora_rank,
    # kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim.
    text = _bridge_yaml(tmp_path, DEEPSEEK_LIKE)
    model = yaml.safe_load(text)["model"]
    assert model["multi_latent_attention"] is True
    assert (model["q_lora_rank"], model["kv_lora_rank"], model["qk_head_dim"], model["qk_pos_emb_head_dim"],
            model["v_head_dim"]) == (1536, 512, 128, 64, 128)
    head = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert "megatron.bridge.recipes.deepseek.deepseek_v3_pretrain_config" in head
    assert "DeepSeekV3ModelProvider" in head and "MLATransformerConfig" in head


def test_mla_without_query_compression_clears_the_providers_q_lora_rank(tmp_path):
    # DeepSeekModelProvider sets q_lora_rank 1536; a model without query compression (DeepSeek-V2-Lite:
    # q_lora_rank null) merged over it must say null, or it would run with a 1536-rank query LoRA.
    lite = DEEPSEEK_LIKE.model_copy(update={"name": "deepseek-lite-like",
                                            "mla": DEEPSEEK_LIKE.mla.model_copy(update={"q_lora_rank": None})})
    model = yaml.safe_load(_bridge_yaml(tmp_path, lite))["model"]
    merged = {"q_lora_rank": 1536, **model}  # OmegaConf.merge(recipe, overrides): the override wins
    assert "q_lora_rank" in model and merged["q_lora_rank"] is None


def test_mla_model_without_an_mla_recipe_is_refused_naming_the_rule(tmp_path):
    other = DEEPSEEK_LIKE.model_copy(update={"name": "mla-custom", "family": "custom"})
    with pytest.raises(Exception) as err:
        _bridge_yaml(tmp_path, other)
    assert "bridge_mla" in str(err.value) or getattr(err.value, "rule", "") == "bridge_mla"


def test_mla_refusal_is_the_recipe_not_the_attention():
    from planner.export.bridge import mla_recipe

    plan = build_plan(record(DEEPSEEK_LIKE, tp=2, dp=4, ep=8, gbs=8, recompute="full"), DEEPSEEK_LIKE, DGX_H100)
    assert mla_recipe(plan)[0] == "deepseek_v3_pretrain_config"
    other = DEEPSEEK_LIKE.model_copy(update={"family": "custom"})
    with pytest.raises(CannotExpress) as err:
        mla_recipe(build_plan(record(other, tp=2, dp=4, ep=8, gbs=8, recompute="full"), other, DGX_H100))
    assert err.value.rule == "bridge_mla"


def test_deepseek_v3_search_with_bridge_2509_finds_layouts():
    code, out, err = _planner("search", "--model", "deepseek-v3", "--gpus", "1024", "--gpu", "h100", "--precision",
                              "fp8", "--framework", "megatron-bridge-25.09", "--top", "1")
    assert code == 0, out + err
    assert "bridge_mla" not in out


# ------------------------------------------------------------ 2. the profile never refuses its own FP8

_FP8_DELAYED_RECOMPUTE = [r for r in TABLE.refusals if r.rule == "megatron_fp8_delayed_recompute_modules"]
_BRIDGE_RELEASES = [r.name for r in RELEASES if "megatron-bridge" in r.text.lower() or "nemo" in r.text.lower()]
_PROFILE_MODELS = sorted({w.model_name for p in PROFILES for e in p.entries for w in e.when if w.model_name})


def _catalog_models(prefix):
    from hardware_catalog.models import list_models

    return [m for m in list_models() if m.name.startswith(prefix)]


@pytest.mark.parametrize("release", _BRIDGE_RELEASES)
def test_bridge_profile_settings_pass_the_megatron_fp8_recompute_check(release):
    """Property: whatever a NeMo / Megatron-Bridge profile pins for a FP8 job on a model its entries
    name, on any GPU, is a combination Megatron-Core's TransformerConfig accepts (delayed scaling
    refuses layernorm and moe_act recompute)."""
    assert _FP8_DELAYED_RECOMPUTE
    default_recipe = Layout().fp8_recipe
    checked = 0
    for prefix in _PROFILE_MODELS:
        for model in _catalog_models(prefix):
            for gpu in ("h100-sxm", "h200", "b200", "gb200", "b300", "gb300"):
                pinned = framework_settings(release, model, gpu, "fp8").pinned
                plan = SimpleNamespace(precision="fp8", recompute=pinned.get("recompute", "selective"),
                                       recompute_modules=pinned.get("recompute_modules"),
                                       fp8_recipe=pinned.get("fp8_recipe", default_recipe))
                for refusal in _FP8_DELAYED_RECOMPUTE:
                    refused = plan.fp8_recipe in refusal.values and refusal.when(plan)
                    assert not refused, (release, model.name, gpu, pinned)
                checked += 1
    assert checked


def test_bridge_2509_moe_presets_run_fp8_current_scaling():
    # 25.09 perf_matrix for DeepSeek-V3 and Qwen3: fp8_cs (+ fp8_mx on B200 / GB200, fp8_ss on H100),
    # no fp8_ds; the GB200 DeepSeek-V3 run recomputes moe_act, which delayed scaling refuses.
    dsv3 = get_model("deepseek-v3")
    gb200 = framework_settings("megatron-bridge-25.09", dsv3, "gb200", "fp8").pinned
    assert gb200["fp8_recipe"] == "current" and "moe_act" in gb200["recompute_modules"]
    llama = framework_settings("megatron-bridge-25.09", get_model("llama3-70b"), "gb200", "fp8").pinned
    assert "fp8_recipe" not in llama  # the Llama presets also run fp8_ds: left to the flag
    assert "fp8_recipe" not in framework_settings("megatron-bridge-25.09", dsv3, "gb200", "bf16").pinned


def test_deepseek_v3_gb200_search_with_bridge_2509_is_not_refused():
    code, out, err = _planner("search", "--model", "deepseek-v3", "--gpus", "1024", "--gpu", "gb200", "--precision",
                              "fp8", "--framework", "megatron-bridge-25.09", "--top", "1")
    assert code == 0, out + err
    assert "fp8_recipe=current" in out


# ------------------------------------------------------- 3. token drop: the benchmark rows, not a plan


def test_bridge_2509_token_drop_is_for_the_benchmark_rows_only():
    qwen = get_model("qwen3-235b-a22b")
    pinned = framework_settings("megatron-bridge-25.09", qwen, "b200", "fp8").pinned
    assert "moe_capacity_factor" not in pinned and "moe_pad_to_capacity" not in pinned
    from planner.validate.runs import load_runs, map_run

    row = next(r for r in load_runs(None) if r["id"] == "mbridge2509_b200_qwen3_235b_a22b_64gpu")
    pins = map_run(row).pins
    assert (pins["moe_capacity_factor"], pins["moe_pad_to_capacity"]) == (1.0, True)  # what run_script.py ran


def test_search_says_it_left_token_drop_out_and_how_to_price_it():
    code, out, err = _planner("search", "--model", "qwen3-30b-a3b", "--gpus", "8", "--gpu", "b200",
                              "--framework", "megatron-bridge-25.09", "--top", "1")
    assert code == 0, out + err
    line = next(line for line in out.splitlines() if "token drop" in line)
    assert "benchmark only, not applied" in line and "--moe-capacity-factor 1.0 --moe-pad-to-capacity" in line
    assert "moe_capacity_factor=1.0" not in out


# ------------------------------------------------- 4. a pinned degree no layout can hold is bad input


@pytest.mark.parametrize("flags,named", [
    (("--ep", "128"), "--ep 128"),  # ep * etp divides tp*cp*dp <= 64
    (("--etp", "3"), "--etp 3"),    # 3 divides no power of two
    (("--tp", "8", "--pp", "16"), "--tp 8 --pp 16"),  # 128 ranks on 64 GPUs
])
def test_pins_no_layout_can_hold_exit_2_in_one_line(flags, named):
    code, out, err = _planner("search", "--model", "qwen3-235b-a22b", "--gpus", "64", "--gpu", "b200", *flags)
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and out == ""
    assert named in lines[0] and "allowed" in lines[0] and "1, 2, 4, 8, 16, 32, 64" in lines[0]


def test_unreachable_pins_by_hand():
    from search.rules import unreachable_pins

    # 64 GPUs = 2^6: ep * etp must be a power of two <= 64, tp * cp * pp * dp too.
    assert unreachable_pins([64], {"ep": 64}) is None
    assert unreachable_pins([64], {"ep": 32, "etp": 2}) is None
    assert "ep_divides_dp_cp" in unreachable_pins([64], {"ep": 32, "etp": 4})
    assert "ep_divides_dp_cp" in unreachable_pins([64], {"ep": 16, "pp": 8})  # 16 * 8 = 128 > 64
    assert unreachable_pins([64], {"ep": 16, "pp": 4}) is None  # tp*cp*dp = 16 can hold ep 16
    assert "degrees_multiply_to_gpus" in unreachable_pins([64], {"tp": 3})
    # several GPU counts: bad only if no count can hold the pins
    assert unreachable_pins([64, 128], {"ep": 128}) is None
    assert unreachable_pins([96], {"tp": 3, "pp": 4}) is None


def test_evaluate_also_says_it_left_token_drop_out():
    code, out, err = _planner("evaluate", "--model", "qwen3-30b-a3b", "--gpus", "8", "--gpu", "b200", "--ep", "8",
                              "--framework", "megatron-bridge-25.09")
    assert code == 0, out + err
    assert any("token drop" in line and "benchmark only, not applied" in line for line in out.splitlines())


# ------------------------------------------------------------------ dataset length, gradient reduction, 25.09


def _bridge_cli(tmp_path, *args):
    out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"  # a new directory per export
    code, stdout, stderr = _planner("export", *args, "--format", "megatron-bridge", "--out", str(out))
    text = (out / "megatron_bridge_overrides.yaml").read_text() if code == 0 else ""
    return code, text, stderr + ("" if out.exists() else " [nothing written]")


def test_sequence_length_goes_to_the_gpt_dataset_field(tmp_path):
    # v0.2.0 ConfigContainer.validate asserts model.seq_length == dataset.sequence_length for a
    # GPTDatasetConfig (Megatron-Core's BlendedMegatronDatasetConfig field; seq_length is the
    # fine-tuning config's). A key the dataset lacks is skipped by the override loader, so the
    # recipe's 8192 stayed and a 4096-token plan failed validation.
    source = (Path(__file__).parent / "data/megatron_bridge/0.2.0/config.py").read_text()
    assert "else self.dataset.sequence_length" in source
    code, text, _ = _bridge_cli(tmp_path, "--model", "8b", "--gpus", "8", "--gpu", "h100", "--tp", "2", "--seq-len", "4096")
    assert code == 0
    cfg = yaml.safe_load(text)
    assert cfg["dataset"] == {"sequence_length": 4096} and cfg["model"]["seq_length"] == 4096


def test_a_bf16_gradient_reduction_is_said_to_run_in_fp32(tmp_path):
    # Every BF16 / FP8 preset sets grad_reduce_in_fp32=True and MixedPrecisionConfig.setup copies it
    # over the DDP config (v0.2.0 training/mixed_precision.py), so a plan priced with BF16 gradient
    # reduction (the 25.09 profile's FP8 default) runs FP32: the header says so.
    mp = (Path(__file__).parent / "data/megatron_bridge/0.2.0/mixed_precision.py").read_text()
    assert "cfg = bf16_mixed()" in mp and "grad_reduce_in_fp32=True" in mp
    args = ("--model", "70b", "--gpus", "64", "--gpu", "h100", "--tp", "4", "--pp", "8", "--vpp", "5", "--precision", "fp8",
            "--fp8-recipe", "current")
    code, text, _ = _bridge_cli(tmp_path, *args, "--framework", "megatron-bridge-25.09")
    assert code == 0 and "reduced in FP32" in text and yaml.safe_load(text)["ddp"]["grad_reduce_in_fp32"] is False
    code, text, _ = _bridge_cli(tmp_path, *args, "--grad-dtype", "fp32", "--fp8-param-gather")
    assert code == 0 and "reduced in FP32" not in text


def test_bridge_2509_differences_are_named_and_nvfp4_refused(tmp_path):
    # Megatron-Bridge 25.09 (6307e8a37, Megatron-Core 0.15.0rc6): TransformerConfig has
    # enable_cuda_graph and moe_enable_deepep but no cuda_graph_impl / moe_flex_dispatcher_backend,
    # and training/mixed_precision.py has no NVFP4 preset.
    code, text, _ = _bridge_cli(tmp_path, "--model", "qwen3-30b-a3b", "--gpus", "8", "--gpu", "b200", "--ep", "8",
                                "--framework", "megatron-bridge-25.09")
    assert code == 0 and "model.enable_cuda_graph: true" in text
    code, text, _ = _bridge_cli(tmp_path, "--model", "8b", "--gpus", "8", "--gpu", "b200", "--tp", "2")
    assert code == 0 and "25.09" not in text  # no --framework: the v0.2.0 file alone
    code, text, err = _bridge_cli(tmp_path, "--model", "8b", "--gpus", "8", "--gpu", "b200", "--precision", "fp8",
                                  "--fp8-recipe", "nvfp4", "--no-fp8-param-gather", "--framework", "megatron-bridge-25.09")
    assert code == 2 and "bridge_2509_nvfp4" in err and err.endswith("[nothing written]")
