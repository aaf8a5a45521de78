"""``megatron_bridge_overrides.yaml``: the plan as Megatron-Bridge ConfigContainer overrides.

Megatron-Bridge recipes (e.g. ``llama3_8b_pretrain_config``) return a ConfigContainer; its example
entrypoints (examples/recipes/llama/pretrain_llama3_8b.py ``--config-file``) merge a YAML like this
one over it with OmegaConf. Every key is the Megatron-LM argument the Megatron exporter writes
(``planner.export.megatron``, through ``planner.frameworks.megatron.TABLE``) under its Bridge name
(``planner.frameworks.bridge``), so this module adds no framework words of its own. Settings a
recipe may have changed from Megatron-Core's defaults are written explicitly (false included).
"""

from __future__ import annotations

import yaml

from planner.export.common import CannotExpress, Plan, comment_block
from planner.export.megatron import check_megatron, megatron_sections
from planner.export.registry import PLAIN, Exporter, one_file
from planner.frameworks import bridge
from planner.frameworks.megatron import TABLE

FILE_NAME = "megatron_bridge_overrides.yaml"
_SKIPPED = {"bf16", "fp8_format", "fp8_recipe", "fp8_param_gather", "fp8_amax_history_len", "fp8_amax_compute_algo", "fp4_format", "fp4_recipe",
            "group_query_attention", "max_position_embeddings", "moe_router_load_balancing_type",
            "moe_aux_loss_coeff"}
"""Dests written otherwise (precision as a preset, which also sets fp8_param_gather; GQA by num_query_groups; the position table is
the model's seq_length in Bridge) or left to the recipe (router settings, not priced)."""


_MOE_OPTIONS = frozenset({"ep", "etp", "ep_comm_overlap", "moe_dispatcher", "moe_grouped_gemm", "moe_capacity_factor",
                          "moe_pad_to_capacity"})
"""Options that exist only for a MoE model (left to the recipe for a dense one)."""


def _value(values: list):
    if not values:
        return True
    if len(values) > 1:
        return list(values)
    v = values[0]
    if isinstance(v, str):
        for cast in (int, float):
            try:
                return cast(v)
            except ValueError:
                pass
    return v


def _layer_pattern(text: str) -> list[int]:
    """Megatron's "([0]*3+[1]*58)" as the list Bridge's moe_layer_freq takes."""
    bits: list[int] = []
    for part in text.strip("()").split("+"):
        bit, count = part.split("*")
        bits += [int(bit.strip("[] "))] * int(count)
    return bits


def _explicit_off(plan: Plan, written: set) -> list[tuple[str, object]]:
    """The switches of the table's rows for the plan's settings that stay off: written as false, so
    a recipe's own choice does not run instead of the plan's."""
    out = []
    for option in TABLE.options:
        if option in _MOE_OPTIONS and not plan.is_moe:
            continue
        for row in (r for r in TABLE.rows_for(option) if r.write):
            for dest, value in row.sets + row.also:
                moved = any(d == dest for d, _ in bridge.MOVED_VALUES)  # Bridge spells it another way
                if value is True and dest not in written and dest not in _SKIPPED and not moved:
                    written.add(dest)
                    out.append((dest, False))
    for dest, default in bridge.RECIPE_RESETS.items():  # settings whose default is a value or None, not false
        if dest not in written and (plan.is_moe or dest not in bridge.MOE_ONLY):
            written.add(dest)
            out.append((dest, default))
    return out


def mla_recipe(plan: Plan):
    """(recipe function, module, provider class) an MLA plan's overrides merge over (None for a model
    without MLA); refuses an MLA model no Megatron-Bridge recipe builds an MLA provider for."""
    if plan.model.mla is None:
        return None
    family = plan.model.family
    if family not in bridge.MLA_RECIPES:
        raise CannotExpress(
            "bridge_mla", f"multi-latent attention needs a recipe whose provider is an MLATransformerConfig, and "
            f"Megatron-Bridge v{bridge.RELEASE} has one only for {', '.join(bridge.MLA_RECIPES)} checkpoints "
            f"(model family {family!r}): use --format megatron",
            "Megatron-Bridge v0.2.0 models/deepseek/deepseek_provider.py; recipes/deepseek/deepseek_v3.py")
    return bridge.MLA_RECIPES[family]


