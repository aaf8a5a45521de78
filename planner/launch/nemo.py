"""Read a NeMo 2 or Megatron-Bridge recipe: its resulting config as YAML, or its override strings.

* NeMo 2 (nemo.collections.llm recipes, e.g. recipes/llama3_8b.py): ``trainer.strategy.*`` holds
  the parallel sizes (MegatronStrategy), ``trainer.strategy.ddp.*`` the DDP config,
  ``trainer.num_nodes`` x ``trainer.devices`` the GPUs, ``trainer.plugins`` the precision
  (MegatronMixedPrecision ``precision``, ``fp8``), ``data.*`` the batch and sequence,
  ``model.config`` the model (its ``_target_`` class, e.g. Llama3Config8B, and TransformerConfig
  fields), ``optim.config.use_distributed_optimizer``. Overrides: ``nemo llm pretrain --factory
  llama3_8b trainer.strategy.tensor_model_parallel_size=2 ...``.
* Megatron-Bridge (ConfigContainer, training/config.py; a checkpoint's run_config.yaml):
  ``model.*`` (the model provider: TransformerConfig fields and the parallel sizes), ``train.*``
  (batch), ``dataset.sequence_length`` (or a fine-tuning config's ``seq_length``), ``ddp.*``, ``optimizer.use_distributed_optimizer``,
  ``mixed_precision`` (a preset name such as bf16_mixed or a MixedPrecisionConfig),
  ``comm_overlap.tp_comm_overlap``. Overrides: ``run_recipe.py --recipe
  llama3_8b_pretrain_2gpu_h100_bf16_config model.tensor_model_parallel_size=2 ...``; the recipe
  name gives the model, GPU count and type.

Both become Megatron-LM argument names (the Megatron-Bridge guide "Megatron-LM to Megatron
Bridge" maps each flag to its field) and go through ``planner.launch.mcore``. The recipe's own
Python is never run: what an override list leaves unstated takes Megatron-Core's defaults, and
the output says so.
"""

from __future__ import annotations

import re

from hardware_catalog.errors import PlannerInputError
from planner.frameworks.bridge import GLU_CLAMP, reading_renames
from planner.launch.mcore import Settings, to_launch
from planner.launch.spec import Launch, integer

SOURCE = "Megatron-Core defaults (TransformerConfig, DistributedDataParallelConfig; the recipe's own Python is not run)"
RENAMED = {**reading_renames(), "num_layers_in_first_pipeline_stage": "decoder_first_pipeline_num_layers",
           "sequence_length": "seq_length"}
"""Megatron-Core / NeMo field -> Megatron-LM argument dest, where they differ (``planner.frameworks.bridge``,
checked against Megatron-Bridge docs/megatron-lm-to-megatron-bridge.md; NeMo 2 also says sequence_length)."""
PREFIXES = ("trainer.strategy.ddp.", "trainer.strategy.", "trainer.plugins.", "model.config.", "data.", "optim.config.",
            "model.", "train.", "dataset.", "ddp.", "optimizer.", "mixed_precision.", "comm_overlap.", "dist.")
"""Where Megatron-Core fields live in a NeMo 2 / Megatron-Bridge config, most specific first."""
QUIET_PREFIXES = ("log.", "resume.", "logger.", "checkpoint.", "scheduler.", "rng.", "tokenizer.", "validation.",
                  "profiling.", "dist.", "ft.", "straggler.", "nvrx_straggler.", "inprocess_restart.", "peft.",
                  "optim.lr_scheduler.", "trainer.", "data.", "env_vars.", "rerun_state_machine.", "optim.")
CLASSES = {
    "Llama2Config7B": "llama2-7b", "Llama2Config13B": "llama2-13b", "Llama2Config70B": "llama2-70b",
    "Llama3Config8B": "llama3-8b", "Llama31Config8B": "llama3-8b", "Llama3Config70B": "llama3-70b",
    "Llama31Config70B": "llama3-70b", "Llama31Config405B": "llama3-405b", "MixtralConfig8x7B": "mixtral-8x7b",
    "MixtralConfig8x22B": "mixtral-8x22b", "Nemotron3Config8B": "nemotron-8b", "Nemotron3Config22B": "nemotron-22b",
    "Nemotron4Config340B": "nemotron-4-340b", "GPTConfig175B": "gpt3-175b", "DeepSeekV3Config": "deepseek-v3",
    "Qwen3MoEConfig30B_A3B": "qwen3-30b-a3b", "Qwen3MoEConfig235B_A22B": "qwen3-235b-a22b",
}
"""NeMo 2 model config classes (nemo/collections/llm/gpt/model/*.py) -> catalog presets; Megatron-Bridge
providers (Llama3ModelProvider8B, ...) map through the same names."""
GPUS = ("gb300", "gb200", "b300", "b200", "h200", "h100", "a100")


