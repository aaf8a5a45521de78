"""Sliding-window attention in every launch file: the exporters write the window the plan was priced
with (or refuse), and the readers read it back into the same model.

Expectations by hand from the sources:
* Megatron-LM: ``--window-size L,R`` is TransformerEngine's (left, right) keys beside the query
  (arguments.py tuple_type reads "127,0"), so a w-key window (HF ``sliding_window``, the query
  included) is ``w-1,0``; ``--window-attn-skip-freq N`` makes layers N, 2N, ... (1-based) full
  attention (megatron/core/transformer/utils.py is_layer_window_attention). Megatron-Bridge's
  gpt_oss_bridge.py: window_size=(sliding_window - 1, 0), window_attn_skip_freq=2.
* gpt-oss (HF config.json): sliding_window 128, layer_types alternating sliding / full from
  layer 0, so 1-based layers 2, 4, ... are full: ``--window-size 127,0 --window-attn-skip-freq 2``.
* Mistral 7B v0.1 (HF config.json): sliding_window 4096 on every layer: ``--window-size 4095,0``
  and no skip frequency.
"""

from __future__ import annotations

import pytest
import yaml

from hardware_catalog import get_model
from hardware_catalog.errors import PlannerInputError
from hardware_catalog.schema import ModelSpec
from planner.launch import read_launch
from test_export import export, megatron_arg_list, needs_bash, record, titan

GPT_OSS = get_model("gpt-oss-120b")

MISTRAL_TOML = """\
name = "mistral-7b-v0.1-file"
family = "mistral"
num_layers = 32
hidden_size = 4096
num_attention_heads = 32
num_kv_heads = 8
ffn_hidden_size = 14336
vocab_size = 32000
max_position_embeddings = 32768
sliding_window = 4096
"""
"""Mistral 7B v0.1 as a planner model file (HF config.json: 4096-key window on every layer)."""

LLAMA3_8B_WINDOWED = ModelSpec(
    name="llama3-8b-windowed", family="llama", num_layers=32, hidden_size=4096, num_attention_heads=32,
    num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128256, max_position_embeddings=131072,
    sliding_window=4096, full_attention_every=4,
)
"""torchtitan's llama3 8B flavor's shape, with a window: the flavor attends every key."""


def _mistral(tmp_path) -> ModelSpec:
    path = tmp_path / "mistral.toml"
    path.write_text(MISTRAL_TOML)
    return get_model(path)


def _gpt_oss_record(**layout) -> dict:
    return record(GPT_OSS, **{"tp": 1, "ep": 8, "dp": 8, "gbs": 64, "recompute": "full", **layout})


def _after(words: list[str], flag: str) -> list[str]:
    return [words[i + 1] for i, w in enumerate(words) if w == flag]


# ----------------------------------------------------------------------------------- Megatron-LM


@needs_bash
def test_gpt_oss_exports_its_window_on_alternate_layers(tmp_path):
    export(_gpt_oss_record(), GPT_OSS, tmp_path, formats="megatron")
    words = megatron_arg_list(tmp_path / "megatron_args.sh")
    assert _after(words, "--window-size") == ["127,0"]
    assert _after(words, "--window-attn-skip-freq") == ["2"]


@needs_bash
def test_a_window_on_every_layer_exports_no_skip_frequency(tmp_path):
    model = _mistral(tmp_path)
    out = tmp_path / "out"
    export(record(model, tp=2, dp=4, gbs=16, seq_len=8192), model, out, formats="megatron")
    words = megatron_arg_list(out / "megatron_args.sh")
    assert _after(words, "--window-size") == ["4095,0"]
    assert "--window-attn-skip-freq" not in words
    from test_export import LLAMA3_8B  # and a model without a window: neither flag

    export(record(LLAMA3_8B, tp=2, dp=4, gbs=16), LLAMA3_8B, tmp_path / "llama", formats="megatron")
    words = megatron_arg_list(tmp_path / "llama" / "megatron_args.sh")
    assert "--window-size" not in words and "--window-attn-skip-freq" not in words


@needs_bash
def test_windowed_context_parallelism_exports_its_comm_type_with_the_window(tmp_path):
    for kind, word in (("a2a", "a2a"), ("allgather", "all_gather")):
        out = tmp_path / kind
        export(_gpt_oss_record(cp=2, dp=4, seq_len=8192, cp_comm_type=kind), GPT_OSS, out, formats="megatron")
        words = megatron_arg_list(out / "megatron_args.sh")
        assert _after(words, "--cp-comm-type") == [word] and _after(words, "--window-size") == ["127,0"]
        launch = read_launch(out / "megatron_args.sh")
        assert launch.values["cp_comm_type"] == kind and launch.model is GPT_OSS
    with pytest.raises(PlannerInputError, match="sliding_window_cp_comm_type"):  # ring CP: TransformerEngine refuses
        export(_gpt_oss_record(cp=2, dp=4, seq_len=8192, cp_comm_type="p2p"), GPT_OSS, tmp_path / "p2p", formats="megatron")
    assert not (tmp_path / "p2p").exists() or not any((tmp_path / "p2p").iterdir())


