"""NeMo 2 / Megatron-Bridge: the Megatron table under Megatron-Bridge's names.

A Megatron-Bridge ``ConfigContainer`` (src/megatron/bridge/training/config.py) holds Megatron-Core's
own config objects: ``model`` (a GPTModelProvider: TransformerConfig + ModelParallelConfig fields),
``ddp`` (DistributedDataParallelConfig), ``optimizer``, ``train`` (batch), ``dataset``,
``comm_overlap`` (CommOverlapConfig) and ``mixed_precision`` (a preset name). Megatron-Core's field
names are Megatron-LM's argparse dests, so a Bridge key is ``SECTIONS[dest] + "." + RENAMES.get(dest,
dest)``: the renames and the sections are listed once, here (as Megatron-LM's argument_utils.py
lists its own), and both the exporter (``planner/export/bridge.py``) and the reader
(``planner/launch/nemo.py``) use them. Checked against Megatron-Bridge ``RELEASE``'s
docs/megatron-lm-to-megatron-bridge.md and config dataclasses (tests/data/megatron_bridge).
"""

from __future__ import annotations

RELEASE = "0.2.0"
COMMIT_2509 = "6307e8a37"
"""Megatron-Bridge in the 25.09 container (the commit ``planner.frameworks.profiles`` cites for the
25.09 performance scripts; its uv.lock pins Megatron-Core 0.15.0rc6). It spells a few settings otherwise
than v0.2.0, the release the Bridge file is written for (``planner/export/bridge.py``)."""
SOURCE = f"Megatron-Bridge v{RELEASE} src/megatron/bridge/training/config.py; docs/megatron-lm-to-megatron-bridge.md"

MEGATRON_FSDP_FUSION = (
    "Megatron-Bridge v0.2.0 src/megatron/bridge/training/config.py ConfigContainer.validate: with use_megatron_fsdp, "
    "'Gradient accumulation fusion is not supported with Megatron FSDP, setting to False' "
    "(self.model.gradient_accumulation_fusion = False; added 782bfd9b7, removed cac49dcd7, re-added 55307dd02 "
    "pending TransformerEngine#2371, removed d0c4044a8)")
"""Why the Bridge file states Megatron-FSDP (ZeRO-2/3) as the Megatron rows do, with
``gradient_accumulation_fusion: false`` and ``grad_accum_pass main_grad_copy`` (Megatron-Core
megatron_fsdp.py ``_grad_acc``): v0.2.0, the release this format writes, turns the fusion off
itself whatever the config says (so do v0.2.0rc2-rc4 and v0.3.x). 25.09 (fa0315ae / 6307e8a37,
between cac49dcd7 and 55307dd02) and v0.4.0 on leave it on: the 25.09 reference rows run the
wgrad GEMM's accumulation (fused), and a plan written for v0.2.0 does not."""

RENAMES = {
    "num_experts": "num_moe_experts",
    "decoder_first_pipeline_num_layers": "num_layers_in_first_pipeline_stage",
    "decoder_last_pipeline_num_layers": "num_layers_in_last_pipeline_stage",
    "num_virtual_stages_per_pipeline_rank": "virtual_pipeline_model_parallel_size",
    "swiglu": "gated_linear_unit",
    "use_nccl_ub": "nccl_ub",
}
"""Megatron-LM dest -> Megatron-Core / Bridge field, where they differ (same value)."""

NEGATED = {
    "untie_embeddings_and_output_weights": "share_embeddings_and_output_weights",
    "disable_bias_linear": "add_bias_linear",
    "grad_reduce_in_bf16": "grad_reduce_in_fp32",
    "no_gradient_accumulation_fusion": "gradient_accumulation_fusion",
    "no_overlap_p2p_communication": "overlap_p2p_comm",
}
"""Megatron-LM switch -> the Bridge field it sets to false."""

