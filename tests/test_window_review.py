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

GPT_OSS_HF = {  # openai/gpt-oss-120b config.json, the keys the reader uses
    "model_type": "gpt_oss", "num_hidden_layers": 36, "hidden_size": 2880, "num_attention_heads": 64,
    "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "vocab_size": 201088,
    "max_position_embeddings": 131072, "num_local_experts": 128, "num_experts_per_tok": 4,
    "attention_bias": True, "tie_word_embeddings": False, "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
}


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