# ----------------------------------------------------------------------------------- reading back


@pytest.mark.parametrize("fmt,name", [("megatron", "megatron_args.sh"), ("torchrun", "launch_torchrun.sh"),
                                      ("megatron-bridge", "megatron_bridge_overrides.yaml")])
def test_gpt_oss_reads_back_as_the_catalog_model(tmp_path, fmt, name):
    export(_gpt_oss_record(), GPT_OSS, tmp_path, formats=fmt)
    launch = read_launch(tmp_path / name)
    assert launch.model is GPT_OSS, launch.model_note
    assert (launch.model.sliding_window, launch.model.full_attention_every) == (128, 2)
    assert not launch.unsupported and not launch.unknown
    # The window is what makes the file gpt-oss: without its lines, the same shape attends every key.
    text = (tmp_path / name).read_text()
    stripped = "\n".join(line for line in text.splitlines() if "window" not in line and line.strip() not in ("- 127", "- 0"))
    (tmp_path / name).write_text(stripped + "\n")
    launch = read_launch(tmp_path / name)
    assert launch.model is not GPT_OSS and launch.model.sliding_window is None


@pytest.mark.parametrize("fmt,name", [("megatron", "megatron_args.sh"),
                                      ("megatron-bridge", "megatron_bridge_overrides.yaml")])
def test_a_custom_window_reads_back(tmp_path, fmt, name):
    model = _mistral(tmp_path)
    out = tmp_path / "out"
    export(record(model, tp=2, dp=4, gbs=16, seq_len=8192), model, out, formats=fmt)
    launch = read_launch(out / name)
    assert (launch.model.sliding_window, launch.model.full_attention_every) == (4096, None)
    assert launch.model.num_layers == 32 and launch.model.vocab_size == 32000


def _args_file(tmp_path, *extra: str):
    """gpt-oss-120b's shape as Megatron arguments (HF config.json), with ``extra``."""
    words = ["--num-layers", "36", "--hidden-size", "2880", "--ffn-hidden-size", "2880", "--num-attention-heads", "64",
             "--group-query-attention", "--num-query-groups", "8", "--kv-channels", "64", "--swiglu",
             "--normalization", "RMSNorm", "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights",
             "--attention-dropout", "0.0", "--hidden-dropout", "0.0", "--num-experts", "128", "--moe-router-topk", "4",
             "--moe-ffn-hidden-size", "2880", "--seq-length", "4096", "--max-position-embeddings", "131072",
             "--tokenizer-type", "NullTokenizer", "--vocab-size", "201087", "--micro-batch-size", "1",
             "--global-batch-size", "64", "--bf16", *extra]
    path = tmp_path / "args.txt"
    path.write_text(" ".join(f"'{w}'" if "(" in w or "[" in w else w for w in words) + "\n")
    return path


def test_the_shape_without_its_window_is_not_the_catalog_model(tmp_path):
    launch = read_launch(_args_file(tmp_path), "megatron")
    assert launch.model is not GPT_OSS and launch.model.sliding_window is None
    assert "sliding_window None vs 128" in launch.model_note


@pytest.mark.parametrize("extra,window,every", [
    (("--window-size", "127,0", "--window-attn-skip-freq", "([1]*1+[0]*1)*18"), 128, 2),  # the list form of 2
    (("--window-size", "(127,0)", "--window-attn-skip-freq", "3"), 128, 3),  # tuple_type strips the brackets
    (("--window-size=-1,0", "--window-attn-skip-freq", "2"), None, None),  # -1: no limit, so no window
    (("--window-size", "127,0", "--window-attn-skip-freq", "1"), None, None),  # every layer full attention
    (("--window-size", "127,0"), 128, None),  # every layer windowed
])
def test_megatron_window_spellings(tmp_path, extra, window, every):
    launch = read_launch(_args_file(tmp_path, *extra), "megatron")
    assert (launch.model.sliding_window, launch.model.full_attention_every) == (window, every)
    assert (launch.model is GPT_OSS) == ((window, every) == (128, 2))
    assert not launch.unsupported and not launch.unknown


def test_a_window_open_to_the_right_is_priced_causal_and_said(tmp_path):
    launch = read_launch(_args_file(tmp_path, "--window-size", "127,4", "--window-attn-skip-freq", "2"), "megatron")
    assert launch.model is GPT_OSS
    assert [u.name for u in launch.unsupported] == ["--window-size 127,4"]
    assert "127,0" in launch.unsupported[0].priced


@pytest.mark.parametrize("extra,needle", [
    (("--window-size", "127,0", "--window-attn-skip-freq", "[1,0,0]+[1,0]*16+[1]"), "every N-th layer"),
    (("--window-size", "127,0", "--window-attn-skip-freq", "[1,0]*3"), "one bit per layer (36"),
    (("--window-size", "127",), "two integers L,R"),
])
def test_window_settings_planner_does_not_price_are_refused(tmp_path, extra, needle):
    with pytest.raises(PlannerInputError, match=r"--window-") as err:
        read_launch(_args_file(tmp_path, *extra), "megatron")
    assert needle in str(err.value)


