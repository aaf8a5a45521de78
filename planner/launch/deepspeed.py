"""Read a DeepSpeed config JSON (the model comes from ``--model``: the config names none).

Keys and defaults as DeepSpeed declares them (deepspeed 0.19.8; DeepSpeed config-json docs):

* batch: ``train_batch_size`` = ``train_micro_batch_size_per_gpu`` x ``gradient_accumulation_steps``
  x data-parallel ranks (runtime/config.py ``_batch_assertion``); with all three the data-parallel
  width follows, and GPUs = dp x tp x pp;
* ``zero_optimization.stage`` (default 0), ``overlap_comm`` (default: on for stage 3 only,
  runtime/zero/config.py ``overlap_comm_valid``), ``offload_optimizer`` / ``offload_param``;
* ``bf16.enabled`` / ``fp16.enabled``; ``communication_data_type`` and ``data_types.grad_accum_dtype``
  (FP32 gradient accumulation and reduction by default);
* ``pipeline.stages`` and ``pipeline.activation_checkpoint_interval`` (PipelineEngine), the
  ``activation_checkpointing`` section (deepspeed.checkpointing: whether the model checkpoints is
  its own flag, so it is read as full recompute and said so);
* ``tensor_parallel.autotp_size`` (AutoTP training); ``sequence_parallel_size`` (Ulysses: cp with
  cp_comm_type a2a, Megatron-DeepSpeed's ``--ds-sequence-parallel-size``).
"""

from __future__ import annotations

import json

from hardware_catalog.errors import PlannerInputError
from planner.frameworks.deepspeed import QUIET, SOURCE, TABLE
from planner.frameworks.deepspeed import ZERO_KEYS as ZERO_QUIET
from planner.launch.spec import Launch, boolean, integer

def _get(cfg: dict, path: str):
    node = cfg
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return None if node == "auto" else node


