"""Review of ``planner export`` as a cluster user launches its files: what a framework does with
settings the file leaves out, what the launch instructions must say, and layouts the pinned
Megatron-LM stops at start (its validate_args and TransformerConfig.__post_init__ assert against
them: the export refuses them naming the rule, instead of writing a job that dies).

Megatron-Bridge merges ``megatron_bridge_overrides.yaml`` over a recipe's ConfigContainer, so a
layout setting the file leaves out keeps the recipe's value, not Megatron-Core's default. The
recipes that matter here (Megatron-Bridge v0.2.0 src/megatron/bridge/recipes/llama/llama3.py):
``llama3_70b_pretrain_config`` sets virtual_pipeline_model_parallel_size 5;
``llama31_405b_pretrain_config`` sets VPP 2 and account_for_embedding/loss_in_pipeline_split True,
which TransformerConfig refuses next to num_layers_in_first/last_pipeline_stage
(megatron/core/transformer/transformer_config.py __post_init__).
"""

from __future__ import annotations

import json

import pytest
import yaml

from hardware_catalog.errors import PlannerInputError

from test_export import DEEPSEEK_LIKE, LLAMA3_405B, LLAMA3_8B, MIXTRAL, dense_405b, export, record


def _bridge(tmp_path, rec, model) -> dict:
    export(rec, model, tmp_path, formats="megatron-bridge")
    return yaml.safe_load((tmp_path / "megatron_bridge_overrides.yaml").read_text())


def _merged_over(recipe: dict, overrides: dict) -> dict:
    """What OmegaConf.merge(recipe, overrides) leaves in ``model`` (nested dicts, the override wins)."""
    return {**recipe, **overrides["model"]}


def test_bridge_overrides_reset_a_recipes_interleaving_for_a_plan_without_it(tmp_path):
    # Llama 3 70B's recipe runs VPP 5; a plan with pp 4 and no interleaving must say so.
    recipe = {"pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 5}
    model = _merged_over(recipe, _bridge(tmp_path, record(LLAMA3_8B, tp=2, pp=4, dp=1, gbs=8), LLAMA3_8B))
    assert model["pipeline_model_parallel_size"] == 4
    assert model["virtual_pipeline_model_parallel_size"] is None


def test_bridge_overrides_uneven_stages_clear_the_405b_recipes_embedding_accounting(tmp_path):
    # 405B as trained (7-layer first/last stages over PP16): the recipe's account_for_* = True must
    # be turned off, or TransformerConfig raises next to num_layers_in_first_pipeline_stage.
    recipe = {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True,
              "virtual_pipeline_model_parallel_size": 2}
    model = _merged_over(recipe, _bridge(tmp_path, dense_405b(), LLAMA3_405B))
    assert (model["num_layers_in_first_pipeline_stage"], model["num_layers_in_last_pipeline_stage"]) == (7, 7)
    assert model["account_for_embedding_in_pipeline_split"] is False
    assert model["account_for_loss_in_pipeline_split"] is False
    assert model["virtual_pipeline_model_parallel_size"] is None


def test_bridge_overrides_clear_a_recipes_pipeline_layout_string(tmp_path):
    # recipes/olmoe/olmoe_7b.py (v0.2.0) sets pipeline_model_parallel_layout, which places the layers
    # itself: left in, it replaces the plan's split (even or 7/.../7).
    recipe = {"pipeline_model_parallel_layout": "Et*4|t*4|t*4|t*4L"}
    for out, rec, model in ((tmp_path / "even", record(LLAMA3_8B, tp=2, pp=4, dp=1, gbs=8), LLAMA3_8B),
                            (tmp_path / "uneven", dense_405b(), LLAMA3_405B)):
        assert _merged_over(recipe, _bridge(out, rec, model))["pipeline_model_parallel_layout"] is None


def test_bridge_overrides_selective_recompute_clears_a_recipes_full_recompute(tmp_path):
    # TransformerConfig: selective granularity needs recompute_num_layers None; the modules go back
    # to Megatron-Core's default (None -> ["core_attn"]) unless the plan names others.
    recipe = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1,
              "recompute_modules": ["mlp"]}
    model = _merged_over(recipe, _bridge(tmp_path, record(LLAMA3_8B, tp=2, dp=4, gbs=8), LLAMA3_8B))
    assert model["recompute_granularity"] == "selective"
    assert model["recompute_method"] is None and model["recompute_num_layers"] is None
    assert model["recompute_modules"] is None
    none = _merged_over(recipe, _bridge(tmp_path / "none", record(LLAMA3_8B, tp=2, dp=4, gbs=8, recompute="none"),
                                        LLAMA3_8B))
    assert none["recompute_granularity"] is None and none["recompute_num_layers"] is None


