"""Sliding-window review: what a user met using the window (HF configs, launch files read back
with --model or a recipe, validate's runs rows). Expectations by hand from the sources:

* transformers configuration_utils ``layer_type_validation``: ``layer_types`` holds one entry per
  layer (``num_hidden_layers``), else the config does not load.
* Megatron-LM arguments.py: ``--window-size`` defaults to None, so a Megatron-LM command line
  without it trains every layer on its whole causal prefix.
* planner's Megatron-Bridge exporter writes ``model.window_size: null`` to clear a recipe's window
  (Megatron-Bridge gpt_oss_provider.py sets (128, 0)); a reader must not drop that null.
* TransformerEngine context_parallel.py: a window under CP runs only as a2a or all_gather; an
  unstated comm type is priced as the search prices it (a2a where the heads split), a stated p2p
  is refused with rule ``sliding_window_cp_comm_type``.
"""

from __future__ import annotations

import pytest

from hardware_catalog.errors import PlannerInputError
from hardware_catalog.hf_config import model_from_hf_config

from test_sliding_window import GPT_OSS_HF  # openai/gpt-oss-120b config.json, the keys the reader uses


def test_layer_types_of_another_length_than_the_layers_is_refused():
    # 35 entries for 36 layers: transformers refuses the config; planner used to price layer 36
    # as if the pattern went on (18 windowed of 36) without a word.
    short = {**GPT_OSS_HF, "layer_types": GPT_OSS_HF["layer_types"][:35]}
    with pytest.raises(PlannerInputError, match=r"'layer_types' lists 35 layers; num_hidden_layers is 36"):
        model_from_hf_config(short, "short")
    long = {**GPT_OSS_HF, "layer_types": GPT_OSS_HF["layer_types"] * 2}
    with pytest.raises(PlannerInputError, match=r"lists 72 layers; num_hidden_layers is 36"):
        model_from_hf_config(long, "long")
    # The matching list still reads: full at 1-based layers 2, 4, ..., 36.
    ok = model_from_hf_config(GPT_OSS_HF, "ok")
    assert (ok.sliding_window, ok.full_attention_every, ok.windowed_layers) == (128, 2, 18)


# ----------------------------------------------------------------------------------- launch files


def _megatron_args(tmp_path, *extra: str):
    """Llama 3 8B as Megatron-LM arguments (no --window-size: every layer attends its whole prefix)."""
    words = ["--num-layers", "32", "--hidden-size", "4096", "--ffn-hidden-size", "14336", "--num-attention-heads", "32",
             "--group-query-attention", "--num-query-groups", "8", "--swiglu", "--normalization", "RMSNorm",
             "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights", "--seq-length", "8192",
             "--max-position-embeddings", "131072", "--tokenizer-type", "NullTokenizer", "--vocab-size", "128255",
             "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", *extra]
    path = tmp_path / "args.txt"
    path.write_text(" ".join(words) + "\n")
    return path


def test_model_flag_with_a_window_over_a_megatron_file_without_one_is_said(tmp_path):
    from hardware_catalog import get_model
    from planner.launch import read_launch

    llama = get_model("llama3-8b")
    windowed = llama.model_copy(update={"name": "llama3-8b-swa", "sliding_window": 1024})
    # The file trains no window (arguments.py: --window-size default None); --model prices one.
    launch = read_launch(_megatron_args(tmp_path), "megatron", model=windowed)
    assert launch.model is windowed
    assert "in place of the file's shape (no --window-size)" in launch.model_note
    # The same model without a window: nothing to say.
    assert "window" not in read_launch(_megatron_args(tmp_path), "megatron", model=llama).model_note
    # A skip frequency above the layer count windows every layer, as none does: the same model.
    every = windowed.model_copy(update={"full_attention_every": 64})
    launch = read_launch(_megatron_args(tmp_path, "--window-size", "1023,0"), "megatron", model=every)
    assert "window" not in launch.model_note
    launch = read_launch(_megatron_args(tmp_path, "--window-size", "1023,0", "--window-attn-skip-freq", "2"),
                         "megatron", model=every)
    assert "--window-size 1023,0, --window-attn-skip-freq 2" in launch.model_note