def flatten(node, prefix: str = "", out=None) -> dict:
    out = {} if out is None else out
    if isinstance(node, dict):
        for key, value in node.items():
            flatten(value, f"{prefix}{key}.", out)
    elif isinstance(node, list) and any(isinstance(x, dict) for x in node):
        for i, value in enumerate(node):
            flatten(value, f"{prefix}{i}.", out)
    else:
        out[prefix[:-1]] = node
    return out


def _scalar(text: str):
    low = text.strip().strip("'\"")
    if low.lower() in ("true", "false"):
        return low.lower() == "true"
    if low.lower() in ("null", "none"):
        return None
    for cast in (int, float):
        try:
            return cast(low)
        except ValueError:
            pass
    if low.startswith("[") and low.endswith("]"):
        return [_scalar(x) for x in low[1:-1].split(",") if x.strip()]
    return low


def _from_overrides(text: str, path: str, launch: Launch) -> tuple[dict, str | None]:
    from planner.launch.shell import read_script

    script = read_script(text, path)
    words = [w for c in script.commands for w in c]
    recipe, flat = None, {}
    for k, word in enumerate(words):
        if word in ("--factory", "--recipe", "-f") and k + 1 < len(words):
            recipe = words[k + 1]
        elif word.startswith(("--factory=", "--recipe=")):
            recipe = word.split("=", 1)[1]
        elif "=" in word and not word.startswith("-"):
            key, value = word.split("=", 1)
            flat[key.lstrip("+~")] = _scalar(value)
    launch.launcher = f"override strings{f' on recipe {recipe}' if recipe else ''}"
    return flat, recipe


def _load(text: str, path: str, launch: Launch) -> tuple[dict, str | None]:
    if not path.lower().endswith((".yaml", ".yml")):
        return _from_overrides(text, path, launch)
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise PlannerInputError(f"{path}: invalid YAML ({getattr(err, 'problem', type(err).__name__)}"
                                f"{f' at line {mark.line + 1}' if mark else ''})") from None
    if not isinstance(data, dict):
        raise PlannerInputError(f"{path}: expected a mapping (a recipe's config as YAML)")
    launch.launcher = "config YAML"
    return flatten(data), None


def _dest(key: str) -> str | None:
    """The Megatron-LM argument a config key sets (None: not a Megatron-Core field we read)."""
    for prefix in PREFIXES:
        if key.startswith(prefix):
            name = key[len(prefix):]
            return None if "." in name else RENAMED.get(name, name)
    return None


def to_settings(flat: dict, launch: Launch) -> Settings:
    """Config keys -> Megatron argument dests (with NeMo's and Megatron-Core's spellings)."""
    from planner.frameworks.megatron import MAPPED

    s = Settings(source=SOURCE)
    for key, value in flat.items():
        dest = _dest(key)
        if key.endswith(("._target_", "._partial_")) or key in ("_target_", "_partial_"):
            continue
        if value is None:  # not set, except a window's or clamp's null: it clears a recipe's (Bridge exporter)
            if dest in ("window_size", GLU_CLAMP):
                s.values[dest], s.where[dest] = None, key
            continue
        if key in _PRECISION_KEYS or key in ("trainer.num_nodes", "trainer.devices"):
            continue
        if dest in MAPPED or dest in _SPECIAL:
            if isinstance(value, str) and "${" in value:
                raise PlannerInputError(f"{launch.path}: {key}={value!r} is an OmegaConf interpolation (a Hydra config such "
                                        "as NeMo 1's megatron_gpt_config.yaml), which planner does not resolve: give the "
                                        "resolved config (NeMo 2 / Megatron-Bridge) or the value itself")
            s.values[dest], s.where[dest] = value, key
        elif key.startswith(QUIET_PREFIXES) or dest is not None:
            launch.ignored.append(key)
        else:
            launch.unknown.append(key)
    _translate(s)
    _precision(flat, s)
    return s


_PRECISION_KEYS = ("mixed_precision", "trainer.plugins.precision", "trainer.precision")
_SPECIAL = {GLU_CLAMP, "gated_linear_unit", "share_embeddings_and_output_weights", "add_bias_linear", "grad_reduce_in_fp32",
            "overlap_p2p_comm", "precision", "fp8", "tensor_model_parallel_size", "use_megatron_fsdp", "overlap_param_gather",
            "num_nodes", "devices", "fp8_recipe"}


def _translate(s: Settings) -> None:
    v = s.values
    if "gated_linear_unit" in v:
        v["swiglu"] = bool(v.pop("gated_linear_unit"))
    if "share_embeddings_and_output_weights" in v:
        v["untie_embeddings_and_output_weights"] = not v.pop("share_embeddings_and_output_weights")
    if v.get("num_query_groups") not in (None, v.get("num_attention_heads")):
        v["group_query_attention"] = True
    if "grad_reduce_in_fp32" in v:  # Bridge's ddp.grad_reduce_in_fp32 is Megatron-LM's not --grad-reduce-in-bf16
        v["grad_reduce_in_bf16"] = v.pop("grad_reduce_in_fp32") is False
    if "overlap_p2p_comm" in v:  # Megatron-LM's store_false --no-overlap-p2p-communication (bridge.NEGATED)
        v["no_overlap_p2p_communication"] = not v.pop("overlap_p2p_comm")
    for dest in ("num_nodes", "devices", "overlap_param_gather"):
        v.pop(dest, None)