def test_a_format_whose_files_refuse_for_different_rules_names_every_rule(tmp_path):
    # --framework torchtitan-0.2 targets the TOML: the 0.3 command line is refused for its release
    # (torchtitan_cli_release) and the TOML for the layout (ZeRO-1: torchtitan_no_zero1). The error
    # must name the layout's rule too, not only the first file's, and first: the TOML is the file
    # 0.2 reads, so its rule is why the layout cannot run (the search's domain names that one).
    rec = record(LLAMA3_8B, tp=2, dp=4, gbs=8, loss="eager", recompute="full")
    with pytest.raises(PlannerInputError) as err:
        export(rec, LLAMA3_8B, tmp_path, formats="torchtitan", options={"torchtitan_version": "0.2"})
    assert str(err.value).endswith("(rule torchtitan_no_zero1, torchtitan_cli_release)")


def _deepspeed_instruction(tmp_path, rec, model) -> str:
    export(rec, model, tmp_path, formats="deepspeed")
    comment = json.loads((tmp_path / "deepspeed_config.json").read_text())["_comment"]
    return next(line for line in comment if line.startswith("Pass the same layout"))


def test_deepspeed_launch_instruction_states_sequence_parallelism_and_recompute(tmp_path):
    # Megatron-DeepSpeed's --sequence-parallel and --recompute-granularity default off
    # (microsoft/Megatron-DeepSpeed megatron/arguments.py), and the config has no key for them: the
    # command-line instruction must carry them, or the job runs a layout that was not priced.
    line = _deepspeed_instruction(tmp_path, record(LLAMA3_8B, tp=2, dp=4, gbs=8, grad_accum_pass="cast_add", grad_reduce="all_reduce"), LLAMA3_8B)
    assert "sequence parallelism on" in line and "selective recompute" in line
    line = _deepspeed_instruction(tmp_path / "b", record(LLAMA3_8B, tp=2, dp=4, gbs=8, sequence_parallel=False,
                                                         recompute="full", grad_accum_pass="cast_add", grad_reduce="all_reduce"), LLAMA3_8B)
    assert "sequence parallelism off" in line and "full recompute" in line


def test_deepspeed_launch_instruction_states_dropless_experts(tmp_path):
    # Megatron-DeepSpeed drops tokens past capacity factor 1.0 unless --disable-moe-token-dropping
    # (megatron/arguments.py --moe-train-capacity-factor 1.0): a dropless plan must say so.
    line = _deepspeed_instruction(tmp_path, record(MIXTRAL, tp=2, dp=4, ep=4, gbs=8, grad_accum_pass="cast_add", grad_reduce="all_reduce"), MIXTRAL)
    assert "dropless" in line
    line = _deepspeed_instruction(tmp_path / "c", record(MIXTRAL, tp=2, dp=4, ep=4, gbs=8, moe_capacity_factor=1.25,
                                                         grad_accum_pass="cast_add", grad_reduce="all_reduce"), MIXTRAL)
    assert "capacity factor 1.25" in line


def test_fsdp2_with_tied_embeddings_is_refused_for_megatron(tmp_path):
    # Megatron-LM megatron/training/arguments.py validate_args: "--use-torch-fsdp2 requires
    # --untie-embeddings-and-output-weights"; untying would train another model, so the export refuses.
    tied = LLAMA3_8B.model_copy(update={"name": "tied-8b", "tied_embeddings": True})
    rec = record(tied, tp=2, dp=4, gbs=8, zero=3, fsdp="fsdp2", recompute="full", grad_accum_pass="autograd")
    with pytest.raises(PlannerInputError, match="megatron_fsdp2_tied_embeddings"):
        export(rec, tied, tmp_path, formats="megatron")
    untied = record(LLAMA3_8B, tp=2, dp=4, gbs=8, zero=3, fsdp="fsdp2", recompute="full", grad_accum_pass="autograd")
    report = export(untied, LLAMA3_8B, tmp_path / "untied", formats="megatron")  # untied: written
    assert "--use-torch-fsdp2" in report.written[0].read_text()