SECTIONS = {
    "micro_batch_size": "train", "global_batch_size": "train",
    "use_distributed_optimizer": "ddp", "overlap_grad_reduce": "ddp", "overlap_param_gather": "ddp",
    "use_megatron_fsdp": "ddp", "data_parallel_sharding_strategy": "ddp",
    "num_distributed_optimizer_instances": "ddp", "grad_reduce_in_bf16": "ddp", "use_nccl_ub": "ddp",
    "use_torch_fsdp2": "dist",
    "tp_comm_overlap": "comm_overlap", "overlap_moe_expert_parallel_comm": "comm_overlap",
    "delay_wgrad_compute": "comm_overlap", "no_overlap_p2p_communication": "comm_overlap",
    "ckpt_format": "checkpoint",
}
"""Megatron-LM dest -> the ConfigContainer section holding it (``model`` where not listed)."""

ALSO = {"use_distributed_optimizer": ("optimizer.use_distributed_optimizer",)}
"""Fields Megatron-Bridge keeps in step with another (the guide: "settings are synchronized")."""

IMPLIED = {"cpu_offloading_num_layers": (("model.cpu_offloading", True), ("model.cpu_offloading_activations", True),
                                         ("model.cpu_offloading_weights", False))}
"""Fields Megatron-LM's validate_args sets from a dest (--cpu-offloading-num-layers > 0 turns
cpu_offloading on) that a Bridge config states itself (TransformerConfig.cpu_offloading*; weights
stay on the GPU, as planner prices activation offload only)."""

MOVED_VALUES = {("moe_enable_deepep", True): ("model.moe_flex_dispatcher_backend", "deepep")}
"""Megatron-LM settings Bridge spells with another field and value (DeepEP as the flex backend)."""

RECIPE_RESETS = {
    "num_virtual_stages_per_pipeline_rank": None, "pipeline_model_parallel_layout": None,
    "decoder_first_pipeline_num_layers": None,
    "decoder_last_pipeline_num_layers": None, "account_for_embedding_in_pipeline_split": False,
    "account_for_loss_in_pipeline_split": False, "hierarchical_context_parallel_sizes": None,
    "recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None, "recompute_modules": None,
    "num_distributed_optimizer_instances": 1, "moe_expert_capacity_factor": None, "mtp_num_layers": None,
    "cuda_graph_impl": "none", "cp_comm_type": "p2p", "window_size": None, "window_attn_skip_freq": None,
}
"""Megatron-LM dest -> Megatron-Core's default (model_parallel_config.py, transformer_config.py,
distributed_data_parallel_config.py; recompute_modules None means ["core_attn"]), written where the
plan leaves the setting at that default. The overrides are merged over a recipe, and a key left out
keeps the recipe's value: Megatron-Bridge v0.2.0 recipes/llama/llama3.py sets VPP 5 for Llama 3 70B
and VPP 2 with account_for_embedding/loss_in_pipeline_split for 405B (which TransformerConfig refuses
next to num_layers_in_first/last_pipeline_stage); recipes/olmoe/olmoe_7b.py sets a
pipeline_model_parallel_layout, which places the layers itself; models/gpt_oss/gpt_oss_provider.py sets
window_size (128, 0) and window_attn_skip_freq 2, which a model priced without them (or with another
window) must not inherit."""

GLU_CLAMP = "activation_func_clamp_value"
"""TransformerConfig field of ``ModelSpec.glu_clamp`` (Megatron-Core transformer_config.py), which
Megatron-LM's arguments.py has no flag for. The Bridge exporter writes it for every MoE model, null
where the model has none: models/gpt_oss/gpt_oss_provider.py sets 7.0, which a model priced without
a clamp must not inherit; the NeMo / Bridge reader reads it back."""

MOE_ONLY = frozenset({"moe_expert_capacity_factor"})
"""``RECIPE_RESETS`` dests that exist for a MoE model only."""