def test_a_bridge_window_null_clears_the_recipe_window_and_is_said(tmp_path):
    from planner.launch import read_launch

    # planner's Bridge exporter writes window_size null for a model without a window, so that a
    # recipe's window (gpt-oss: (127, 0) on alternate layers) is not inherited; read back, the
    # recipe's preset is priced (the shape given away, as for its other fields) and the null said.
    path = tmp_path / "run.sh"
    path.write_text("python run_recipe.py --recipe gpt_oss_120b_pretrain_config model.window_size=null "
                    "model.window_attn_skip_freq=null\n")
    launch = read_launch(path, "nemo")
    assert launch.model.name == "gpt-oss-120b"
    assert "in place of the file's shape (model.window_size null)" in launch.model_note
    assert not any("window" in n for n in launch.notes)  # the null skip frequency is no "skip frequency without a window"
    # Left to the recipe (no window key): its window, nothing to say.
    path.write_text("python run_recipe.py --recipe gpt_oss_120b_pretrain_config\n")
    assert "window" not in read_launch(path, "nemo").model_note
    # A config YAML with no recipe: the shape is the file's, and null is no window.
    yaml_path = tmp_path / "cfg.yaml"
    yaml_path.write_text("model:\n  num_layers: 32\n  hidden_size: 4096\n  ffn_hidden_size: 14336\n"
                         "  num_attention_heads: 32\n  num_query_groups: 8\n  gated_linear_unit: true\n"
                         "  normalization: RMSNorm\n  position_embedding_type: rope\n  vocab_size: 128256\n"
                         "  seq_length: 8192\n  window_size: null\n  window_attn_skip_freq: null\n"
                         "train:\n  micro_batch_size: 1\n  global_batch_size: 64\n")
    launch = read_launch(yaml_path, "nemo")
    assert launch.model.sliding_window is None and not any("window" in n for n in launch.notes)


# ----------------------------------------------------------------------------------- validate


def _oss_row(**layout) -> dict:
    return {"id": "oss", "gpu": "H100", "num_gpus": 16, "model": "gpt-oss-20b", "seq_len": 16384, "gbs": 64,
            "tp": 1, "pp": 1, "cp": 2, "ep": 8, "mbs": 1, "zero": 1, "recompute": "full",
            "tokens_per_s_per_gpu": 5000, **layout}


def test_validate_prices_a_windowed_rows_cp_as_evaluate_does():
    from planner.validate import validate_rows

    # Unstated: TransformerEngine cannot run the p2p default with a window; a2a splits gpt-oss's
    # 64 query / 8 KV heads over 2 CP ranks (tp 1), so a2a, as evaluate and search price it. The
    # row used to be "not mapped" (no layout the rules allow).
    (res,) = validate_rows([_oss_row()])
    assert res.error is not None, res.reason
    assert res.values["cp_comm_type"] == "a2a"
    # TP 8 leaves one KV head per rank, which a2a cannot split: allgather.
    (res,) = validate_rows([_oss_row(tp=8, ep=1, num_gpus=16)])
    assert res.error is not None, res.reason
    assert res.values["cp_comm_type"] == "allgather"
    # Stated p2p is refused with the rule (it was priced as a2a while saying "p2p (stated)").
    (res,) = validate_rows([_oss_row(settings={"cp_comm_type": "p2p"})])
    assert res.error is None and "sliding_window_cp_comm_type" in res.reason
    # Stated allgather stays allgather.
    (res,) = validate_rows([_oss_row(settings={"cp_comm_type": "allgather"})])
    assert res.values["cp_comm_type"] == "allgather"