def test_fp8_delayed_scaling_with_layernorm_or_moe_act_recompute_is_refused(tmp_path):
    # Megatron-Core transformer_config.py __post_init__: "Delayed scaling does not support moe_act and
    # layernorm recompute for fp8." The other recipes (tensorwise here) pass that check.
    rec = record(LLAMA3_8B, tp=2, dp=4, gbs=8, precision="fp8", fp8_recipe="delayed", recompute_modules=["layernorm"])
    with pytest.raises(PlannerInputError, match="megatron_fp8_delayed_recompute_modules"):
        export(rec, LLAMA3_8B, tmp_path, formats="megatron")
    with pytest.raises(PlannerInputError, match="megatron_fp8_delayed_recompute_modules"):
        export(rec, LLAMA3_8B, tmp_path, formats="megatron-bridge")
    ok = record(LLAMA3_8B, tp=2, dp=4, gbs=8, precision="fp8", fp8_recipe="current", recompute_modules=["layernorm"])
    text = export(ok, LLAMA3_8B, tmp_path / "ok", formats="megatron").written[0].read_text()
    assert "--recompute-modules layernorm" in text and "--fp8-recipe tensorwise" in text


@pytest.mark.parametrize("layout,rule", [
    (dict(recompute="full"), "megatron_ep_overlap_recompute"),
    (dict(recompute_modules=["moe"]), "megatron_ep_overlap_recompute"),
    (dict(moe_dispatcher="allgather"), "megatron_ep_overlap_dispatcher"),
    (dict(ep=1, dp=4), "megatron_ep_overlap_needs_ep"),
])
def test_ep_comm_overlap_refused_where_transformer_config_asserts(tmp_path, layout, rule):
    # Megatron-Core transformer_config.py __post_init__, overlap_moe_expert_parallel_comm: expert
    # parallelism, an alltoall/flex dispatcher, no full recompute and no 'moe' recompute module.
    rec = record(MIXTRAL, **{"tp": 2, "dp": 4, "ep": 4, "gbs": 8, "ep_comm_overlap": True, **layout})
    for fmt in ("megatron", "megatron-bridge"):
        with pytest.raises(PlannerInputError, match=rule):
            export(rec, MIXTRAL, tmp_path, formats=fmt)
    ok = record(MIXTRAL, tp=2, dp=4, ep=4, gbs=8, ep_comm_overlap=True)
    assert "--overlap-moe-expert-parallel-comm" in export(ok, MIXTRAL, tmp_path / "ok", formats="megatron").written[0].read_text()


def test_interleaving_on_two_stages_needs_the_p2p_overlap(tmp_path):
    # Megatron-LM arguments.py validate_args: with an interleaved schedule and
    # --no-overlap-p2p-communication, "pipeline-model-parallel size should be greater than 2".
    rec = record(LLAMA3_8B, tp=2, pp=2, vpp=2, dp=2, gbs=8, p2p_comm_overlap=False)
    with pytest.raises(PlannerInputError, match="megatron_interleaved_p2p_overlap_pp2"):
        export(rec, LLAMA3_8B, tmp_path, formats="megatron")
    ok = record(LLAMA3_8B, tp=2, pp=4, vpp=2, dp=1, gbs=8, p2p_comm_overlap=False)
    assert "--no-overlap-p2p-communication" in export(ok, LLAMA3_8B, tmp_path / "ok", formats="megatron").written[0].read_text()


def test_cuda_graphs_with_attention_recompute_and_dropout_is_refused(tmp_path):
    # Megatron-Core transformer_config.py __post_init__: with a whole-layer CUDA graph (the default
    # scope), "attention dropout is not supported with graphed attention recomputation".
    dropout = LLAMA3_8B.model_copy(update={"name": "dropout-8b", "dropout": True})
    rec = record(dropout, tp=2, dp=4, gbs=8, cuda_graphs=True)  # selective recompute: core_attn
    with pytest.raises(PlannerInputError, match="megatron_cuda_graphs_attention_dropout"):
        export(rec, dropout, tmp_path, formats="megatron")
    ok = record(dropout, tp=2, dp=4, gbs=8, cuda_graphs=True, recompute_modules=["mlp"])
    assert "--cuda-graph-impl local" in export(ok, dropout, tmp_path / "ok", formats="megatron").written[0].read_text()


