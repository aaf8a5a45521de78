"""DeepSpeed: the one table of planner option <-> DeepSpeed config key (dotted paths of the config
JSON), for the exporter (``planner/export/deepspeed.py``) and the reader (``planner/launch/deepspeed.py``).

Keys and defaults as DeepSpeed declares them (deepspeed 0.19.8 runtime/config.py, runtime/zero/config.py,
runtime/activation_checkpointing/config.py; DeepSpeed config-json docs). Tensor/pipeline/expert sizes
are Megatron-DeepSpeed command-line arguments, not config keys: a config states only what is here
(the Ulysses degree is both: --ds-sequence-parallel-size and sequence_parallel_size).
"""

from __future__ import annotations

from planner.frameworks.table import NUMBER, Above, Refusal, Row, Table

SOURCE = "DeepSpeed config (deepspeed 0.19.8 runtime/config.py, runtime/zero/config.py)"
_ZERO = "deepspeed/runtime/zero/config.py"
_CKPT = "deepspeed/runtime/activation_checkpointing/checkpointing.py"
_PIPE = "deepspeed/runtime/pipe/engine.py (PipelineEngine.__init__)"
_ULYSSES = ("DeepSpeed-Ulysses (Jacobs et al. 2023); deepspeed/sequence/layer.py DistributedAttention; "
            "Megatron-DeepSpeed megatron/arguments.py --ds-sequence-parallel-size")
_MDS = "microsoft/Megatron-DeepSpeed@f4157bea69f3"
_BF16 = ("deepspeed/runtime/bf16_optimizer.py update_hp_grads (hp_grad.add_(lp.grad.to(fp32)) after every "
         "micro-batch's backward); runtime/pipe/engine.py _exec_backward_pass")


def _runs_bf16_optimizer(plan) -> bool:
    """The plan is DeepSpeed's BF16_Optimizer: FP32 gradient accumulation of a BF16 model at ZeRO
    stage 1 (runtime/engine.py _do_optimizer_sanity_check: the BFLOAT16 wrapper; ZeRO 2-3 run their
    own optimizer). It casts and adds every micro-batch's gradients and all-reduces the whole FP32
    gradient (grad_accum_pass cast_add, grad_reduce all_reduce)."""
    return plan.grad_dtype == "fp32" and plan.zero == 1