MLA_RECIPES = {
    "deepseek": ("deepseek_v3_pretrain_config", "megatron.bridge.recipes.deepseek",
                 "DeepSeekV3ModelProvider"),
}
"""Model family -> (recipe function, its module, its provider class) for multi-latent attention
(the recipe to merge an MLA plan's overrides over). MLA is a provider's class, not a switch: the
MLA fields (q_lora_rank, kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim) exist on
``MLATransformerConfig`` (models/transformer_config.py), which models/deepseek/deepseek_provider.py
``DeepSeekModelProvider`` subclasses and a ``GPTModelProvider`` (Llama, Qwen recipes) does not. v0.2.0
recipes/deepseek/deepseek_v3.py ``deepseek_v3_pretrain_config`` builds its provider from the
Hugging Face config through models/deepseek/deepseek_v3_bridge.py (DeepseekV3ForCausalLM ->
DeepSeekV3ModelProvider, so any checkpoint of that architecture, e.g. Kimi K2, via its hf_path);
25.09 (6307e8a37) names it ``pretrain_config`` in the same file and builds DeepSeekV3ModelProvider
directly. The exporter writes every MLA dimension, so the provider's own values do not matter, only
its class. An MLA model of another family has no such recipe: the export refuses it (``bridge_mla``)."""

PRECISION_PRESETS = {"bf16": "bf16_mixed", "fp8": "bf16_with_fp8_delayed_scaling_mixed"}
"""planner precision -> Bridge mixed_precision preset (training/mixed_precision.py, @register)."""

FP8_PRESETS = {"delayed": "bf16_with_fp8_delayed_scaling_mixed", "current": "bf16_with_fp8_current_scaling_mixed",
               "blockwise": "bf16_with_fp8_subchannel_scaling_mixed", "mxfp8": "bf16_with_mxfp8_mixed",
               "nvfp4": "bf16_with_nvfp4_mixed"}
"""planner fp8_recipe -> Bridge preset (training/mixed_precision.py: fp8_recipe delayed, tensorwise,
blockwise, mxfp8; tests/data/megatron_bridge/0.2.0/mixed_precision.py)."""


FP8_PRESET_PARAMS = {"delayed": True, "current": True, "blockwise": False, "mxfp8": True, "nvfp4": False}
"""planner fp8_recipe -> the fp8_param_gather its Bridge preset sets (FP8 parameters; v0.2.0
training/mixed_precision.py: bf16_with_fp8_delayed_scaling_mixed, bf16_with_fp8_current_scaling_mixed and
bf16_with_mxfp8_mixed True, bf16_with_fp8_subchannel_scaling_mixed and bf16_with_nvfp4_mixed False;
``MixedPrecisionConfig.setup`` copies it over the model's and the DDP config's own field)."""


def precision_preset(precision: str, fp8_recipe: str) -> str:
    """The mixed_precision preset a plan runs with."""
    return FP8_PRESETS[fp8_recipe] if precision == "fp8" else PRECISION_PRESETS[precision]


def key(dest: str) -> str:
    """The ConfigContainer key of a Megatron-LM dest."""
    name = NEGATED.get(dest) or RENAMES.get(dest, dest)
    return f"{SECTIONS.get(dest, 'model')}.{name}"


def settings(dest: str, value) -> list[tuple[str, object]]:
    """Bridge (key, value) pairs for one Megatron-LM (dest, value)."""
    if not isinstance(value, list) and (dest, value) in MOVED_VALUES:
        return [MOVED_VALUES[(dest, value)]]
    if dest in NEGATED:
        return [(key(dest), not value)]
    implied = list(IMPLIED.get(dest, ())) if value not in (None, 0, False) else []
    return [(key(dest), value)] + [(k, value) for k in ALSO.get(dest, ())] + implied


def reading_renames() -> dict:
    """Bridge / NeMo field -> Megatron-LM dest (the reader's direction of ``RENAMES``)."""
    return {field: dest for dest, field in RENAMES.items()}