def test_model_flag_with_another_window_is_said(tmp_path):
    launch = read_launch(_args_file(tmp_path, "--window-size", "4095,0"), "megatron", model=GPT_OSS)
    assert "--window-size 4095,0" in launch.model_note


# ----------------------------------------------------------------------------------- Megatron-Bridge


def _bridge_model(tmp_path, rec, model) -> dict:
    export(rec, model, tmp_path, formats="megatron-bridge")
    return yaml.safe_load((tmp_path / "megatron_bridge_overrides.yaml").read_text())["model"]


def test_bridge_overrides_carry_the_window_as_bridge_does(tmp_path):
    assert {k: v for k, v in _bridge_model(tmp_path / "oss", _gpt_oss_record(), GPT_OSS).items() if "window" in k} \
        == {"window_size": [127, 0], "window_attn_skip_freq": 2}
    mistral = _mistral(tmp_path)
    got = _bridge_model(tmp_path / "mistral", record(mistral, tp=2, dp=4, gbs=16, seq_len=8192), mistral)
    assert (got["window_size"], got["window_attn_skip_freq"]) == ([4095, 0], None)


def test_bridge_overrides_clear_a_recipe_window_for_a_model_without_one(tmp_path):
    from test_export import LLAMA3_8B

    got = _bridge_model(tmp_path, record(LLAMA3_8B, tp=2, dp=4, gbs=16), LLAMA3_8B)
    assert "window_size" in got and got["window_size"] is None and got["window_attn_skip_freq"] is None


def test_bridge_override_strings_read_the_window(tmp_path):
    path = tmp_path / "run.sh"
    path.write_text("python run_recipe.py --recipe gpt_oss_120b_pretrain_config model.window_size=[4095,0] "
                    "model.window_attn_skip_freq=2\n")
    launch = read_launch(path, "nemo")
    assert launch.model is GPT_OSS
    assert launch.model_note.startswith("gpt_oss_120b_pretrain_config = catalog preset gpt-oss-120b, in place of")
    assert "model.window_size [4095, 0]" in launch.model_note


# ----------------------------------------------------------------------------------- refusals


def test_torchtitan_refuses_a_windowed_model_and_names_the_window(tmp_path):
    rec = titan(LLAMA3_8B_WINDOWED, tp=2, dp=4, gbs=16)
    with pytest.raises(PlannerInputError) as err:
        export(rec, LLAMA3_8B_WINDOWED, tmp_path, formats="torchtitan")
    text = str(err.value)
    assert "torchtitan_sliding_window" in text and "4096-key sliding window on 24 of 32 layers" in text
    assert "--format megatron" in text
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("model_name", ["gpt-oss-120b", "mistral"])
def test_deepspeed_refuses_a_windowed_model_and_names_the_window(tmp_path, model_name):
    model = GPT_OSS if model_name == "gpt-oss-120b" else _mistral(tmp_path)
    rec = _gpt_oss_record(zero=1) if model is GPT_OSS else record(model, dp=8, gbs=16, seq_len=8192)
    out = tmp_path / "out"
    with pytest.raises(PlannerInputError) as err:
        export(rec, model, out, formats="deepspeed")
    expected = ("a 128-key sliding window on 18 of 36 layers (full attention every 2)" if model is GPT_OSS
                else "a 4096-key sliding window on every layer")
    assert "deepspeed_model_kind" in str(err.value) and expected in str(err.value)
    assert not out.exists() or not any(out.iterdir())


def test_deepspeed_reader_says_megatron_deepspeed_builds_no_window(tmp_path):
    from test_export import LLAMA3_8B

    export(record(LLAMA3_8B, dp=8, gbs=16, grad_accum_pass="cast_add", grad_reduce="all_reduce"), LLAMA3_8B, tmp_path, formats="deepspeed")
    launch = read_launch(tmp_path / "deepspeed_config.json", model=GPT_OSS)
    assert "128-key sliding window on 18 of 36 layers" in launch.model_note
    assert "window" not in read_launch(tmp_path / "deepspeed_config.json", model=LLAMA3_8B).model_note


def test_torchtitan_reader_says_its_llama3_attends_no_window(tmp_path):
    from test_export import LLAMA3_8B

    export(titan(LLAMA3_8B, tp=2, dp=4, gbs=16), LLAMA3_8B, tmp_path, formats="torchtitan")
    launch = read_launch(tmp_path / "torchtitan.toml", model=GPT_OSS)
    assert "128-key sliding window on 18 of 36 layers" in launch.model_note and "llama3" in launch.model_note
    # torchtitan's own gpt_oss model (0.2.2 models/gpt_oss: layer_id % 2 == 0 windowed, 128 keys) is gpt-oss's window
    text = (tmp_path / "torchtitan.toml").read_text()
    (tmp_path / "oss.toml").write_text(text.replace('name = "llama3"', 'name = "gpt_oss"'))
    assert 'name = "gpt_oss"' in (tmp_path / "oss.toml").read_text()
    assert "window" not in read_launch(tmp_path / "oss.toml", model=GPT_OSS).model_note