def overrides(plan: Plan) -> list[tuple[str, object]]:
    """(ConfigContainer key, value) pairs for the plan, in the Megatron exporter's order."""
    check_megatron(plan)
    mla_recipe(plan)
    if plan.precision == "fp8" and bool(plan.fp8_param_gather) != bridge.FP8_PRESET_PARAMS[plan.fp8_recipe]:
        preset = bridge.precision_preset(plan.precision, plan.fp8_recipe)
        state = "on" if bridge.FP8_PRESET_PARAMS[plan.fp8_recipe] else "off"
        raise CannotExpress("bridge_fp8_param_gather", f"Megatron-Bridge's {preset} preset turns FP8 parameters "
                            f"{state} (fp8_param_gather) over the model and DDP configs: price with --fp8-param-gather "
                            f"{'true' if state == 'on' else 'false'}, or use --format megatron",
                            "Megatron-Bridge v0.2.0 training/mixed_precision.py (MixedPrecisionConfig.setup)")
    pairs, written = [], set()
    for title, items in megatron_sections(plan):
        if title.startswith("PLACEHOLDER"):
            continue
        for flag, values in items:
            dest = flag[2:].replace("-", "_")
            if dest in _SKIPPED:
                continue
            value = _value(values)
            if dest == "moe_layer_freq":
                value = _layer_pattern(str(value))
            elif dest == "window_size":  # Megatron's "127,0" is TransformerConfig's (127, 0): a list in YAML
                value = [int(v) for v in str(value).split(",")]
            written.add(dest)
            pairs.append((dest, value))
    if plan.model.mla is not None and "q_lora_rank" not in written:  # no query compression: the provider's 1536 must go
        pairs.append(("q_lora_rank", None))
    pairs += _explicit_off(plan, written)
    if plan.is_moe:  # no Megatron-LM flag: a TransformerConfig field only (bridge.GLU_CLAMP)
        pairs.append((bridge.GLU_CLAMP, plan.model.glu_clamp))
    out = [("mixed_precision", bridge.precision_preset(plan.precision, plan.fp8_recipe)),
           ("model.vocab_size", plan.model.vocab_size)]
    for dest, value in pairs:
        out += bridge.settings(dest, value)
        if dest == "seq_length":  # GPTDatasetConfig's field (Megatron-Core BlendedMegatronDatasetConfig); ConfigContainer.validate
            out.append(("dataset.sequence_length", value))  # asserts it equals model.seq_length (v0.2.0 config.py)
    return out


def nested(pairs) -> dict:
    tree: dict = {}
    for key, value in pairs:
        node = tree
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return tree


def _preset_notes(plan: Plan) -> list[str]:
    """What the mixed_precision preset runs beyond what the plan priced (Megatron-Bridge v0.2.0
    training/mixed_precision.py: the current-scaling preset keeps the first and last layer in BF16;
    every BF16 preset, the FP8 ones included, sets grad_reduce_in_fp32=True, and
    ``MixedPrecisionConfig.setup`` copies it over the DDP config; its fp8_param_gather is the plan's,
    ``overrides`` checks)."""
    notes = []
    if plan.grad_dtype == "bf16":
        notes += ["", "The mixed_precision preset sets grad_reduce_in_fp32: true and MixedPrecisionConfig.setup copies it "
                      "over the DDP config, so gradients are reduced in FP32 whatever ddp.grad_reduce_in_fp32 says here; "
                      "planner priced a BF16 reduction (--grad-dtype fp32 prices what runs)."]
    if plan.precision == "fp8" and plan.fp8_recipe == "current":
        notes += ["", "The FP8 preset keeps the first and the last transformer layer in BF16 (first_last_layers_bf16), "
                      "which planner prices in FP8 like the others."]
    return notes