TABLE = Table("deepspeed", source=SOURCE, releases="deepspeed 0.19.8", rows=(
    Row("zero", NUMBER, (("zero_optimization.stage", 0),), source=_ZERO + " (default 0)"),
    Row("zero", 0, (), default=True, write=False, source=_ZERO),
    Row("dp_comm_overlap", True, (("zero_optimization.overlap_comm", True),), source=_ZERO + " overlap_comm"),
    Row("dp_comm_overlap", False, (("zero_optimization.overlap_comm", False),), source=_ZERO + " overlap_comm"),
    # Hybrid sharding: MiCS shards ZeRO-3 states over groups of mics_shard_size ranks (runtime/zero/mics.py).
    Row("dp_shard", NUMBER, (("zero_optimization.mics_shard_size", 0),), source="deepspeed/runtime/zero/mics.py"),
    Row("grad_dtype", "bf16", (("communication_data_type", "bf16"), ("data_types.grad_accum_dtype", "bf16")),
        source="DeepSpeed config docs: communication_data_type, data_types.grad_accum_dtype"),
    # DeepSpeed accumulates and reduces gradients in the model's dtype unless told otherwise
    # (runtime/engine.py communication_data_type and get_data_types: bf16 when bf16 is enabled), so
    # an FP32 reduction is written out; a config naming neither is read as its model dtype.
    Row("grad_dtype", "fp32", (("communication_data_type", "fp32"), ("data_types.grad_accum_dtype", "fp32")),
        source="deepspeed runtime/engine.py communication_data_type, get_data_types (default: the model dtype)"),
    Row("grad_dtype", "bf16", (), default=True, write=False,
        source="deepspeed runtime/engine.py: a bf16 model's gradients are accumulated and reduced in bf16 by default"),
    Row("precision", "bf16", (("bf16.enabled", True),), also=(("fp16.enabled", False),), source="runtime/config.py"),
    Row("optimizer_states", "fp32", (), default=True,
        source="deepspeed runtime/bf16_optimizer.py, runtime/zero/stage_1_and_2.py: FP32 master partitions and Adam moments"),
    # Full recompute: the checkpoints of a TP-split model are partitioned over the TP ranks
    # (partition_activations: each rank keeps 1/tp of a layer's input, all-gathered for the backward),
    # which is how the plan keeps them with sequence parallelism.
    Row("partition_activations", True, (("activation_checkpointing.partition_activations", True),), source=_CKPT),
    # Pipeline sends: the pipeline engine splits each send over the model-parallel ranks whenever TP is on
    # (is_pipe_partitioned = is_model_parallel; Megatron-DeepSpeed turns it off with sequence parallelism).
    # Not a config key: the table only refuses a plan priced the other way.
    Row("p2p_scatter_gather", True, (), source=_PIPE + " is_pipe_partitioned = is_model_parallel"),
    Row("p2p_scatter_gather", False, (), source="moot without a pipeline, at tp 1 or with SP (refused where it applies)"),
    # The pipeline engine runs no interleaved schedule (one chunk per stage): the overlap is moot.
    Row("p2p_comm_overlap", True, (), default=True, source=_PIPE + " (no virtual stages: moot)"),
    Row("p2p_comm_overlap", False, (), source=_PIPE + " (no virtual stages: moot)"),
    # Context parallelism: DeepSpeed's is Ulysses (Jacobs et al. 2023, Sec. 3): each attention input is
    # split by sequence, an all-to-all regroups it by head, attention runs on whole sequences, and a second
    # all-to-all splits it back: Megatron's --cp-comm-type a2a, the one cp_comm_type it runs. Its degree is
    # Megatron-DeepSpeed's --ds-sequence-parallel-size (the mpu's sequence-parallel group; the data-parallel
    # size is world / (tp * pp * sp), megatron/arguments.py) and the config's sequence_parallel_size (the
    # data-parallel world DeepSpeed checks the batch against without an mpu: world / sequence_parallel_size,
    # runtime/config.py); the reader states cp_comm_type a2a from it (launch/deepspeed.py).
    Row("cp", NUMBER, (("sequence_parallel_size", 0),), when=lambda plan: plan.cp > 1, source=_ULYSSES),
    Row("cp", 1, (), default=True, source="no sequence parallelism (sequence_parallel_size absent: 1)"),
    Row("cp_comm_type", "a2a", (), source=_ULYSSES + " (the head all-to-all, stated by sequence_parallel_size)"),
    Row("cp_comm_type", "p2p", (), default=True, when=lambda plan: plan.cp == 1, source="moot without CP"),
    Row("cuda_graphs", False, (), default=True, source="no CUDA-graph capture of the training step"),
    Row("nccl_ub", False, (), default=True, source="ZeRO collectives on PyTorch-allocated buffers (no NCCL user-buffer registration)"),
    Row("tp_overlap_rs_ring", False, (), default=True, source="no TransformerEngine userbuffers TP overlap"),
    Row("cpu_offload_layers", None, (), default=True, source="no layer activation offload"),
    # ZeRO-3 keeps flat parameter buffers (partition_parameters.py); the flavour is moot below ZeRO-3.
    Row("fsdp", "flat", (), default=True, source=_ZERO + "; runtime/zero/partition_parameters.py"),
    *(Row("fsdp", f, (), when=lambda plan: plan.zero != 3, source="moot below ZeRO-3") for f in ("fsdp2", "megatron")),
    # Micro-batch gradients: FP32 accumulation of a BF16 model runs the BF16_Optimizer, which casts and adds every
    # micro-batch's gradients into FP32 (read from the accumulation dtype, written by the grad_dtype row); 16-bit
    # accumulation is autograd's in-place add on param.grad.
    # The BF16_Optimizer runs only at ZeRO stage 1 (runtime/engine.py _do_optimizer_sanity_check: BFLOAT16 for a
    # BF16 model with FP32 accumulation at stage 1; ZeRO 2-3 add the reduced partitions themselves). With one
    # micro-batch a step autograd adds nothing, as Megatron's fused accumulation: the same price.
    Row("grad_accum_pass", "cast_add", (("data_types.grad_accum_dtype", "fp32"),), write=False, source=_BF16),
    Row("grad_accum_pass", "cast_add", (), when=lambda plan: plan.grad_dtype == "fp32", source=_BF16),
    Row("grad_accum_pass", "autograd", (), default=True,
        source="torch autograd AccumulateGrad on the 16-bit param.grad (the fp16 engine; ZeRO stage 1 without "
               "overlap_comm registers no reduce hooks: runtime/zero/stage_1_and_2.py)"),
    Row("grad_accum_pass", "fused", (), when=lambda plan: plan.grad_accum == 1,
        source="moot with one micro-batch a step outside the BF16_Optimizer (autograd adds nothing)"),
    # Gradient reduction: the BF16_Optimizer (FP32 accumulation at ZeRO-1, above) all-reduces the whole FP32
    # gradient; the ZeRO stage 1-2 optimizer reduces each partition to its owner (a reduce-scatter's bytes).
    # Not a config key: what the rows above state decides it.
    Row("grad_reduce", "all_reduce", (), when=_runs_bf16_optimizer,
        source="deepspeed/runtime/pipe/engine.py _exec_reduce_grads -> _bf16_reduce_grads (buffered_allreduce_fallback over the FP32 "
               "gradients); runtime/engine.py allreduce_gradients likewise outside the pipeline"),
    Row("grad_reduce", "reduce_scatter", (), default=True,
        source="deepspeed runtime/zero/stage_1_and_2.py average_tensor: each partition reduced to its owner"),
), elsewhere=tuple((o, "not a DeepSpeed config key: Megatron-DeepSpeed's command line or model code states it, so a "
                       "reader takes it from planner's command line") for o in (
    "tp", "pp", "dp", "ep", "etp", "vpp", "mbs", "gbs", "seq_len", "recompute", "recompute_layers", "recompute_share",
    "recompute_modules", "sequence_parallel", "attention", "kernels", "loss", "tp_comm_overlap", "tp_overlap_kind",
    "ep_comm_overlap", "moe_dispatcher", "moe_grouped_gemm", "moe_capacity_factor", "moe_pad_to_capacity", "zero3_gather", "pp_first_layers", "pp_last_layers")) + (
    ("fp8_recipe", "moot: a DeepSpeed config has no FP8 (precision fp8 is refused, rule deepspeed_no_fp8), so no "
                   "FP8 scaling recipe either"),
    ("fp8_param_gather", "moot: a DeepSpeed config has no FP8 (precision fp8 is refused, rule deepspeed_no_fp8), so no "
                         "FP8 parameters either"),
    ("launch_blocking", "an environment variable of the launch (CUDA_LAUNCH_BLOCKING=1), no DeepSpeed config setting: a reader takes it from planner's command line"),),
refusals=(
    Refusal("grad_accum_pass", ("fused",), "deepspeed_grad_accum_pass", "grad_accum_pass fused prices Megatron's "
            "accumulation inside the weight-gradient GEMM; DeepSpeed adds each micro-batch's gradients in a pass of "
            "its own: price with --grad-accum-pass cast_add (FP32 accumulation at ZeRO-1: the BF16_Optimizer) or "
            "autograd", _BF16,
            when=lambda plan: plan.grad_accum > 1 or _runs_bf16_optimizer(plan)),
    Refusal("grad_accum_pass", ("cast_add",), "deepspeed_grad_accum_cast", "grad_accum_pass cast_add prices the "
            "BF16_Optimizer, which DeepSpeed runs only at ZeRO stage 1 with FP32 gradient accumulation: price with "
            "--grad-accum-pass autograd (ZeRO 2-3 add the reduced partitions themselves), or --zero 1 --grad-dtype fp32",
            _BF16 + "; runtime/engine.py _do_optimizer_sanity_check",
            when=lambda plan: not _runs_bf16_optimizer(plan)),
    Refusal("grad_accum_pass", ("autograd",), "deepspeed_grad_accum_bf16_optimizer", "grad_accum_pass autograd with "
            "FP32 gradient accumulation at ZeRO-1: DeepSpeed runs that as the BF16_Optimizer, which zeroes, casts and "
            "adds each micro-batch's gradients: price with --grad-accum-pass cast_add, or --grad-dtype bf16",
            _BF16 + "; runtime/engine.py _do_optimizer_sanity_check (BFLOAT16 wrapper)",
            when=_runs_bf16_optimizer),
    Refusal("grad_reduce", ("reduce_scatter",), "deepspeed_grad_reduce_bf16_optimizer", "grad_reduce reduce_scatter "
            "with FP32 gradient accumulation at ZeRO-1: DeepSpeed runs that as the BF16_Optimizer, which all-reduces "
            "the whole FP32 gradient: price with --grad-reduce all_reduce, or --grad-dtype bf16",
            "deepspeed/runtime/pipe/engine.py _bf16_reduce_grads", when=_runs_bf16_optimizer),
    Refusal("grad_reduce", ("all_reduce",), "deepspeed_grad_reduce", "grad_reduce all_reduce prices the "
            "BF16_Optimizer, which DeepSpeed runs only at ZeRO stage 1 with FP32 gradient accumulation; its ZeRO "
            "optimizer reduces each partition to its owner: price with --grad-reduce reduce_scatter, or --zero 1 "
            "--grad-dtype fp32", "deepspeed runtime/zero/stage_1_and_2.py average_tensor",
            when=lambda plan: not _runs_bf16_optimizer(plan)),
    Refusal("grad_reduce", ("all_reduce_fp32",), "deepspeed_grad_reduce_fp32", "grad_reduce all_reduce_fp32 prices "
            "Aleph Alpha's all-reduce of 16-bit gradients cast to FP32; DeepSpeed reduces in the gradients' own dtype: "
            "price with --grad-reduce all_reduce and --grad-dtype fp32 (the BF16_Optimizer), or reduce_scatter",
            "deepspeed runtime/zero/stage_1_and_2.py, runtime/bf16_optimizer.py"),
    Refusal("optimizer_states", ("remainders", "bf16"), "deepspeed_optimizer_states", "optimizer_states remainders / "
            "bf16 price NeMo 1's Apex distributed_fused_adam; DeepSpeed's BF16 and ZeRO optimizers keep FP32 master "
            "partitions and FP32 Adam moments: price with --optimizer-states fp32",
            "deepspeed runtime/bf16_optimizer.py, runtime/zero/stage_1_and_2.py"),
    Refusal("p2p_scatter_gather", (False,), "deepspeed_p2p_scatter_gather", "p2p_scatter_gather off: DeepSpeed's "
            "pipeline engine splits every pipeline send over the TP ranks when TP is on without sequence parallelism "
            "(is_pipe_partitioned): price with --p2p-scatter-gather true", _PIPE,
            when=lambda plan: plan.tp > 1 and plan.pp > 1 and not plan.sp),
    Refusal("cp_comm_type", ("p2p", "allgather", "a2a+p2p"), "deepspeed_cp_comm_type", "DeepSpeed's context "
            "parallelism is Ulysses (--ds-sequence-parallel-size: the head all-to-all, cp_comm_type a2a); it has no "
            "ring, all-gather or hierarchical attention: price with --cp-comm-type a2a", _ULYSSES,
            when=lambda plan: plan.cp > 1),
    Refusal("cp", Above(1), "deepspeed_ulysses_tp_pp", "Ulysses sequence parallelism in Megatron-DeepSpeed "
            "'is currently incompatible with Megatron-LM's tensor or pipeline parallelism': price cp > 1 with "
            "tp 1 and pp 1", _MDS + " examples_deepspeed/sequence_parallel/README.md",
            when=lambda plan: plan.tp > 1 or plan.pp > 1),
    Refusal("cp", Above(1), "deepspeed_ulysses_heads", "Ulysses splits the attention heads over the sequence-"
            "parallel ranks: the head count must be divisible by cp", _MDS + " megatron/model/transformer.py "
            "(assert num_attention_heads % sequence-parallel world size == 0); deepspeed/sequence/layer.py",
            when=lambda plan: plan.model.num_attention_heads % plan.cp != 0),
    Refusal("tp_overlap_rs_ring", (True,), "deepspeed_tp_overlap_rs_ring", "tp_overlap_rs_ring: a DeepSpeed config has no "
            "TransformerEngine userbuffers TP overlap whose reduce-scatters could run as ring exchange: price with "
            "--tp-overlap-rs-ring false", "deepspeed/runtime/config.py"),
    Refusal("nccl_ub", (True,), "deepspeed_nccl_ub", "nccl_ub: a DeepSpeed config does not register its ZeRO buffers "
            "as NCCL user buffers (Megatron-Core's --use-nccl-ub): price with --nccl-ub false", "deepspeed/runtime/config.py"),
    Refusal("cuda_graphs", (True,), "deepspeed_cuda_graphs", "cuda_graphs: a DeepSpeed training config has no setting "
            "that captures the layers' forward and backward in CUDA graphs: price with --cuda-graphs false",
            "deepspeed/runtime/config.py"),
    Refusal("cpu_offload_layers", Above(0), "deepspeed_cpu_offload", "cpu_offload_layers: DeepSpeed offloads layer "
            "activations only as activation_checkpointing.cpu_checkpointing, the checkpoints of full recompute, which "
            "is not what planner prices for offload (ZeRO-Offload moves optimizer states and parameters)", _CKPT),
    Refusal("fsdp", ("fsdp2", "megatron"), "deepspeed_fsdp", "DeepSpeed ZeRO-3 partitions parameters into flat "
            "buffers (FSDP1-like): price with --fsdp flat", _ZERO + "; runtime/zero/partition_parameters.py",
            when=lambda plan: plan.zero == 3),
    Refusal("precision", ("fp8",), "deepspeed_no_fp8", "precision fp8: a DeepSpeed config has bf16/fp16 sections only; "
            "FP8 GEMMs live in the model code (TransformerEngine), which this file cannot switch on",
            "deepspeed/runtime/config.py"),
))
"""planner option <-> DeepSpeed config key. ``partition_activations`` is not a planner option: it is
how DeepSpeed keeps the checkpoints split over TP ranks, written where the plan does (TP with SP)."""

