"""Model presets, model files and Hugging Face config import: shapes give the published counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costmodel.params import count_params
from hardware_catalog.errors import PlannerInputError
from hardware_catalog.hf_config import SUPPORTED_MODEL_TYPES, model_from_hf_config
from hardware_catalog.models import get_model, list_models
from hardware_catalog.schema import ModelSpec

HF = Path(__file__).parent / "data" / "hf_configs"


def total(name: str) -> int:
    return count_params(get_model(name)).total


def active(name: str) -> int:
    return count_params(get_model(name)).active


def hf(stem: str) -> ModelSpec:
    return model_from_hf_config(json.loads((HF / f"{stem}.json").read_text()), stem)


def rel(ours: float, published: float) -> float:
    return abs(ours - published) / published


# --- every preset ------------------------------------------------------------------------------


def test_presets_load_and_names_are_unique():
    models = list_models()
    assert len(models) >= 40
    seen: set[str] = set()
    for m in models:
        assert isinstance(m, ModelSpec)
        assert m.source, m.name
        assert m.name == m.name.lower()
        for n in (m.name, *m.aliases):
            assert n.lower() not in seen, n
            seen.add(n.lower())
            assert get_model(n) is m
        p = count_params(m)
        assert p.total > 0 and 0 < p.active <= p.total
        # a whole number of sequences per default batch
        assert m.default_tokens_per_batch % m.default_seq_len == 0, m.name


def _published_tolerance(published: float) -> float:
    """Half a unit in the last digit the count was published with (1.7e9 -> 0.05e9; exact
    integers -> 0.5), floored at 0.1% for counts given to 3-4 significant digits."""
    digits = str(int(published))
    unit = 10 ** (len(digits) - len(digits.rstrip("0")))
    return max(unit / 2, 1e-3 * published)


# Nominal sizes that are truncated rather than rounded by their source.
_TRUNCATED = {"mcore-gpt-1.7b": 0.035}  # README "1.7B"; the shape counts 1.754B


@pytest.mark.parametrize("model", [m for m in list_models() if m.params_published], ids=lambda m: m.name)
def test_preset_count_rounds_to_published(model):
    ours = count_params(model).total
    if model.name in _TRUNCATED:
        assert rel(ours, model.params_published) < _TRUNCATED[model.name]
    else:
        assert abs(ours - model.params_published) <= _published_tolerance(model.params_published), (
            f"{model.name}: {ours:,} vs published {model.params_published:,.0f}"
        )


# --- published counts, by model ---------------------------------------------------------------


def test_llama3():
    assert rel(total("llama3-405b"), 405.8e9) < 0.005
    assert total("llama3-405b") == 405_853_388_800  # HF safetensors count of Llama-3.1-405B
    assert total("llama3-8b") == 8_030_261_248
    assert rel(total("llama3-70b"), 70.6e9) < 0.002


def test_llama2():
    assert total("llama2-7b") == 6_738_415_616
    assert total("llama2-13b") == 13_015_864_320
    assert total("llama2-70b") == 68_976_648_192


def test_gpt3_175b_megatron_formula():
    # Narayanan et al. 2021 Sec. 5.1: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)).
    l, h, V, s = 96, 12288, 51200, 2048
    formula = 12 * l * h * h + 13 * l * h + (V + s) * h
    assert formula == 174_615_822_336  # "174.6B"
    # Ours: the same plus the final LayerNorm (2h) the formula leaves out; tied LM head counted once.
    assert total("gpt3-175b") == formula + 2 * h
    assert total("175b") == total("gpt3-175b")


# Narayanan et al. 2021 Table 1 (weak scaling): the published sizes are rounded to 0.1B.
@pytest.mark.parametrize(
    "name,published",
    [
        ("megatron-gpt-1.7b", 1.7), ("megatron-gpt-3.6b", 3.6), ("megatron-gpt-7.5b", 7.5),
        ("megatron-gpt-18.4b", 18.4), ("megatron-gpt-39.1b", 39.1), ("megatron-gpt-76.1b", 76.1),
        ("megatron-gpt-145.6b", 145.6), ("megatron-gpt-310.1b", 310.1),
        ("megatron-gpt-529.6b", 529.6), ("megatron-gpt-1008b", 1008.0),
    ],
)
def test_narayanan_table1(name, published):
    ours = total(name) / 1e9
    assert round(ours, 1) == published
    # Within 1% from 3.6B up; 1.7B is 1.652B (published to 2 digits: 2.8%).
    assert rel(ours, published) < (0.03 if published < 2 else 0.011)


def test_korthikanti_shapes_alias_narayanan():
    assert get_model("megatron-gpt-530b") is get_model("megatron-gpt-529.6b")
    assert get_model("megatron-gpt-1t") is get_model("megatron-gpt-1008b")
    assert round(total("megatron-gpt-22b") / 1e9) == 22


def test_mixtral():
    assert rel(total("mixtral-8x7b"), 46.7e9) < 0.002
    assert rel(active("mixtral-8x7b"), 12.9e9) < 0.003
    assert rel(total("mixtral-8x22b"), 141e9) < 0.005
    assert rel(active("mixtral-8x22b"), 39e9) < 0.005


def test_deepseek_v3():
    # 671B main model; HF's 685B adds the 14B multi-token-prediction module, not modelled.
    p = count_params(get_model("deepseek-v3"))
    assert rel(p.total, 671e9) < 0.001
    # "37B activated": ours 37.55B; 36.6B without the input-embedding lookup.
    assert rel(p.active, 37e9) < 0.02
    assert round((p.active - p.embedding) / 1e9) == 37
    assert p.num_dense_layers == 3 and p.num_moe_layers == 58


def test_qwen3():
    assert rel(total("qwen3-235b-a22b"), 235e9) < 0.001
    assert rel(active("qwen3-235b-a22b"), 22.2e9) < 0.005  # "22B activated"
    assert rel(total("qwen3-30b-a3b"), 30.5e9) < 0.002
    assert rel(active("qwen3-30b-a3b"), 3.3e9) < 0.02  # "3.3B activated"


def test_bloom_nemotron_mpt():
    assert total("bloom-176b") == 176_247_271_424  # BLOOM model card
    assert rel(total("nemotron-4-340b"), 341e9) < 0.001  # 9.4B embedding + 331.6B other
    # llm-foundry benchmark NumParams, exactly (learned positions, biases, see models.toml)
    for name, n in [("mpt-1b", 1_315_950_592), ("mpt-7b", 6_658_859_008), ("mpt-13b", 12_853_954_560),
                    ("mpt-30b", 29_975_214_080), ("mpt-70b", 64_862_437_376)]:
        assert total(name) == n, name


# --- aliases and names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "alias,name",
    [
        ("8b", "llama3-8b"), ("70B", "llama3-70b"), ("405b", "llama3-405b"),
        ("Llama3.1-405B", "llama3-405b"), ("llama-3.1-8b", "llama3-8b"), ("LLAMA3_70B", "llama3-70b"),
        ("175b", "gpt3-175b"), ("GPT-3", "gpt3-175b"), ("DeepSeek-V3", "deepseek-v3"),
        ("deepseekv3", "deepseek-v3"), ("mixtral", "mixtral-8x7b"), (" bloom ", "bloom-176b"),
    ],
)
def test_aliases(alias, name):
    assert get_model(alias).name == name


def test_unknown_name_one_line_with_suggestion():
    with pytest.raises(PlannerInputError) as err:
        get_model("llama3-4o5b")
    text = str(err.value)
    assert "\n" not in text and "'llama3-4o5b'" in text and "llama3-405b" in text


# --- Hugging Face configs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "stem,preset",
    [
        ("llama-3-8b", "llama3-8b"), ("llama-3.1-405b", "llama3-405b"), ("mixtral-8x7b", "mixtral-8x7b"),
        ("qwen3-235b-a22b", "qwen3-235b-a22b"), ("qwen3-30b-a3b", "qwen3-30b-a3b"),
        ("deepseek-v3", "deepseek-v3"), ("bloom-176b", "bloom-176b"),
    ],
)
def test_hf_config_matches_preset(stem, preset):
    a, b = count_params(hf(stem)), count_params(get_model(preset))
    assert (a.total, a.active) == (b.total, b.active)
    m, p = hf(stem), get_model(preset)
    for field in ("num_layers", "hidden_size", "num_attention_heads", "kv_heads", "head_size",
                  "ffn_hidden_size", "vocab_size", "gated_mlp", "tied_embeddings", "norm",
                  "position_embedding", "moe", "mla"):
        assert getattr(m, field) == getattr(p, field), field


@pytest.mark.parametrize(
    "stem,expected",
    [
        ("gpt2", 124_439_808),  # GPT-2 small "124M"
        ("opt-1.3b", 1_315_758_080),  # incl. the 2 offset rows of OPT's position table
        ("bloom-560m", 559_214_592),  # model card
        ("gpt-neox-20b", 20_554_567_680),  # Black et al. 2022
    ],
)
def test_hf_config_exact_counts(stem, expected):
    assert count_params(hf(stem)).total == expected


def test_hf_config_families():
    gpt2 = hf("gpt2")
    assert (gpt2.position_embedding, gpt2.linear_bias, gpt2.tied_embeddings, gpt2.gated_mlp) == ("learned", True, True, False)
    assert gpt2.dropout and gpt2.max_position_embeddings == 1024
    assert hf("opt-1.3b").max_position_embeddings == 2050
    neox = hf("gpt-neox-20b")
    assert (neox.position_embedding, neox.linear_bias, neox.tied_embeddings) == ("rope", True, False)
    mpt = hf("mpt-7b")  # released checkpoint: ALiBi, no biases
    assert (mpt.position_embedding, mpt.linear_bias, mpt.vocab_size) == ("alibi", False, 50432)
    assert rel(count_params(mpt).total, 6.65e9) < 0.002  # "6.7B"
    ds = hf("deepseek-v3")
    assert ds.mla.q_lora_rank == 1536 and ds.moe.num_dense_layers == 3 and ds.moe.num_shared_experts == 1
    qwen2 = model_from_hf_config(
        {"model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
         "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
         "max_position_embeddings": 32768, "tie_word_embeddings": True},
        "qwen2-0.5b",
    )
    assert qwen2.qkv_bias and not qwen2.linear_bias
    assert rel(count_params(qwen2).total, 494e6) < 0.002  # Qwen2-0.5B: 0.49B


def test_hf_config_mistral_and_qwen2_moe():
    base = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 32768}
    mistral = model_from_hf_config({"model_type": "mistral", **base}, "mistral-7b")
    assert count_params(mistral).total == 7_241_732_096  # Mistral-7B-v0.1 "7.24B"
    qwen_moe = model_from_hf_config(  # Qwen1.5-MoE-A2.7B: 14.3B total, 2.7B active
        {"model_type": "qwen2_moe", "hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16,
         "num_key_value_heads": 16, "intermediate_size": 5632, "moe_intermediate_size": 1408,
         "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
         "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
         "max_position_embeddings": 8192, "tie_word_embeddings": False},
        "qwen1.5-moe-a2.7b",
    )
    p = count_params(qwen_moe)
    assert rel(p.total, 14.3e9) < 0.005 and rel(p.active, 2.7e9) < 0.01


def test_hf_config_by_architecture_only():
    cfg = json.loads((HF / "llama-3-8b.json").read_text())
    del cfg["model_type"]
    assert count_params(model_from_hf_config(cfg, "x")).total == total("llama3-8b")


def test_hf_unsupported_model_type_lists_supported():
    with pytest.raises(PlannerInputError) as err:
        model_from_hf_config({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"]}, "t5-small")
    text = str(err.value)
    assert "\n" not in text and "'t5'" in text and all(t in text for t in SUPPORTED_MODEL_TYPES)


def test_hf_missing_key_named():
    cfg = json.loads((HF / "llama-3-8b.json").read_text())
    del cfg["intermediate_size"]
    with pytest.raises(PlannerInputError, match=r"missing 'intermediate_size'") as err:
        model_from_hf_config(cfg, "broken")
    assert "\n" not in str(err.value)


# --- files -------------------------------------------------------------------------------------

_FIELDS = dict(num_layers=4, hidden_size=256, num_attention_heads=8, num_kv_heads=2,
               ffn_hidden_size=688, vocab_size=1000)


def test_model_file_toml_yaml_json(tmp_path):
    (tmp_path / "tiny.toml").write_text(
        'name = "tiny"\nnum_layers = 4\nhidden_size = 256\nnum_attention_heads = 8\nnum_kv_heads = 2\n'
        "ffn_hidden_size = 688\nvocab_size = 1000\n[moe]\nnum_experts = 4\ntop_k = 1\nexpert_ffn_hidden_size = 128\n"
    )
    (tmp_path / "tiny.yaml").write_text("".join(f"{k}: {v}\n" for k, v in _FIELDS.items()))
    (tmp_path / "tiny.json").write_text(json.dumps({"model": _FIELDS}))
    t = get_model(str(tmp_path / "tiny.toml"))
    assert t.name == "tiny" and t.moe.num_experts == 4
    y = get_model(tmp_path / "tiny.yaml")
    assert y.name == "tiny" and y.kv_heads == 2  # name defaults to the file stem
    assert get_model(str(tmp_path / "tiny.json")).hidden_size == 256


def test_hf_config_file_and_folder(tmp_path):
    folder = tmp_path / "Meta-Llama-3-8B"
    folder.mkdir()
    cfg = json.loads((HF / "llama-3-8b.json").read_text())
    (folder / "config.json").write_text(json.dumps(cfg))
    assert get_model(str(folder / "config.json")).name == "meta-llama-3-8b"  # from _name_or_path
    del cfg["_name_or_path"]
    (folder / "config.json").write_text(json.dumps(cfg))
    assert get_model(str(folder / "config.json")).name == "meta-llama-3-8b"  # from the folder
    assert count_params(get_model(str(folder))).total == total("llama3-8b")


@pytest.mark.parametrize(
    "filename,text,needle",
    [
        ("bad.toml", "num_layers = [", "invalid TOML"),
        ("bad.json", "{", "invalid JSON"),
        ("bad.yaml", "a: [1, 2", "invalid YAML"),
        ("list.json", "[1, 2]", "expected a mapping"),
        ("neg.json", json.dumps({**_FIELDS, "num_layers": -3}), "num_layers"),
        ("typo.json", json.dumps({"hiden_size": 3, **{k: v for k, v in _FIELDS.items() if k != "hidden_size"}}),
         "unknown field 'hiden_size' (did you mean 'hidden_size'?)"),
        ("miss.json", json.dumps({"num_layers": 2}), "missing field"),
        ("gqa.json", json.dumps({**_FIELDS, "num_kv_heads": 3}), "num_kv_heads=3"),
        ("hf.json", json.dumps({"model_type": "whisper"}), "unsupported model_type 'whisper'"),
        ("moe.toml", "num_layers = 2\nhidden_size = 8\nnum_attention_heads = 2\nffn_hidden_size = 8\n"
                     "vocab_size = 10\n[moe]\nnum_experts = 0\ntop_k = 1\nexpert_ffn_hidden_size = 4\n", "num_experts"),
    ],
)
def test_bad_model_files_one_line(tmp_path, filename, text, needle):
    path = tmp_path / filename
    path.write_text(text)
    with pytest.raises(PlannerInputError) as err:
        get_model(str(path))
    msg = str(err.value)
    assert "\n" not in msg and needle in msg and filename in msg


def test_missing_file_and_empty_name(tmp_path):
    with pytest.raises(PlannerInputError, match="not found"):
        get_model(str(tmp_path / "nope.toml"))
    with pytest.raises(PlannerInputError):
        get_model("  ")