def test_qwen2_max_window_layers_as_transformers_reads_it():
    # transformers Qwen2Config: without layer_types, layer i (0-based) is "sliding_attention" where
    # use_sliding_window and i >= max_window_layers, so max_window_layers >= num_hidden_layers (the
    # Qwen2.5 configs ship 28 of 28) windows no layer; given layer_types, they decide.
    qwen = {**GPT_OSS_HF, "model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4096}
    qwen.pop("layer_types")
    for key in ("num_local_experts", "num_experts_per_tok", "head_dim", "attention_bias"):
        qwen.pop(key)
    assert model_from_hf_config({**qwen, "max_window_layers": 36}, "q").sliding_window is None
    assert model_from_hf_config({**qwen, "max_window_layers": 0}, "q").windowed_layers == 36
    with pytest.raises(PlannerInputError, match="max_window_layers=12"):
        model_from_hf_config({**qwen, "max_window_layers": 12}, "q")
    alternate = model_from_hf_config({**qwen, "max_window_layers": 12,
                                      "layer_types": ["sliding_attention", "full_attention"] * 18}, "q")
    assert (alternate.sliding_window, alternate.full_attention_every, alternate.windowed_layers) == (4096, 2, 18)


def test_torchtitan_gpt_oss_file_with_a_model_without_its_window_is_said(tmp_path):
    from planner.launch import read_launch
    from test_export import LLAMA3_8B, export, titan

    # torchtitan 0.2.2 models/gpt_oss/model: layer_id % 2 == 0 attends sliding_window_size 128;
    # --model without a window prices every layer on its whole prefix: said, as the reverse is.
    export(titan(LLAMA3_8B, tp=2, dp=4, gbs=16), LLAMA3_8B, tmp_path, formats="torchtitan")
    text = (tmp_path / "torchtitan.toml").read_text()
    (tmp_path / "oss.toml").write_text(text.replace('name = "llama3"', 'name = "gpt_oss"'))
    note = read_launch(tmp_path / "oss.toml", model=LLAMA3_8B).model_note
    assert "gpt_oss model attends a 128-key sliding window" in note and "priced without" in note
    assert "window" not in read_launch(tmp_path / "torchtitan.toml", model=LLAMA3_8B).model_note


def test_a_launch_files_p2p_with_a_window_is_refused_not_priced_as_a2a(tmp_path):
    """A Megatron-LM file runs the --cp-comm-type it states, or arguments.py's p2p default; with a
    window TransformerEngine refuses p2p (context_parallel.py attn_forward_func_with_cp), so the
    file is refused with the rule, as evaluate --cp-comm-type p2p is. It used to read "cp_comm_type
    p2p" and price a2a. Typed on the command line, another comm type replaces the file's."""
    from planner.cli.from_launch.resolve import resolve
    from planner.launch import read_launch

    args = ("--num-layers", "24", "--hidden-size", "2880", "--ffn-hidden-size", "2880", "--num-attention-heads", "64",
            "--group-query-attention", "--num-query-groups", "8", "--kv-channels", "64", "--swiglu",
            "--normalization", "RMSNorm", "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights",
            "--num-experts", "32", "--moe-router-topk", "4", "--moe-ffn-hidden-size", "2880", "--seq-length", "16384",
            "--max-position-embeddings", "131072", "--tokenizer-type", "NullTokenizer", "--vocab-size", "201087",
            "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--context-parallel-size", "2",
            "--expert-model-parallel-size", "8", "--recompute-granularity", "full", "--recompute-method", "uniform",
            "--recompute-num-layers", "1", "--window-size", "127,0", "--window-attn-skip-freq", "2")
    path = tmp_path / "args.txt"
    for extra in (("--cp-comm-type", "p2p"), ()):  # stated, and the default
        path.write_text(" ".join(args + extra) + "\n")
        launch = read_launch(path, "megatron")
        assert launch.values["cp_comm_type"] == "p2p"
        with pytest.raises(PlannerInputError, match="sliding_window_cp_comm_type"):
            resolve(launch, gpus=16, gpu="h100")
    path.write_text(" ".join(args + ("--cp-comm-type", "a2a")) + "\n")
    assert resolve(read_launch(path, "megatron"), gpus=16, gpu="h100").layout.cp_comm_type == "a2a"


def test_gpt_oss_config_without_layer_types_alternates_as_transformers_does():
    # transformers configuration_gpt_oss.py: layer_types None -> "sliding_attention" if (i + 1) % 2
    # else "full_attention" (0-based), i.e. 1-based layers 2, 4, ..., 36 full: 18 of 36 windowed,
    # not the window on every layer that a Mistral config without layer_types means.
    bare = {k: v for k, v in GPT_OSS_HF.items() if k != "layer_types"}
    m = model_from_hf_config(bare, "oss")
    assert (m.sliding_window, m.full_attention_every, m.windowed_layers) == (128, 2, 18)
    mistral = {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
               "max_position_embeddings": 32768, "sliding_window": 4096}
    assert model_from_hf_config(mistral, "m").windowed_layers == 32


def test_qwen_window_switch_defaults_as_transformers():
    # transformers Qwen2Config / Qwen3Config: use_sliding_window defaults to false (the window is
    # off unless switched on), max_window_layers to 28. Mistral has no switch: its window is on.
    base = {"model_type": "qwen2", "hidden_size": 4096, "num_hidden_layers": 28, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
            "max_position_embeddings": 32768, "sliding_window": 4096}
    assert model_from_hf_config(base, "q").sliding_window is None
    assert model_from_hf_config({**base, "model_type": "qwen3"}, "q").sliding_window is None
    assert model_from_hf_config({**base, "model_type": "mistral"}, "m").windowed_layers == 28
    # Switched on without max_window_layers: 28 covers all 28 layers, so no window; 36 layers
    # leave 8 windowed above 28 full, a pattern planner does not price (refused, naming 28).
    assert model_from_hf_config({**base, "use_sliding_window": True}, "q").sliding_window is None
    with pytest.raises(PlannerInputError, match="max_window_layers=28"):
        model_from_hf_config({**base, "use_sliding_window": True, "num_hidden_layers": 36}, "q")