def _release_notes(plan: Plan) -> list[str]:
    """What a 25.09 container (``bridge.COMMIT_2509``, the --framework release's ``bridge_release``)
    does with this v0.2.0 file: its override loader skips keys it lacks (training/utils/omegaconf_utils.py
    apply_overrides, with a warning), so each setting 25.09 spells otherwise is named. No NVFP4 preset
    exists there: refused."""
    if plan.options.get("bridge_release") != bridge.COMMIT_2509:
        return []
    at = f"Megatron-Bridge {bridge.COMMIT_2509} (25.09) training/mixed_precision.py"
    if plan.precision == "fp8" and plan.fp8_recipe == "nvfp4":
        raise CannotExpress("bridge_2509_nvfp4", "--fp8-recipe nvfp4: Megatron-Bridge 25.09 has no NVFP4 mixed_precision "
                            "preset (bf16_with_nvfp4_mixed comes with v0.2.0): price without --framework "
                            "megatron-bridge-25.09", at)
    lines = ["", f"Written for v{bridge.RELEASE}. A 25.09 container ({bridge.COMMIT_2509}, Megatron-Core 0.15.0rc6) "
                 "skips keys it lacks:"]
    if plan.cuda_graphs:
        lines.append("- model.cuda_graph_impl: 25.09 has model.enable_cuda_graph: true instead (else graphs stay off).")
    else:
        lines.append("- model.cuda_graph_impl (CUDA graphs off) is skipped: graphs are off there by default.")
    if plan.is_moe and plan.moe_dispatcher == "deepep":
        lines.append("- model.moe_flex_dispatcher_backend: 25.09 turns DeepEP on with model.moe_enable_deepep: true and "
                     "needs model.moe_shared_expert_overlap: false with the flex dispatcher.")
    return lines


def _recipe_lines(plan: Plan) -> list[str]:
    """Which recipe to merge over: any, for a GPT model; for MLA, one whose provider has MLA."""
    recipe = mla_recipe(plan)
    if recipe is None:
        return ["Merge over a recipe, e.g. python examples/recipes/llama/pretrain_llama3_8b.py --config-file " + FILE_NAME]
    function, module, provider = recipe
    return [f"Merge over {module}.{function} (in 25.09: recipes/deepseek/deepseek_v3.py pretrain_config),",
            "e.g. in a copy of examples/recipes/llama/pretrain_llama3_8b.py that calls it, with --config-file " + FILE_NAME + ".",
            f"Its provider, {provider}, is an MLATransformerConfig: multi-latent attention comes with that class",
            "(a GPTModelProvider recipe, such as Llama's or Qwen's, has no MLA fields); the MLA dimensions are written below.",
            "The recipe keeps DeepSeek's router and rotary settings (moe_router_*, rotary_scaling_factor), which this file leaves."]


def render(plan: Plan) -> str:
    body = yaml.safe_dump(nested(overrides(plan)), sort_keys=False, default_flow_style=False, width=110)
    head = comment_block(list(plan.header) + [
        "",
        f"Megatron-Bridge v{bridge.RELEASE} ConfigContainer overrides (names: planner/frameworks/bridge.py, checked",
        "against Megatron-Bridge's config dataclasses and its Megatron-LM -> Megatron-Bridge guide).",
    ] + _recipe_lines(plan) + [
        "(the recipe keeps its data, tokenizer, optimizer and schedule; every layout setting of the plan is here).",
    ] + _preset_notes(plan) + _release_notes(plan))
    text = head + body
    yaml.safe_load(text)
    return text


EXPORTER = Exporter(
    name="megatron-bridge",
    files={FILE_NAME: PLAIN},
    render=one_file(FILE_NAME, lambda plan, entrypoint: render(plan)),
    table=TABLE,
    description="Megatron-Bridge / NeMo 2 ConfigContainer overrides (YAML) for a recipe",
)