def test_hybrid_mamba_model_is_refused_for_megatron_lm_launchers(tmp_path):
    # Nemotron-H's layers are Mamba / attention / MLP blocks (hybrid_pattern); the Megatron-LM files
    # write GPT blocks for pretrain_gpt.py (no --hybrid-override-pattern, no --mamba-*): another
    # model. Megatron-LM trains hybrids with pretrain_mamba.py, which this export does not write.
    hybrid = LLAMA3_8B.model_copy(update={
        "name": "hybrid-4l", "num_layers": 4, "hybrid_pattern": "M*M-", "position_embedding": "none",
        "mamba": {"state_dim": 128, "head_dim": 64, "num_heads": 128, "num_groups": 8, "conv_kernel": 4, "chunk_size": 128}})
    rec = record(hybrid, tp=2, dp=4, gbs=8)
    for fmt in ("megatron", "torchrun", "slurm"):
        with pytest.raises(PlannerInputError, match="megatron_lm_hybrid_model"):
            export(rec, hybrid, tmp_path, formats=fmt)


def test_multi_token_prediction_layers_are_written_and_read_back(tmp_path):
    # The cost model prices ModelSpec.mtp_layers on the last stage (costmodel/mtp.py); Megatron-LM
    # builds them only with --mtp-num-layers (megatron/training/arguments.py), default none.
    from planner.launch import read_launch

    model = DEEPSEEK_LIKE.model_copy(update={"name": "deepseek-mtp", "mtp_layers": 1})
    rec = record(model, tp=2, dp=4, ep=8, gbs=8, recompute="full")
    path = export(rec, model, tmp_path, formats="megatron").written[0]
    assert "--mtp-num-layers 1" in path.read_text()
    assert read_launch(path).model.mtp_layers == 1
    plain = tmp_path / "plain.sh"
    plain.write_text(path.read_text().replace("  --mtp-num-layers 1\n", ""))
    assert read_launch(plain).model.mtp_layers == 0  # a script without it trains no MTP head


def test_deepspeed_refuses_models_megatron_deepspeed_cannot_build():
    """Megatron-DeepSpeed builds GPT layers only (microsoft/Megatron-DeepSpeed@f4157bea megatron/model):
    its config was written for MLA, MTP and hybrid Mamba models all the same."""
    import pytest

    from planner.export import deepspeed
    from planner.export.common import CannotExpress, build_plan
    from test_export import DEEPSEEK_LIKE, DGX_H100, LLAMA3_8B, record

    rec = record(DEEPSEEK_LIKE, tp=8, dp=8, ep=8, gbs=64, seq_len=4096, recompute="full")
    with pytest.raises(CannotExpress, match="multi-latent attention") as err:
        deepspeed.check(build_plan(rec, DEEPSEEK_LIKE, DGX_H100))
    assert err.value.rule == "deepspeed_model_kind"
    mtp = LLAMA3_8B.model_copy(update={"mtp_layers": 1})
    with pytest.raises(CannotExpress, match="multi-token-prediction"):
        deepspeed.check(build_plan(record(mtp, tp=2, dp=4, gbs=8), mtp, DGX_H100))
    deepspeed.check(build_plan(record(LLAMA3_8B, tp=2, dp=4, gbs=8), LLAMA3_8B, DGX_H100))  # a GPT model: written


def test_bridge_fp8_presets_say_what_they_run_beyond_the_plan():
    """Megatron-Bridge v0.2.0 training/mixed_precision.py: the delayed, current-scaling and MXFP8 presets
    set fp8_param_gather (the subchannel and NVFP4 ones do not) over the model and DDP configs, so a plan
    priced otherwise cannot be written as a preset; bf16_with_fp8_current_scaling_mixed also keeps the
    first and last layer in BF16, which the plan does not price, so the file says so."""
    from dataclasses import replace

    from planner.export import bridge
    from planner.export.common import build_plan
    from planner.export.common import CannotExpress
    from test_export import DGX_H100, LLAMA3_8B, record

    plan = build_plan(record(LLAMA3_8B, tp=2, dp=4, gbs=8), LLAMA3_8B, DGX_H100)
    assert "first_last_layers_bf16" not in bridge.render(plan)  # bf16: nothing to say

    def fp8(recipe, params):
        return replace(plan, layout=replace(plan.layout, precision="fp8", fp8_recipe=recipe, fp8_param_gather=params))

    current = bridge.render(fp8("current", True))
    assert "bf16_with_fp8_current_scaling_mixed" in current and "first_last_layers_bf16" in current
    delayed = bridge.render(fp8("delayed", True))
    assert "bf16_with_fp8_delayed_scaling_mixed" in delayed and "first_last_layers_bf16" not in delayed
    assert "bf16_with_fp8_subchannel_scaling_mixed" in bridge.render(fp8("blockwise", False))
    for recipe, params in (("delayed", False), ("current", False), ("blockwise", True)):
        with pytest.raises(CannotExpress, match="fp8_param_gather"):
            bridge.render(fp8(recipe, params))