def _batch(cfg: dict, launch: Launch) -> None:
    tb, mb, ga = (_get(cfg, k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"))
    tb = integer(tb, "train_batch_size") if tb is not None else None
    mb = integer(mb, "train_micro_batch_size_per_gpu") if mb is not None else None
    ga = integer(ga, "gradient_accumulation_steps") if ga is not None else None
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        if cfg.get(key) == "auto":
            launch.notes.append(f"{key} is 'auto' (filled in by the Hugging Face Trainer): taken as unstated")
    if mb is not None:
        launch.state("mbs", mb)
    elif tb is not None:
        # runtime/config.py _set_batch_related_parameters: micro = train_batch // world_size // gas
        # (gas 1 when unstated), world_size being the data-parallel ranks: known once --gpus is.
        launch.state("gbs", tb)
        launch.mbs_from_gbs_ga = ga or 1
        return
    else:
        launch.default("mbs", 1, "no train_micro_batch_size_per_gpu")
    if tb is not None:
        launch.state("gbs", tb)
        micro = launch.values["mbs"] * (ga or 0)
        if ga is not None:
            if tb % micro:
                raise PlannerInputError(f"train_batch_size={tb} is not train_micro_batch_size_per_gpu {launch.values['mbs']} x "
                                        f"gradient_accumulation_steps {ga} x a whole number of data-parallel ranks")
            launch.dp = tb // micro
            launch.dp_note = (f"train_batch_size {tb} / (train_micro_batch_size_per_gpu {launch.values['mbs']} x "
                              f"gradient_accumulation_steps {ga})")
    else:
        launch.gbs_rule, launch.gbs_per_dp = "per_dp*dp", launch.values["mbs"] * (ga or 1)


def _zero(cfg: dict, launch: Launch) -> None:
    stage = _get(cfg, "zero_optimization.stage")
    if stage is not None:
        stage = integer(stage, "zero_optimization.stage", 0)
        if stage > 3:
            raise PlannerInputError(f"zero_optimization.stage={stage}: allowed 0, 1, 2, 3")
        launch.state("zero", stage)
    else:
        launch.default("zero", 0, "no zero_optimization.stage")
    flat = {key: _get(cfg, key) for key in TABLE.keys()}
    flat = {key: value for key, value in flat.items() if value is not None}
    overlap, keys = TABLE.read("dp_comm_overlap", flat)
    if keys:
        launch.state("dp_comm_overlap", overlap)
    else:
        launch.default("dp_comm_overlap", launch.values["zero"] == 3, "no zero_optimization.overlap_comm: on for stage 3 only")
    shard, keys = TABLE.read("dp_shard", flat)  # MiCS
    if keys and integer(shard, "zero_optimization.mics_shard_size", -1) > 0:
        launch.state("dp_shard", integer(shard, "zero_optimization.mics_shard_size"))
    for part in ("offload_optimizer", "offload_param"):
        device = _get(cfg, f"zero_optimization.{part}.device")
        if device not in (None, "none"):
            launch.cannot(f"zero_optimization.{part}.device {device}", "with everything in GPU memory")
    for key in (cfg.get("zero_optimization") or {}):
        if key not in ZERO_QUIET:
            launch.unknown.append(f"zero_optimization.{key}")


def _precision(cfg: dict, launch: Launch) -> None:
    if boolean(_get(cfg, "bf16.enabled") or False, "bf16.enabled"):
        launch.state("precision", "bf16")
    elif boolean(_get(cfg, "fp16.enabled") or False, "fp16.enabled"):
        launch.state("precision", "bf16")
        launch.cannot("fp16.enabled", "as bf16 (same tensor-core rate; no loss-scaling cost)")
    else:
        launch.default("precision", "bf16", "neither bf16 nor fp16 enabled")
        launch.cannot("fp32 training (neither bf16 nor fp16 enabled)", "as bf16")
    low = {"bf16", "fp16", "bfloat16", "float16"}
    comm, accum = _get(cfg, "communication_data_type"), _get(cfg, "data_types.grad_accum_dtype")
    if comm is not None or accum is not None:
        launch.state("grad_dtype", "bf16" if (comm in low or accum in low) else "fp32")
    else:  # DeepSpeed's default: the model's dtype (runtime/engine.py communication_data_type, get_data_types)
        launch.default("grad_dtype", "bf16" if (_get(cfg, "bf16.enabled") or _get(cfg, "fp16.enabled")) else "fp32",
                       "no communication_data_type / data_types.grad_accum_dtype: DeepSpeed reduces in the model's dtype")


def _pipeline_recompute(cfg: dict, launch: Launch) -> None:
    stages = _get(cfg, "pipeline.stages")
    if stages is not None:
        launch.state("pp", integer(stages, "pipeline.stages"))
    interval = _get(cfg, "pipeline.activation_checkpoint_interval")
    checkpointing = cfg.get("activation_checkpointing")
    if (interval and integer(interval, "pipeline.activation_checkpoint_interval", 0) > 0) or isinstance(checkpointing, dict):
        launch.state("recompute", "full")
        if isinstance(checkpointing, dict):
            launch.notes.append("activation_checkpointing configures deepspeed.checkpointing; whether the model "
                                "checkpoints its layers is a model-code flag: priced as full recompute")
            if checkpointing.get("cpu_checkpointing"):
                launch.cannot("activation_checkpointing.cpu_checkpointing", "with whole checkpoints in GPU memory")
            if checkpointing.get("partition_activations"):
                launch.notes.append("activation_checkpointing.partition_activations: checkpoints split over the TP "
                                    "ranks, as priced with sequence parallelism (give --tp and keep SP on)")
    else:
        launch.default("recompute", "none", "no activation checkpointing")
    tp = _get(cfg, "tensor_parallel.autotp_size")
    if tp is not None:
        launch.state("tp", integer(tp, "tensor_parallel.autotp_size"))
    sp = _get(cfg, "sequence_parallel_size")
    if sp is not None:  # Ulysses: the head all-to-all (planner.frameworks.deepspeed's cp rows)
        sp = integer(sp, "sequence_parallel_size", 1)
        launch.state("cp", sp)
        if sp > 1:
            launch.state("cp_comm_type", "a2a")
    else:
        launch.default("cp", 1, "no sequence_parallel_size (Megatron-DeepSpeed --ds-sequence-parallel-size)")


def read(text: str, path: str, model=None) -> Launch:
    """A DeepSpeed config JSON -> ``Launch``."""
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as err:
        raise PlannerInputError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(cfg, dict):
        raise PlannerInputError(f"{path}: expected a DeepSpeed config object, got {type(cfg).__name__}")
    launch = Launch(format="deepspeed", path=path, launcher="DeepSpeed config JSON", model=model,
                    defaults_from=SOURCE)
    if model is not None:
        launch.model_note = "from --model (a DeepSpeed config names no model)"
        if model.sliding_window is not None:  # as the DeepSpeed exporter refuses it (rule deepspeed_model_kind)
            from planner.frameworks import window_text

            launch.model_note += (f"; it has {window_text(model)}, which Megatron-DeepSpeed's model code does not "
                                  "build (no window argument at f4157bea): priced with the window, trained without")
        if model.glu_clamp is not None:  # likewise (rule deepspeed_model_kind)
            launch.model_note += (f"; it clamps its GLU at {model.glu_clamp:g}, which Megatron-DeepSpeed's model code "
                                  "does not (f4157bea): priced with the clamp, trained without")
    _batch(cfg, launch)
    _zero(cfg, launch)
    _precision(cfg, launch)
    _pipeline_recompute(cfg, launch)
    _table_options(cfg, launch)
    _fixed(launch)
    handled = QUIET | {"zero_optimization", "bf16", "fp16", "communication_data_type", "data_types", "pipeline",
                       "activation_checkpointing", "tensor_parallel", "sequence_parallel_size", "train_batch_size",
                       "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}
    launch.ignored += [k for k in cfg if k in QUIET]
    launch.unknown += [k for k in cfg if k not in handled]
    return launch


def _table_options(cfg: dict, launch: Launch) -> None:
    """The table's options the readers above leave unset, from its rows (a new DeepSpeed key is one row)."""
    flat = {key: _get(cfg, key) for key in TABLE.keys() if _get(cfg, key) is not None}
    for option in TABLE.options:
        if option in launch.values or option == "partition_activations":  # not a layout option
            continue
        value, keys = TABLE.read(option, flat)
        if keys:
            launch.state(option, value)
    if launch.values.get("grad_accum_pass") == "cast_add" and launch.values.get("zero", 0) != 1:
        # The BF16_Optimizer runs only at ZeRO stage 1 (runtime/engine.py _do_optimizer_sanity_check); ZeRO 2-3
        # add each micro-batch's reduced partition into their own (autograd's price, on the shard).
        launch.values["grad_accum_pass"] = "autograd"
    if "grad_accum_pass" not in launch.values:  # 16-bit accumulation: no key states it
        launch.default("grad_accum_pass", TABLE.read("grad_accum_pass", {})[0],
                       "autograd's in-place add on the 16-bit param.grad (no FP32 gradient accumulation)")
    if launch.values.get("grad_accum_pass") == "cast_add":  # the BF16_Optimizer all-reduces its FP32 gradients
        launch.default("grad_reduce", "all_reduce", "the BF16_Optimizer all-reduces the whole FP32 gradient "
                       "(runtime/pipe/engine.py _bf16_reduce_grads)")


def _fixed(launch: Launch) -> None:
    """What a DeepSpeed config cannot state: the model code's and the launcher's part."""
    why = "not a DeepSpeed config key (Megatron-DeepSpeed takes it on its command line)"
    for option, value in (("tp", 1), ("pp", 1), ("vpp", 1)):
        if option not in launch.values:
            launch.default(option, value, why)
    # Sequence parallelism is a command-line flag too (--sequence-parallel): left at planner's
    # default, on wherever --tp > 1 is given, as the DeepSpeed export priced it.
    launch.values.setdefault("ep", 1)
    launch.values.setdefault("etp", 1)
