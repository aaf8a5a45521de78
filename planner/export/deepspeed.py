"""``deepspeed_config.json`` for Megatron-DeepSpeed: batch, ZeRO stage, precision, pipeline.

DeepSpeed reads only the keys it knows from the config dict (``deepspeed/runtime/config.py``
``DeepSpeedConfig._initialize_params``), so the header goes into a ``"_comment"`` list, which it
ignores (checked with deepspeed 0.19.8: ``DeepSpeedConfig`` accepts the file unchanged).
Tensor/pipeline/expert sizes are Megatron-DeepSpeed command-line arguments, not config keys; the
Ulysses degree (cp, all-to-all) is both: ``--ds-sequence-parallel-size`` and ``sequence_parallel_size``.
"""

from __future__ import annotations

import json

from planner.export.common import CannotExpress, Plan, partial_recompute_per_chunk, selective_modules, window_text
from planner.export.registry import PLAIN, Exporter, one_file
from planner.frameworks.deepspeed import TABLE

FILE_NAME = "deepspeed_config.json"
DEEPSPEED_COMMIT = "03f6f75c5caadf213b53a7b3f5438bb46a30d278"
_PIPE = f"deepspeed/runtime/pipe/engine.py@{DEEPSPEED_COMMIT[:12]} (PipelineEngine.__init__)"
_ENGINE = "deepspeed/runtime/engine.py (_configure_zero_optimizer, ZeRO-3 branch; deepspeed 0.19.8)"
_SCHED = "deepspeed/runtime/pipe/schedule.py (TrainSchedule is 1F1B; DualPipeVSchedule is a V schedule; deepspeed 0.19.8)"
_CONFIG = "deepspeed/runtime/config.py (_batch_assertion)"


_MDS = "microsoft/Megatron-DeepSpeed@f4157bea (megatron/model: GPT layers with multi-head / grouped-query attention)"


def _check_model(plan: Plan) -> None:
    """Megatron-DeepSpeed builds GPT-style transformer layers: no Mamba layers, no multi-latent
    attention, no multi-token-prediction modules, no sliding-window attention, no clamped GLU (its
    megatron/ tree has none of them at f4157bea: arguments.py has no window argument,
    model/transformer.py attends every earlier key and clamps no activation)."""
    m = plan.model
    what = ("a hybrid Mamba model" if m.hybrid_pattern else "multi-latent attention (MLA)" if m.mla is not None
            else f"{m.mtp_layers} multi-token-prediction layer(s)" if m.mtp_layers else window_text(m)
            or (f"a GLU clamped at {m.glu_clamp:g} (glu_clamp)" if m.glu_clamp is not None else ""))
    if what:
        raise CannotExpress("deepspeed_model_kind", f"model {m.name} has {what}, which Megatron-DeepSpeed's model "
                            "code does not build: use --format megatron or megatron-bridge", _MDS)


def check(plan: Plan) -> None:
    _check_model(plan)
    if partial_recompute_per_chunk(plan):
        raise CannotExpress("deepspeed_partial_recompute", "recomputing only some layers of each stage is Megatron's "
                            "block method; deepspeed has no equivalent setting", "planner.export")
    if selective_modules(plan):
        raise CannotExpress("deepspeed_recompute_modules", f"recomputing the submodules {', '.join(selective_modules(plan))} "
                            "is Megatron-Core's --recompute-modules; a DeepSpeed config has no such setting", "planner.export")
    TABLE.write("precision", plan.precision)  # refuses fp8
    # cp > 1 runs as Ulysses (the table's cp rows; its refusals: other cp_comm_types, TP/PP, heads % cp).
    TABLE.write("cp", plan.cp, plan)
    TABLE.write("cp_comm_type", plan.cp_comm_type, plan)
    if plan.shard_replicas > 1 and plan.zero < 3:
        raise CannotExpress("deepspeed_hybrid_shard_zero3", f"dp_shard={plan.dp_shard} with zero={plan.zero}: DeepSpeed "
                            "shards ZeRO-1/2 over every data-parallel rank; its hybrid sharding (MiCS, "
                            "zero_optimization.mics_shard_size) is ZeRO-3 only", "deepspeed/runtime/zero/mics.py")
    if plan.pp > 1 and plan.zero >= 2:
        raise CannotExpress("deepspeed_zero_pp", f"zero={plan.zero} with pp={plan.pp}: the pipeline engine asserts "
                            "'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism'", _PIPE)
    if plan.is_moe and plan.zero == 3:
        raise CannotExpress("deepspeed_moe_zero3", "zero=3 with a MoE model: DeepSpeed raises 'MoE not supported with Stage 3'", _ENGINE)
    if plan.vpp > 1:
        raise CannotExpress("deepspeed_no_interleaving", f"vpp={plan.vpp}: DeepSpeed's pipeline runs one stage per rank "
                            "(1F1B TrainSchedule); it has no interleaved virtual stages", _SCHED)
    if plan.pp > 1 and plan.uneven:
        raise CannotExpress("deepspeed_uneven_stages", f"uneven stages {plan.stage_layers[0]}/.../{plan.stage_layers[-1]}: "
                            "PipelineModule balances layers by its partition_method in model code; the config cannot pin "
                            "first/last stage layer counts", "deepspeed/runtime/pipe/module.py")


def _command_line_only(plan: Plan) -> str:
    """The layout settings Megatron-DeepSpeed takes on its command line only, whose defaults are off
    (microsoft/Megatron-DeepSpeed megatron/arguments.py: --sequence-parallel, --recompute-granularity):
    left unsaid, the job runs without them and not as priced."""
    sp = f"sequence parallelism {'on' if plan.sp else 'off'}, " if plan.tp > 1 else ""
    return sp + {"selective": "selective recompute, ", "full": "full recompute, "}.get(plan.recompute, "no recompute, ")