def _precision(flat: dict, s: Settings) -> None:
    """NeMo's trainer.plugins (precision "bf16-mixed", fp8 "hybrid") and Bridge's mixed_precision
    (a preset name like bf16_mixed / bf16_with_fp8_delayed_scaling_mixed, or its fields)."""
    from planner.frameworks.bridge import FP8_PRESET_PARAMS, FP8_PRESETS

    v = s.values
    names = [str(flat.get(k)) for k in _PRECISION_KEYS if flat.get(k)]
    for name in names:
        if "bf16" in name:
            v["bf16"] = True
        elif name.startswith(("16", "fp16")):
            v["fp16"] = True
        if "fp8" in name:
            v["fp8_format"] = "hybrid"
            s.where["fp8_format"] = name
        recipe = next((r for r, preset in FP8_PRESETS.items() if preset == name), None)
        if "mxfp8" in name:
            recipe = "mxfp8"
        if "nvfp4" in name:  # bf16_with_nvfp4_mixed: fp4 e2m1, fp4_recipe nvfp4 (training/mixed_precision.py)
            v.setdefault("fp4_format", "e2m1")
            v.setdefault("fp4_recipe", "nvfp4")
            s.where["fp4_format"] = s.where["fp4_recipe"] = name
        elif recipe is not None and "fp8_recipe" not in v:  # the preset's recipe, in Megatron's word
            v["fp8_recipe"] = {"current": "tensorwise"}.get(recipe, recipe)
            s.where["fp8_recipe"] = name
        if name in FP8_PRESETS.values() and "fp8_param_gather" not in v:  # the preset's FP8 parameters
            v["fp8_param_gather"] = FP8_PRESET_PARAMS[next(r for r, p in FP8_PRESETS.items() if p == name)]
            s.where["fp8_param_gather"] = name
    fp8 = v.pop("fp8", None)
    if fp8 not in (None, False, "None", ""):
        v["fp8_format"] = fp8
    if v.pop("precision", None) is not None or flat.get("mixed_precision.bf16"):
        v.setdefault("bf16", True)


def _model(flat: dict, recipe: str | None, model, launch: Launch, s: Settings):
    """The catalog preset a config class / provider / recipe names, or None (the shape decides)."""
    from hardware_catalog import get_model

    if model is not None:
        launch.model_note = "from --model"
        return model
    target = flat.get("model.config._target_") or flat.get("model._target_") or ""
    cls = str(target).rsplit(".", 1)[-1]
    name = CLASSES.get(cls) or CLASSES.get(cls.replace("ModelProvider", "Config"))
    if name is None and recipe and not s.has("num_layers"):
        name = re.split(r"_(pretrain|sft|peft|finetune|low_precision)", recipe)[0]
    if name is None:
        return None
    try:
        spec = get_model(name)
    except PlannerInputError:
        raise PlannerInputError(f"recipe / model class {cls or recipe}: not a catalog model; give --model NAME") from None
    launch.model_note = f"{cls or recipe} = catalog preset {spec.name}"
    return spec


def _recipe_hints(recipe: str | None, launch: Launch) -> None:
    """Megatron-Bridge recipe names carry GPU count and type: llama3_8b_pretrain_2gpu_h100_bf16_config."""
    if not recipe:
        return
    m = re.search(r"_(\d+)gpu_", recipe)
    if m:
        launch.gpus, launch.gpus_note = int(m.group(1)), f"the recipe name {recipe}"
    gpu = next((g for g in GPUS if f"_{g}_" in f"_{recipe}_"), None)
    launch.gpu = gpu
    launch.notes.append(f"recipe {recipe}: its Python is not run, so what the overrides leave unstated takes "
                        "Megatron-Core's defaults, not the recipe's")


def _gpus(flat: dict, launch: Launch) -> None:
    nodes, devices = flat.get("trainer.num_nodes"), flat.get("trainer.devices")
    if devices is not None:
        n = integer(nodes if nodes is not None else 1, "trainer.num_nodes") * integer(devices, "trainer.devices")
        launch.gpus, launch.gpus_note = n, "trainer.num_nodes x trainer.devices"


def read(text: str, path: str, model=None) -> Launch:
    """A NeMo 2 / Megatron-Bridge config YAML or override list -> ``Launch``."""
    launch = Launch(format="nemo", path=path)
    flat, recipe = _load(text, path, launch)
    s = to_settings(flat, launch)
    preset = _model(flat, recipe, model, launch, s)
    _recipe_hints(recipe, launch)
    _gpus(flat, launch)
    return to_launch(s, launch, preset)  # the preset's note, plus what the file states otherwise