QUIET = frozenset("""
_comment optimizer scheduler gradient_clipping steps_per_print wall_clock_breakdown dump_state memory_breakdown
prescale_gradients gradient_predivide_factor sparse_gradients zero_allow_untested_optimizer zero_force_ds_cpu_optimizer
flops_profiler tensorboard wandb csv_monitor comet comms_logger checkpoint data_efficiency curriculum_learning
compression_training aio elasticity autotuning seed disable_allgather amp_params timers graph_harvesting
use_data_before_expert_parallelism
""".split())
"""Top-level keys that leave step time and memory alone."""
ZERO_KEYS = frozenset("""
stage overlap_comm contiguous_gradients reduce_bucket_size allgather_bucket_size allgather_partitions reduce_scatter
round_robin_gradients stage3_prefetch_bucket_size stage3_param_persistence_threshold stage3_max_live_parameters
stage3_max_reuse_distance stage3_gather_16bit_weights_on_model_save stage3_gather_fp16_weights_on_model_save
sub_group_size elastic_checkpoint load_from_fp32_weights ignore_unused_parameters legacy_stage1
gather_16bit_weights_on_model_save memory_efficient_linear offload_optimizer offload_param mics_shard_size
mics_hierarchical_params_gather
""".split())
"""zero_optimization keys the reader knows (the table's, and those that leave the price alone)."""