def _token_dropping(plan: Plan) -> str:
    """Megatron-DeepSpeed drops tokens past --moe-train-capacity-factor (default 1.0) unless
    --disable-moe-token-dropping (megatron/arguments.py): the plan's capacity, or dropless."""
    factor = float(plan.moe_capacity_factor or 0)
    return f"capacity factor {factor:g}" if factor > 0 else "dropless (no token dropping)"


def config_dict(plan: Plan) -> dict:
    check(plan)
    cfg: dict = {
        "_comment": list(plan.header) + [
            "DeepSpeed ignores this _comment key (it reads only the keys it knows).",
            f"Pass the same layout to Megatron-DeepSpeed on its command line: tensor parallel {plan.tp}, pipeline {plan.pp}, "
            + _command_line_only(plan) + f"micro-batch {plan.mbs}, global batch {plan.gbs}"
            + (f", {plan.model.moe.num_experts} experts with expert parallel {plan.ep}, " + _token_dropping(plan)
               if plan.is_moe else "")
            + (f", Ulysses sequence parallel {plan.cp} (--ds-sequence-parallel-size {plan.cp}, as sequence_parallel_size "
               "below)" if plan.cp > 1 else "")
            + ", plus --deepspeed --deepspeed_config deepspeed_config.json.",
            f"train_batch_size = micro-batch {plan.mbs} x gradient_accumulation_steps {plan.grad_accum} x data-parallel {plan.dp}"
            " (DeepSpeed asserts this identity with its data-parallel world size).",
        ],
        "train_batch_size": plan.gbs,
        "train_micro_batch_size_per_gpu": plan.mbs,
        "gradient_accumulation_steps": plan.grad_accum,
        "steps_per_print": 10,
        "gradient_clipping": 1.0,
        # overlap_comm: reduce gradients during the backward pass (DeepSpeed config docs,
        # zero_optimization.overlap_comm), as the plan prices it with dp_comm_overlap on.
        "zero_optimization": _section(TABLE.write("zero", plan.zero) + TABLE.write("dp_comm_overlap", bool(plan.dp_comm_overlap))
                                      + (TABLE.write("dp_shard", plan.dp_shard) if plan.shard_replicas > 1 else []),
                                      "zero_optimization"),
        "bf16": {"enabled": True},
        "fp16": {"enabled": False},
        "wall_clock_breakdown": False,
    }
    # DeepSpeed accumulates and reduces gradients in the model's dtype (bf16 here) unless told otherwise
    # (runtime/engine.py communication_data_type, get_data_types): the plan's dtype is written either way.
    cfg["communication_data_type"] = plan.grad_dtype
    cfg["data_types"] = {"grad_accum_dtype": plan.grad_dtype}
    if plan.recompute == "selective":
        cfg["_comment"].append("Selective recompute is a Megatron-DeepSpeed model flag, not a DeepSpeed config key.")
    if plan.pp > 1:
        cfg["_comment"].append(
            "pipeline: DeepSpeed's engine reads pipe_partitioned, grad_partitioned and activation_checkpoint_interval; "
            "stages and partition are kept for reference (the stage count is --pipeline-model-parallel-size)."
        )
        cfg["pipeline"] = {
            "stages": plan.pp,
            "partition": "type:transformer",
            "activation_checkpoint_interval": 1 if plan.recompute == "full" else 0,
            "pipe_partitioned": True,
            "grad_partitioned": True,
        }
    elif plan.recompute == "full":
        # Checkpoints split over TP ranks where the plan keeps them so (TP with sequence parallelism).
        split = plan.tp > 1 and bool(plan.sp)
        cfg["activation_checkpointing"] = {"partition_activations": split, "contiguous_memory_optimization": False}
    _put_table_settings(cfg, plan)
    validate(cfg, plan)
    return cfg


_WRITTEN_HERE = frozenset({"zero", "dp_comm_overlap", "dp_shard", "grad_dtype", "precision", "partition_activations"})
"""Table options ``config_dict`` writes into its sections itself."""


def _put_table_settings(cfg: dict, plan: Plan) -> None:
    """Every other option of the table, from its rows, at its dotted path (a new DeepSpeed key is one row)."""
    for option in TABLE.options:
        if option in _WRITTEN_HERE:
            continue
        for key, value in TABLE.write(option, getattr(plan, option), plan):
            *parents, leaf = key.split(".")
            node = cfg
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value


def _section(settings, section: str) -> dict:
    """{key: value} of the table's ``section.key`` settings, in order."""
    return {key.split(".", 1)[1]: value for key, value in settings if key.startswith(section + ".")}


def validate(cfg: dict, plan: Plan) -> None:
    """The batch identity DeepSpeed asserts: train_batch = micro * accumulation * DP world."""
    tb, mb, ga = cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]
    if tb != mb * ga * plan.dp or tb != plan.gbs:
        raise CannotExpress("deepspeed_batch_identity", f"train_batch_size {tb} != {mb} x {ga} x dp {plan.dp}", _CONFIG)


def render(plan: Plan) -> str:
    text = json.dumps(config_dict(plan), indent=2, ensure_ascii=False) + "\n"
    json.loads(text)
    return text


EXPORTER = Exporter(
    name="deepspeed",
    files={FILE_NAME: PLAIN},
    render=one_file(FILE_NAME, lambda plan, entrypoint: render(plan)),
    table=TABLE,
    description="Megatron-DeepSpeed config (batch, ZeRO, pipeline)",
)
