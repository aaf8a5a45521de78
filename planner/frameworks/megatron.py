"""Megatron-LM / Megatron-Core: the one table of planner option <-> Megatron argument.

Keys are Megatron-LM argparse dests (``--tensor-model-parallel-size`` -> ``tensor_model_parallel_size``),
which Megatron-Core also uses as its config field names (ModelParallelConfig, TransformerConfig,
DistributedDataParallelConfig): Megatron-LM builds those configs from the same names and lists the
few renames once (megatron/training/argument_utils.py, ``_default_config_from_args``). So one table
serves the Megatron-LM exporter and reader (``planner/export/megatron.py``, ``planner/launch/mcore.py``)
and, renamed (``planner.frameworks.bridge``), NeMo 2 / Megatron-Bridge.

Every flag and dest is one of ``megatron_arguments.txt`` (all of arguments.py at ``MEGATRON_COMMIT``),
the list the exporter checks what it writes against and the reader classifies what it reads with.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from costmodel.options import FP8_RECIPES
from planner.frameworks.table import NUMBER, CannotExpress, Refusal, Row, Table

MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
"""Megatron-LM main of 2026-08-22 (the list before it: 000c4ac24f61, 2025-11-13, whose flags this
commit no longer has are kept in megatron_arguments.txt marked ``removed``)."""
ARGS = f"Megatron-LM arguments.py@{MEGATRON_COMMIT[:12]}"
ARGS_PY = f"Megatron-LM megatron/training/arguments.py@{MEGATRON_COMMIT[:12]}"
_DDP = "Megatron-Core distributed/distributed_data_parallel_config.py"
_FSDP = "Megatron-Core distributed/fsdp (Megatron-FSDP, data_parallel_sharding_strategy)"
_TE_CP = "TransformerEngine attention/dot_product_attention/context_parallel.py (cp_comm_type)"
_TCFG = "Megatron-Core transformer/transformer_config.py"


def _fp8(plan) -> bool:
    return plan.precision == "fp8"


def _zero3(fsdp: str):
    """Written for ZeRO-3 plans of this FSDP flavour (``fsdp`` applies with zero = 3 only)."""
    return lambda plan: plan.zero != 3 or plan.fsdp == fsdp


@lru_cache(maxsize=1)
def _flag_list() -> tuple[dict[str, tuple[str, str]], frozenset[str], dict[str, tuple[str, ...]]]:
    known, removed, choices = {}, set(), {}
    for line in Path(__file__).with_name("megatron_arguments.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("--"):
            flag, kind, group, *rest = line.split()
            known[flag] = (kind, group)
            for word in rest:
                if word == "removed":
                    removed.add(flag)
                elif word.startswith("choices="):
                    choices[flag] = tuple(word[len("choices="):].split(","))
    # The flags of the releases --framework names that main no longer has (--use-custom-fsdp,
    # --moe-enable-deepep, --enable-cuda-graph, ...): known to the reader, never written for main.
    for path in sorted(Path(__file__).parent.glob("megatron_arguments_core_*.txt")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("--"):
                flag, kind, group, *_ = line.split()
                if flag not in known:
                    known[flag] = (kind, group)
                    removed.add(flag)
    return known, frozenset(removed), choices


def known_flags() -> dict[str, tuple[str, str]]:
    """flag -> (kind: switch | value | list, arguments.py group), from megatron_arguments.txt: the
    flags of ``MEGATRON_COMMIT`` and those an earlier pinned commit had (``removed_flags``), so the
    reader still parses an older script."""
    return _flag_list()[0]


def removed_flags() -> frozenset[str]:
    """Flags of an earlier pinned commit that ``MEGATRON_COMMIT`` no longer has (never written)."""
    return _flag_list()[1]


def flag_choices() -> dict[str, tuple[str, ...]]:
    """flag -> the values argparse accepts for it (its ``choices``), for the flags that have them."""
    return _flag_list()[2]


def flag(dest: str) -> str:
    """The command-line flag of an argparse dest (argparse's own rule, reversed)."""
    return "--" + dest.replace("_", "-")


def words(settings) -> list[tuple[str, list]]:
    """(flag, values) pairs for (dest, value) settings: True is a switch, False is left out."""
    out = []
    for dest, value in settings:
        if value is True:
            out.append((flag(dest), []))
        elif value is not False and value is not None:
            out.append((flag(dest), list(value) if isinstance(value, (list, tuple)) else [value]))
    return out


def _deg(option: str, dest: str) -> tuple:
    return (Row(option, NUMBER, ((dest, 0),), source=ARGS),
            Row(option, 1, (), default=True, write=False, source=ARGS))


def _on(option: str, dest: str, source: str = ARGS, also: tuple = ()) -> tuple:
    """A switch: on writes ``--dest``, off is Megatron's default (the flag left out)."""
    return (Row(option, True, ((dest, True),), also=also, source=source),
            Row(option, False, (), default=True, source=source))


def _fsdp2(plan) -> bool:
    """PyTorch FSDP2 under Megatron (--use-torch-fsdp2): ZeRO-3 of the fsdp2 flavour."""
    return plan.zero == 3 and plan.fsdp == "fsdp2"


def _fsdp_copy(plan) -> bool:
    """Megatron-FSDP at ZeRO-2/3 (optim_grads, optim_grads_params), written without gradient
    accumulation fusion: its hook copies every micro-batch's gradient (``main_grad_copy``)."""
    return plan.zero >= 2 and not _fsdp2(plan)


_MFSDP_GRAD_ACC = ("Megatron-Core distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py _grad_acc "
                   "(param.main_grad.copy_(param.grad) into the reduce-scatter bucket, every backward: "
                   "_process_post_backward_gradients grad_reduce_every_bprop)")
_TORCH_FSDP2_GRAD_ACC = ("torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce (sharded grad += "
                         "new shard); Megatron-LM megatron/training/training.py (no no_sync_func for "
                         "TorchFullyShardedDataParallel: a reduce-scatter every micro-batch)")


def _grad_accum_rows(source: str, fsdp_keys: tuple) -> tuple:
    """grad_accum_pass as the ZeRO rows run it: fused below ZeRO-2 (DDP / distributed optimizer);
    Megatron-FSDP ZeRO-2/3, which planner writes with --no-gradient-accumulation-fusion, copies
    each micro-batch's gradient (main_grad_copy, read back from its ``fsdp_keys`` rows); FSDP2 adds
    the reduce-scattered shards (autograd; moot, so fused too, with one micro-batch a step)."""
    return (
        Row("grad_accum_pass", "fused", (), default=True, when=lambda plan: plan.zero < 2,
            source=source + " --no-gradient-accumulation-fusion (dest gradient_accumulation_fusion, on by default); "
                   "Megatron-Core tensor_parallel/layers.py (wgrad GEMM accumulating into main_grad)"),
        Row("grad_accum_pass", "main_grad_copy", (), when=_fsdp_copy, source=_MFSDP_GRAD_ACC),
        *(Row("grad_accum_pass", "main_grad_copy", (*keys, ("data_parallel_sharding_strategy", strategy)),
              write=False, source=_MFSDP_GRAD_ACC)
          for keys in fsdp_keys for strategy in ("optim_grads", "optim_grads_params")),
        Row("grad_accum_pass", "autograd", (), when=_fsdp2, source=_TORCH_FSDP2_GRAD_ACC),
        Row("grad_accum_pass", "autograd", (("use_torch_fsdp2", True),), write=False, source=_TORCH_FSDP2_GRAD_ACC),
        Row("grad_accum_pass", "fused", (), when=lambda plan: _fsdp2(plan) and plan.grad_accum == 1,
            source="moot with one micro-batch a step under FSDP2 (nothing to add)"),
    )


def _grad_accum_refusals(source: str) -> tuple:
    """The passes the ZeRO rows do not run (rule megatron_grad_accum_pass)."""
    fused = source + " --no-gradient-accumulation-fusion; Megatron-Core tensor_parallel/layers.py"
    return (
        Refusal("grad_accum_pass", ("autograd", "cast_add", "main_grad_copy"), "megatron_grad_accum_pass",
                "grad_accum_pass autograd / cast_add / main_grad_copy below ZeRO-2: Megatron's DDP and distributed "
                "optimizer add each micro-batch's gradients into main_grad inside the weight-gradient GEMM "
                "(gradient accumulation fusion, on by default): price with --grad-accum-pass fused",
                fused, when=lambda plan: plan.zero < 2),
        Refusal("grad_accum_pass", ("fused", "autograd", "cast_add"), "megatron_grad_accum_pass",
                "grad_accum_pass fused / autograd / cast_add at ZeRO-2/3 with Megatron-FSDP: planner writes it with "
                "--no-gradient-accumulation-fusion, and its hook copies every micro-batch's whole gradient into the "
                "reduce-scatter bucket: price with --grad-accum-pass main_grad_copy", _MFSDP_GRAD_ACC, when=_fsdp_copy),
        Refusal("grad_accum_pass", ("cast_add", "main_grad_copy"), "megatron_grad_accum_pass",
                "grad_accum_pass cast_add / main_grad_copy with --use-torch-fsdp2: FSDP2 reduce-scatters every "
                "micro-batch and adds the shards (autograd): price with --grad-accum-pass autograd",
                _TORCH_FSDP2_GRAD_ACC, when=_fsdp2),
        Refusal("grad_accum_pass", ("fused",), "megatron_grad_accum_pass",
                "grad_accum_pass fused with --use-torch-fsdp2 and several micro-batches a step: Megatron requires "
                "--no-gradient-accumulation-fusion there (validate_args) and FSDP2 adds each micro-batch's "
                "reduce-scattered shard: price with --grad-accum-pass autograd",
                _TORCH_FSDP2_GRAD_ACC, when=lambda plan: _fsdp2(plan) and plan.grad_accum > 1),
    )


def _fsdp(zero: int, strategy: str, when=None) -> Row:
    return Row("zero", zero, (("use_megatron_fsdp", True), ("data_parallel_sharding_strategy", strategy)),
               also=(("use_distributed_optimizer", True), ("no_gradient_accumulation_fusion", True),
                     ("ckpt_format", "fsdp_dtensor")), source=_FSDP, when=when)


TABLE = Table("megatron", source=ARGS_PY, releases=f"Megatron-LM {MEGATRON_COMMIT[:12]} (megatron_arguments.txt)", rows=(
    *_deg("tp", "tensor_model_parallel_size"),
    *_deg("pp", "pipeline_model_parallel_size"),
    *_deg("cp", "context_parallel_size"),
    *_deg("ep", "expert_model_parallel_size"),
    Row("etp", NUMBER, (("expert_tensor_parallel_size", 0),), source=ARGS + " (None -> tensor_model_parallel_size)"),
    *_on("sequence_parallel", "sequence_parallel"),
    Row("vpp", NUMBER, (("num_virtual_stages_per_pipeline_rank", 0),), source=ARGS),
    # ZeRO: the distributed optimizer shards optimizer states (1); Megatron-FSDP shards grads (2) and params (3).
    Row("zero", 0, (), default=True, source=_DDP),
    Row("zero", 0, (("use_megatron_fsdp", True),), write=False, source=_FSDP + " (default strategy no_shard)"),
    Row("zero", 1, (("use_distributed_optimizer", True),), source=ARGS + " (distributed optimizer)"),
    Row("zero", 1, (("use_megatron_fsdp", True), ("data_parallel_sharding_strategy", "optim")), write=False, source=_FSDP),
    _fsdp(2, "optim_grads"),
    # ZeRO-3 by flavour (the fsdp option): Megatron-FSDP, or PyTorch FSDP2 (--use-torch-fsdp2, which
    # validate_args runs without the distributed optimizer); Megatron has no flat-parameter ZeRO-3 (refused).
    _fsdp(3, "optim_grads_params", when=_zero3("megatron")),
    Row("zero", 3, (("use_torch_fsdp2", True),), also=(("no_gradient_accumulation_fusion", True),),
        when=_zero3("fsdp2"), source=ARGS + " (FSDP2, full sharding)"),
    Row("zero", 2, (("use_torch_fsdp2", True), ("torch_fsdp2_no_reshard_after_forward", True)), write=False,
        source=ARGS + " (FSDP2 keeps weights gathered from forward to backward)"),
    # Hybrid sharding: dp / dp_shard distributed-optimizer instances, each sharding over dp_shard ranks
    # (param_and_grad_buffer.py: reduce-scatter inside an instance, all-reduce across). The key carries
    # the number of instances, dp / dp_shard; a file without it shards over every data-parallel rank.
    Row("dp_shard", NUMBER, (("num_distributed_optimizer_instances", 0),),
        source=_DDP + " num_distributed_optimizer_instances"),
    # Overlaps: --overlap-param-gather needs the distributed optimizer (validate_args).
    # (... or Megatron-FSDP: not with FSDP2, which prefetches by itself.)
    # NCCL user buffers: --use-nccl-ub sets DistributedDataParallelConfig.nccl_ub (argparse dest nccl_ub; the
    # table keys by the flag's own name, use_nccl_ub, which Megatron-Bridge renames to ddp.nccl_ub).
    *_on("nccl_ub", "use_nccl_ub", ARGS + " --use-nccl-ub (dest nccl_ub); " + _DDP + " nccl_ub"),
    Row("dp_comm_overlap", True, (("overlap_grad_reduce", True),), also=(("overlap_param_gather", True),),
        when=lambda plan: plan.zero >= 1 and not (plan.zero == 3 and plan.fsdp == "fsdp2"), source=_DDP),
    *_on("dp_comm_overlap", "overlap_grad_reduce", _DDP),
    Row("grad_dtype", "bf16", (("grad_reduce_in_bf16", True),), source=ARGS + " (FP32 main grads by default)"),
    Row("grad_dtype", "fp32", (), default=True, source=ARGS),
    Row("optimizer_states", "fp32", (), default=True,
        source=ARGS + " (without --use-precision-aware-optimizer: FP32 main params and Adam moments)"),
    Row("precision", "fp8", (("fp8_format", "hybrid"),), when=lambda plan: plan.fp8_recipe != "nvfp4",
        source=ARGS + " _add_transformer_engine_args"),
    # NVFP4 is --fp4-format e2m1, which Megatron refuses beside --fp8-format (arguments.py validate_args).
    Row("precision", "fp8", (("fp4_format", "e2m1"),), when=lambda plan: plan.fp8_recipe == "nvfp4",
        source=ARGS + " --fp4-format e2m1 (TransformerEngine NVFP4BlockScaling; exclusive with --fp8-format)"),
    Row("precision", "bf16", (), default=True, source=ARGS + " (--bf16 parameters, written beside every precision)"),
    Row("tp_comm_overlap", True, (("tp_comm_overlap", True),), source="Megatron-Core 'Communication overlap' docs"),
    Row("tp_comm_overlap", False, (), default=True, source=ARGS),
    Row("tp_overlap_kind", "userbuffers", (), default=True, source="TransformerEngine userbuffers (--tp-comm-overlap)"),
    Row("ep_comm_overlap", True, (("overlap_moe_expert_parallel_comm", True),), also=(("delay_wgrad_compute", True),),
        source=ARGS + " (EP A2A overlap needs delayed wgrad)"),
    Row("ep_comm_overlap", False, (), default=True, source=ARGS),
    Row("loss", "fused", (("cross_entropy_loss_fusion", True),), source=ARGS),
    Row("loss", "unfused", (), default=True, source="Megatron-Core tensor_parallel/cross_entropy.py"),
    # The flex dispatcher runs one backend, --moe-flex-dispatcher-backend {deepep, hybridep, ncclep} (default
    # deepep), since Megatron-LM 3df200905e (2025-11-18, "Add the Hybrid-EP backend to the Flex Dispatcher"),
    # which also deprecated --moe-enable-deepep (TransformerConfig.__post_init__ maps it to the deepep backend).
    Row("moe_dispatcher", "deepep", (("moe_token_dispatcher_type", "flex"), ("moe_flex_dispatcher_backend", "deepep")),
        source=ARGS + " (flex dispatcher, DeepEP backend); " + _TCFG + " moe_flex_dispatcher_backend"),
    Row("moe_dispatcher", "deepep", (("moe_token_dispatcher_type", "flex"), ("moe_enable_deepep", True)),
        write=False, releases="000c4ac24f61 and before (deprecated since 3df200905e)",
        source=ARGS + " --moe-enable-deepep (deprecated: = --moe-flex-dispatcher-backend deepep)"),
    Row("moe_dispatcher", "deepep", (("moe_token_dispatcher_type", "flex"),), write=False,
        source=_TCFG + " (moe_flex_dispatcher_backend default: deepep)"),
    Row("moe_dispatcher", "alltoall", (("moe_token_dispatcher_type", "alltoall"),), source=ARGS),
    Row("moe_dispatcher", "allgather", (("moe_token_dispatcher_type", "allgather"),), source=ARGS),
    Row("moe_dispatcher", "allgather", (), default=True, write=False,
        source=ARGS + " (--moe-token-dispatcher-type default: allgather)"),
    # HybridEP: the flex dispatcher's hybridep backend (Megatron-Bridge 0.2.0: model.moe_flex_dispatcher_backend).
    Row("moe_dispatcher", "hybridep", (("moe_token_dispatcher_type", "flex"), ("moe_flex_dispatcher_backend", "hybridep")),
        releases="Megatron-LM 3df200905e (2025-11-18, Megatron-Core v0.15) and later; Megatron-Bridge 0.2.0",
        source=ARGS + " --moe-flex-dispatcher-backend; " + _TCFG + " moe_flex_dispatcher_backend; "
               "Megatron-Bridge migration guide"),
    # Expert GEMMs: --moe-grouped-gemm builds TEGroupedMLP (TE GroupedLinear: one cuBLASLt GEMM per
    # expert over streams, the loop); without it, SequentialMLP (a Python loop over the local experts),
    # read as the loop. GroupedMLP (the grouped_gemm package's single CUTLASS launch, fused) sat behind
    # --moe-use-legacy-grouped-gemm from r0.9 until Megatron-LM 2caa681a1d (2026-03-04, "Remove the
    # deprecated GroupedMLP"): read from older scripts, refused by the export (export/megatron.py
    # validate_flags: the flag is marked removed in megatron_arguments.txt). Megatron-Core
    # transformer/moe/experts.py, models/gpt/moe_module_specs.py.
    Row("moe_grouped_gemm", "loop", (("moe_grouped_gemm", True),), source=ARGS + " (TEGroupedMLP)"),
    Row("moe_grouped_gemm", "loop", (), default=True, write=False, source=ARGS + " (SequentialMLP: per-expert loop)"),
    Row("moe_grouped_gemm", "fused", (("moe_grouped_gemm", True), ("moe_use_legacy_grouped_gemm", True)),
        releases="Megatron-Core r0.9 to Megatron-LM 2caa681a1d (2026-03-04), which removed GroupedMLP",
        source="Megatron-LM arguments.py@000c4ac24f61 --moe-use-legacy-grouped-gemm (GroupedMLP: grouped_gemm "
               "CUTLASS kernel, one launch)"),
    # Token drop: --moe-expert-capacity-factor (default None: dropless) caps each expert's tokens;
    # --moe-pad-expert-input-to-capacity pads every expert to it (TransformerConfig requires the factor).
    Row("moe_capacity_factor", 0.0, (), default=True, source=ARGS + " --moe-expert-capacity-factor (default None: dropless)"),
    Row("moe_capacity_factor", NUMBER, (("moe_expert_capacity_factor", 0),),
        source=ARGS + " --moe-expert-capacity-factor; Megatron-Core transformer/moe/moe_utils.py get_capacity"),
    *_on("moe_pad_to_capacity", "moe_pad_expert_input_to_capacity",
         ARGS + " --moe-pad-expert-input-to-capacity; " + _TCFG + " (needs moe_expert_capacity_factor)"),
    # Pipeline sends: Megatron-Core sends the whole activation (or the SP shard) from every TP rank;
    # scatter_gather_tensors_in_pipeline was Megatron-LM's p2p_communication.py before Megatron-Core.
    Row("p2p_scatter_gather", False, (), default=True,
        source="Megatron-Core pipeline_parallel/p2p_communication.py (whole tensors)"),
    Row("p2p_scatter_gather", True, (), source="moot without a pipeline, at tp 1 or with SP (costmodel.schedule): "
        "nothing to write (refused where it applies)"),
    # Interleaved schedule: steady-state sends overlapped by default (dest overlap_p2p_comm, store_false).
    Row("p2p_comm_overlap", True, (), default=True,
        source=ARGS + " (--no-overlap-p2p-communication, dest overlap_p2p_comm); Megatron-Core pipeline_parallel/schedules.py"),
    Row("p2p_comm_overlap", False, (("no_overlap_p2p_communication", True),),
        source=ARGS + " (--no-overlap-p2p-communication)"),
    # Attention: without --attention-backend, TransformerEngine picks at run time (auto): a
    # FlashAttention-class kernel, priced as flash; "fused" is cuDNN's (FlashAttention-3 class).
    Row("attention", "flash", (), default=True, source="Megatron-Core transformer/enums.py AttnBackend.auto"),
    Row("attention", "flash", (("attention_backend", "flash"),), write=False, source=ARGS),
    Row("attention", "flash", (("use_flash_attn", True),), write=False, source=ARGS + " (legacy)"),
    Row("attention", "flash3", (("attention_backend", "fused"),), source=ARGS + " --attention-backend fused (cuDNN)"),
    Row("attention", "unfused", (("attention_backend", "unfused"),), source=ARGS),
    Row("attention", "unfused", (("attention_backend", "local"),), write=False, source=ARGS),
    Row("kernels", "fused", (), default=True, source="Megatron-Core fused kernels (bias-GeLU, RoPE, norm: always on)"),
    Row("zero3_gather", "prefetch", (), default=True, source=_FSDP + " (prefetching all-gathers)"),
    Row("grad_reduce", "reduce_scatter", (), default=True,
        source="Megatron-Core distributed/param_and_grad_buffer.py: with the distributed optimizer each bucket is "
               "reduce-scattered to the ranks owning its shards (moot at ZeRO-0 / 2 / 3)"),
    # ZeRO-3 flavour: which of the zero rows above runs (moot below ZeRO-3, where nothing is written for it).
    Row("fsdp", "megatron", (("use_megatron_fsdp", True),), source=_FSDP, when=lambda plan: plan.zero == 3),
    Row("fsdp", "fsdp2", (("use_torch_fsdp2", True),), source=ARGS + " --use-torch-fsdp2",
        when=lambda plan: plan.zero == 3),
    Row("fsdp", "flat", (), default=True, source="moot below ZeRO-3 (the distributed optimizer's flat buffers)"),
    *(Row("fsdp", f, (), source="moot below ZeRO-3: nothing to write", when=lambda plan: plan.zero != 3)
      for f in ("fsdp2", "megatron")),
    # Context-parallel communication (--cp-comm-type, nargs='+': one value for every layer). a2a+p2p
    # also needs --hierarchical-context-parallel-sizes A P (export/megatron.py _parallel_args, A from
    # costmodel.placement.cp_a2a_ranks; launch/mcore.py checks A * P = cp).
    Row("cp_comm_type", "p2p", (), default=True, source=ARGS + " --cp-comm-type (default ['p2p'])"),
    Row("cp_comm_type", "p2p", (("cp_comm_type", "p2p"),), write=False, source=ARGS + " --cp-comm-type"),
    Row("cp_comm_type", "a2a", (("cp_comm_type", "a2a"),), source=ARGS + " --cp-comm-type; " + _TE_CP),
    Row("cp_comm_type", "allgather", (("cp_comm_type", "all_gather"),), source=ARGS + " --cp-comm-type; " + _TE_CP),
    Row("cp_comm_type", "a2a+p2p", (("cp_comm_type", "a2a+p2p"),),
        source=ARGS + " --cp-comm-type with --hierarchical-context-parallel-sizes; " + _TE_CP),
    # FP8 scaling recipe (--fp8-recipe; "current" is TransformerEngine's Float8CurrentScaling, Megatron's
    # tensorwise); written with --precision fp8 only, moot (nothing written) without it.
    Row("fp8_recipe", "delayed", (("fp8_recipe", "delayed"),), also=(("fp8_amax_history_len", 1024),
                                                                    ("fp8_amax_compute_algo", "max")),
        when=_fp8, source=ARGS + " _add_transformer_engine_args (--fp8-recipe delayed, amax history)"),
    Row("fp8_recipe", "current", (("fp8_recipe", "tensorwise"),), when=_fp8, source=ARGS + " --fp8-recipe tensorwise"),
    Row("fp8_recipe", "blockwise", (("fp8_recipe", "blockwise"),), when=_fp8, source=ARGS + " --fp8-recipe blockwise"),
    Row("fp8_recipe", "mxfp8", (("fp8_recipe", "mxfp8"),), when=_fp8, source=ARGS + " --fp8-recipe mxfp8"),
    Row("fp8_recipe", "nvfp4", (("fp4_recipe", "nvfp4"),), when=_fp8,
        source=ARGS + " --fp4-recipe nvfp4 (with --fp4-format e2m1); Megatron-Core fp4_utils.py"),
    Row("fp8_recipe", "nvfp4", (("fp4_format", "e2m1"),), write=False, source=ARGS + " (--fp4-recipe default nvfp4)"),
    Row("fp8_recipe", "delayed", (), default=True, write=False, source=ARGS + " (--fp8-recipe default delayed)"),
    *(Row("fp8_recipe", r, (), when=lambda plan: not _fp8(plan), source="moot without --precision fp8: nothing written")
      for r in FP8_RECIPES),
    # FP8 parameters (--fp8-param-gather): TE quantized_model_init, all-gathered in FP8; moot without FP8.
    Row("fp8_param_gather", True, (("fp8_param_gather", True),), when=_fp8,
        source=ARGS + " --fp8-param-gather (with the distributed optimizer or FSDP)"),
    Row("fp8_param_gather", False, (), default=True, source=ARGS + " (--fp8-param-gather off by default)"),
    Row("fp8_param_gather", True, (), when=lambda plan: not _fp8(plan), source="moot without --precision fp8"),
    # CUDA graphs: --cuda-graph-impl local (Megatron-Core per-layer graphs); --enable-cuda-graph and
    # --external-cuda-graph are its deprecated spellings (validate_args maps them to local / transformer_engine).
    Row("cuda_graphs", True, (("cuda_graph_impl", "local"),), source=ARGS_PY + " --cuda-graph-impl (validate_args)"),
    Row("cuda_graphs", True, (("cuda_graph_impl", "transformer_engine"),), write=False,
        source=ARGS_PY + " --cuda-graph-impl transformer_engine (TE make_graphed_callables)"),
    Row("cuda_graphs", True, (("enable_cuda_graph", True),), write=False, source=ARGS_PY + " (deprecated: = local)"),
    Row("cuda_graphs", True, (("external_cuda_graph", True),), write=False,
        source=ARGS_PY + " (deprecated: = transformer_engine)"),
    Row("cuda_graphs", False, (("cuda_graph_impl", "none"),), write=False, source=ARGS_PY + " --cuda-graph-impl none"),
    Row("cuda_graphs", False, (), default=True, source=ARGS_PY + " (--cuda-graph-impl default none)"),
    # CPU activation offload: validate_args turns --cpu-offloading on when --cpu-offloading-num-layers > 0
    # (the pinned arguments.py has no --cpu-offloading flag); TransformerConfig refuses it with PP.
    Row("cpu_offload_layers", NUMBER, (("cpu_offloading_num_layers", 0),),
        source=ARGS_PY + " --cpu-offloading-num-layers (> 0 sets cpu_offloading); " + _TCFG),
    # Gradient accumulation fusion (dest gradient_accumulation_fusion, on unless --no-gradient-accumulation-fusion):
    # the wgrad GEMM adds into main_grad (core/tensor_parallel/layers.py), no separate pass; the ZeRO-2/3 rows
    # above write the flag off, and run the pass their data-parallel wrapper runs.
    *_grad_accum_rows(ARGS, ((("use_megatron_fsdp", True),),)),
), elsewhere=(
    *((o, "export/megatron.py and launch/mcore.py (--micro-batch-size, --global-batch-size, --seq-length; dp from "
          "the GPU count)") for o in ("dp", "mbs", "gbs", "seq_len")),
    *((o, "export/megatron.py _recompute_args and launch/mcore.py _recompute (--recompute-granularity, -method, "
          "-num-layers, --recompute-modules)") for o in ("recompute", "recompute_layers", "recompute_share",
                                                        "recompute_modules")),
    *((o, "export/megatron.py _parallel_args (--decoder-first/last-pipeline-num-layers)")
      for o in ("pp_first_layers", "pp_last_layers")),
    ("launch_blocking", "an environment variable of the launch (CUDA_LAUNCH_BLOCKING=1), no Megatron setting: a reader takes it from planner's command line"),
    ("tp_overlap_rs_ring", "TransformerEngine's userbuffers config (Megatron-LM --tp-comm-overlap-cfg, a YAML file; "
     "Megatron-Bridge comm_overlap.tp_comm_overlap_cfg, a named preset such as "
     "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192), which planner's export does not write (TE's default "
     "pipelines the reduce-scatters): a reader takes it from planner's command line"),
), refusals=(
    Refusal("loss", ("eager",), "megatron_loss", "loss eager (F.cross_entropy on FP32 logits) is torchtitan's; Megatron "
            "runs its vocab-parallel cross entropy (unfused) or the fused kernel: price with --loss unfused or fused",
            "Megatron-Core tensor_parallel/cross_entropy.py"),
    Refusal("kernels", ("eager",), "megatron_kernels", "kernels eager: Megatron always runs its fused elementwise "
            "kernels (bias-activation, RoPE, norms); price with --kernels fused", "Megatron-Core fusions/"),
    Refusal("tp_overlap_kind", ("asynctp",), "megatron_tp_overlap_kind", "tp_overlap_kind asynctp is PyTorch's "
            "micro-pipeline TP (torchtitan); Megatron's --tp-comm-overlap runs TransformerEngine userbuffers: price "
            "with --tp-overlap-kind userbuffers", "Megatron-Core 'Communication overlap' docs"),
    Refusal("p2p_scatter_gather", (True,), "megatron_p2p_scatter_gather", "p2p_scatter_gather on prices Megatron-LM's "
            "pre-Megatron-Core pipeline sends split over the TP ranks (scatter_gather_tensors_in_pipeline); the "
            "Megatron-Core release planner writes for sends whole tensors (--no-scatter-gather-tensors-in-pipeline, a "
            "leftover with no effect, left arguments.py in 10e7b74597): price with --p2p-scatter-gather false",
            "Megatron-Core pipeline_parallel/p2p_communication.py; Megatron-LM v2 megatron/p2p_communication.py",
            when=lambda plan: plan.tp > 1 and plan.pp > 1 and not plan.sp),
    *_grad_accum_refusals(ARGS),
    Refusal("optimizer_states", ("remainders", "bf16"), "megatron_optimizer_states", "optimizer_states remainders / "
            "bf16 price NeMo 1's Apex distributed_fused_adam (16-bit master remainders; BF16 moments without a master); "
            "planner writes Megatron's FP32 optimizer: Megatron keeps remainders only through "
            "--use-precision-aware-optimizer (TransformerEngine FusedAdam), which planner does not write, and a master "
            "in any case (--main-params-dtype fp32 or fp16): price with --optimizer-states fp32",
            ARGS_PY + " --use-precision-aware-optimizer, --main-params-dtype; Megatron-Core optimizer_config.py "
            "store_param_remainders"),
    Refusal("grad_reduce", ("all_reduce", "all_reduce_fp32"), "megatron_grad_reduce", "grad_reduce all_reduce / "
            "all_reduce_fp32 price DeepSpeed's BF16_Optimizer and Aleph Alpha's scaling, which all-reduce the whole "
            "gradient under ZeRO-1; Megatron's distributed optimizer reduce-scatters it: price with --grad-reduce "
            "reduce_scatter", "Megatron-Core distributed/param_and_grad_buffer.py"),
    Refusal("zero3_gather", ("blocking", "post"), "megatron_zero3_gather", "zero3_gather blocking / post price DeepSpeed "
            "2021's per-tensor gathers and FSDP1's BACKWARD_POST; Megatron-FSDP prefetches its all-gathers", _FSDP),
    Refusal("fp8_recipe", ("delayed",), "megatron_fp8_delayed_recompute_modules", "fp8_recipe delayed with "
            "recompute_modules layernorm or moe_act: TransformerConfig raises 'Delayed scaling does not support moe_act "
            "and layernorm recompute for fp8': price with --fp8-recipe current (or another recipe), or other modules",
            _TCFG + " __post_init__ (recompute_modules with fp8)",
            when=lambda plan: plan.precision == "fp8" and plan.recompute == "selective"
            and bool({"layernorm", "moe_act"} & set(plan.recompute_modules or ()))),
    # overlap_moe_expert_parallel_comm's asserts in TransformerConfig.__post_init__ (the interleaving
    # one is search.rules' ep_comm_overlap_needs_interleaving).
    Refusal("ep_comm_overlap", (True,), "megatron_ep_overlap_needs_ep", "ep_comm_overlap with ep=1: TransformerConfig "
            "asserts 'overlap_moe_expert_parallel_comm is only supported with expert model parallelism': price with "
            "--ep > 1 or --no-ep-comm-overlap", _TCFG + " __post_init__ (overlap_moe_expert_parallel_comm)",
            when=lambda plan: plan.ep == 1),
    Refusal("ep_comm_overlap", (True,), "megatron_ep_overlap_dispatcher", "ep_comm_overlap with the allgather "
            "dispatcher: TransformerConfig asserts 'overlap_moe_expert_parallel_comm is supported with alltoall/flex token "
            "dispatcher': price with --moe-dispatcher alltoall, deepep or hybridep",
            _TCFG + " __post_init__ (overlap_moe_expert_parallel_comm)",
            when=lambda plan: plan.moe_dispatcher == "allgather"),
    Refusal("ep_comm_overlap", (True,), "megatron_ep_overlap_recompute", "ep_comm_overlap with full recompute or the "
            "'moe' recompute module: TransformerConfig asserts 'disable full recomputation' / 'disable moe in "
            "recompute_modules when enabling overlap_moe_expert_parallel_comm': price with selective recompute of "
            "other modules, or --no-ep-comm-overlap", _TCFG + " __post_init__ (overlap_moe_expert_parallel_comm)",
            when=lambda plan: plan.recompute == "full"
            or (plan.recompute == "selective" and "moe" in (plan.recompute_modules or ()))),
    Refusal("p2p_comm_overlap", (False,), "megatron_interleaved_p2p_overlap_pp2", "p2p_comm_overlap off with an "
            "interleaved schedule on pp=2: validate_args asserts 'When interleaved schedule is used and p2p communication "
            "overlap is disabled, pipeline-model-parallel size should be greater than 2': price with "
            "--p2p-comm-overlap, pp > 2 or vpp 1", ARGS_PY + " validate_args (--no-overlap-p2p-communication)",
            when=lambda plan: plan.vpp > 1 and plan.pp == 2),
    Refusal("cuda_graphs", (True,), "megatron_cuda_graphs_attention_dropout", "cuda_graphs with attention dropout and "
            "core-attention recompute: with the whole-layer graph scope TransformerConfig asserts 'attention dropout is not "
            "supported with graphed attention recomputation': price without --cuda-graphs or with other "
            "--recompute-modules", _TCFG + " __post_init__ (cuda_graph_impl, attention_dropout)",
            when=lambda plan: bool(plan.model.dropout) and plan.recompute == "selective"
            and "core_attn" in (plan.recompute_modules or ("core_attn",))),
    Refusal("fsdp", ("fsdp2",), "megatron_fsdp2_tied_embeddings", "fsdp fsdp2 with tied input and output "
            "embeddings: validate_args asserts '--use-torch-fsdp2 requires --untie-embeddings-and-output-weights', and "
            "untying trains another model: price with --fsdp megatron", ARGS_PY + " validate_args (--use-torch-fsdp2)",
            when=lambda plan: plan.zero == 3 and plan.model.tied_embeddings),
    Refusal("fsdp", ("flat",), "megatron_fsdp_flat", "fsdp flat prices FSDP1 / DeepSpeed flat-parameter ZeRO-3, which "
            "Megatron does not have: its ZeRO-3 is Megatron-FSDP (price with --fsdp megatron) or PyTorch FSDP2 "
            "(--fsdp fsdp2), in the Megatron-LM releases that have them (core_r0.8.0 has neither)", _FSDP + "; " + ARGS + " --use-torch-fsdp2", when=lambda plan: plan.zero == 3),
))
"""planner option <-> Megatron-LM argument dests, both ways."""

MODEL_DESTS = frozenset("""
num_layers hidden_size num_attention_heads ffn_hidden_size swiglu vocab_size tokenizer_type
make_vocab_size_divisible_by multi_latent_attention q_lora_rank kv_lora_rank qk_head_dim qk_pos_emb_head_dim
v_head_dim group_query_attention num_query_groups kv_channels num_experts moe_ffn_hidden_size
moe_shared_expert_intermediate_size moe_router_topk moe_router_num_groups moe_router_group_topk moe_layer_freq
position_embedding_type seq_length normalization untie_embeddings_and_output_weights disable_bias_linear
add_qkv_bias attention_dropout hidden_dropout max_position_embeddings mtp_num_layers window_size window_attn_skip_freq
""".split())
"""Dests the reader maps onto the model's shape (``planner.launch.mcore.model_fields``)."""

LAYOUT_DESTS = frozenset("""
pipeline_model_parallel_layout hierarchical_context_parallel_sizes
account_for_embedding_in_pipeline_split account_for_loss_in_pipeline_split num_layers_per_virtual_pipeline_stage
decoder_first_pipeline_num_layers decoder_last_pipeline_num_layers micro_batch_size global_batch_size
recompute_granularity recompute_activations recompute_method recompute_num_layers recompute_modules
data_parallel_sharding_strategy bf16 fp16 fp4_format
""".split())
"""Dests of layout settings the reader maps with code beside the table (pipeline split, batch, recompute)."""

MAPPED = MODEL_DESTS | LAYOUT_DESTS | TABLE.keys() - {"overlap_param_gather", "delay_wgrad_compute",
                                                         "no_gradient_accumulation_fusion", "ckpt_format",
                                                         "fp8_amax_history_len", "fp8_amax_compute_algo"}
"""Argument dests ``planner.launch.mcore`` maps onto planner's model and options (the table's keys
that state a value, and the shape / pipeline / batch / recompute dests)."""

QUIET_GROUPS = frozenset({
    "_add_logging_args", "_add_checkpointing_args", "_add_learning_rate_args", "_add_regularization_args",
    "_add_validation_args", "_add_initialization_args", "_add_data_args", "_add_tokenizer_args",
    "_add_autoresume_args", "_add_one_logger_args", "_add_ft_package_args", "_add_config_logger_args",
    "_add_straggler_detector_args", "_add_workload_inspector_server_args", "_add_inprocess_restart_args",
    "_add_rerun_machine_args", "_add_msc_args", "_add_biencoder_args", "_add_vision_args", "_add_retro_args",
    "_add_inference_args", "_add_rl_args", "_add_sft_args",
})
"""arguments.py groups whose flags leave step time and memory alone in planner's cost model."""

NOT_PRICED = frozenset("""
use_mcore_models transformer_impl apply_layernorm_1p rotary_base rotary_percent rotary_interleaved
rotary_seq_len_interpolation_factor use_rope_scaling rope_scaling_factor norm_epsilon init_method_std
moe_router_load_balancing_type moe_aux_loss_coeff moe_z_loss_coeff moe_router_pre_softmax
moe_router_score_function moe_router_enable_expert_bias moe_router_topk_scaling_factor moe_router_bias_update_rate
moe_router_dtype moe_permute_fusion moe_input_jitter_eps moe_token_drop_policy fp8_amax_history_len
fp8_amax_compute_algo fp8_margin fp8_interval no_gradient_accumulation_fusion calculate_per_token_loss
manual_gc manual_gc_interval manual_gc_eval exit_duration_in_mins exit_interval exit_signal_handler train_iters
train_samples distributed_timeout_minutes overlap_param_gather delay_wgrad_compute qk_layernorm
attention_softmax_in_fp32 accumulate_allreduce_grads_in_fp32 distributed_backend use_cpu_initialization
empty_unused_memory_level check_for_nan_in_loss_and_grad check_for_spiky_loss check_for_large_grads
cross_entropy_fusion_impl deterministic_mode use_te_rng_tracker enable_experimental kitchen_config_file
kitchen_recipe_number local_rank align_grad_reduce align_param_gather ddp_bucket_size ddp_average_in_collective
overlap_param_gather_with_optimizer_step gradient_accumulation_fusion use_legacy_models spec log_interval profile
profile_ranks profile_step_start profile_step_end tensorboard_dir use_pytorch_profiler record_memory_history
memory_snapshot_path result_rejected_tracker_filename dataloader_type iterations_to_skip train_sync_interval
check_weight_hash_across_dp_replicas_interval dump_param_to_param_group_map no_check_for_nan_in_loss_and_grad
no_manual_gc_eval tp_comm_bootstrap_backend nccl_communicator_config_path distributed_timeout_seconds_after_init
lazy_mpu_init disable_gloo_process_groups high_priority_stream_groups hysteresis initial_loss_scale loss_scale
loss_scale_window min_loss_scale apply_query_key_layer_scaling rope_type mscale mscale_all_dim rotary_scaling_factor
te_rng_tracker inference_rng_tracker moe_per_layer_logging moe_router_force_load_balancing moe_router_fusion
moe_deepep_num_sms disable_symmetric_registration openai_gelu onnx_safe squared_relu
use_te_activation_func no_async_tensor_model_parallel_allreduce no_clone_scatter_output_in_embedding no_pin_cpu_grads
no_pin_cpu_params model_parallel_size ddp_num_buckets ddp_pad_buckets_for_high_nccl_busbw
suggested_communication_unit_size no_gradient_reduce_div_fusion use_tp_pp_dp_mapping yaml_cfg no_rope_fusion
optimizer
config_logger_dir cuda_graph_warmup_steps embedding_init_method_std flash_decode mlp_chunks_for_prefill
nccl_all_reduce_for_prefill no_initialization qk_l2_norm symmetric_ar_type
""".split())
"""Known flags outside the quiet groups that planner's model does not price either way (the last
line: TransformerConfig fields a quiet group used to add, which ArgumentGroupFactory now adds in
_add_network_size_args)."""



# ----------------------------------------------------------------------------------- releases
# A plan priced with --framework R (a Megatron-Core release) is written for R's arguments.py, not
# MEGATRON_COMMIT's: R's flag list (megatron_arguments_<tag>.txt, benchmarks/megatron_arguments.py
# --release), R's spellings where they differ (``ReleaseArguments.rows``, replacing TABLE's rows of
# their options), and a refusal naming the flag R lacks for every other row (``release_table``).


def _args_at(tag: str) -> str:
    return f"Megatron-LM megatron/training/arguments.py@{tag}"


def _te_attention(tag: str) -> tuple:
    """Before --attention-backend (Megatron-LM r0.10), TransformerEngine picks the attention kernel
    at run time among those its environment leaves on: NVTE_FLASH_ATTN=0 leaves cuDNN's fused
    attention (flash3 here), NVTE_FLASH_ATTN=0 NVTE_FUSED_ATTN=0 the unfused one
    (TransformerEngine transformer_engine/pytorch/attention.py v1.8/v1.9: _NVTE_FLASH_ATTN,
    _NVTE_FUSED_ATTN, default 1). Upper-case keys are environment variables (export/megatron.py)."""
    te = "TransformerEngine transformer_engine/pytorch/attention.py (NVTE_FLASH_ATTN, NVTE_FUSED_ATTN)"
    return (Row("attention", "flash", (), default=True, source=_args_at(tag) + " (no --attention-backend); " + te),
            Row("attention", "flash3", (("NVTE_FLASH_ATTN", "0"),), source=te),
            Row("attention", "unfused", (("NVTE_FLASH_ATTN", "0"), ("NVTE_FUSED_ATTN", "0")), source=te))


def _custom_fsdp(tag: str) -> tuple:
    """Megatron-FSDP before Megatron-LM renamed it: --use-custom-fsdp, which validate_args runs with
    the distributed optimizer and without gradient accumulation fusion (arguments.py@core_v0.13.0
    'if args.use_custom_fsdp'); --ckpt-format left at its default (torch_dist: that release has no
    fsdp_dtensor)."""
    src = _args_at(tag) + " --use-custom-fsdp (validate_args)"
    also = (("use_distributed_optimizer", True), ("no_gradient_accumulation_fusion", True))
    return (Row("zero", 0, (), default=True, source=_DDP),
            Row("zero", 1, (("use_distributed_optimizer", True),), source=_args_at(tag)),
            Row("zero", 2, (("use_custom_fsdp", True), ("data_parallel_sharding_strategy", "optim_grads")),
                also=also, source=src),
            Row("zero", 3, (("use_custom_fsdp", True), ("data_parallel_sharding_strategy", "optim_grads_params")),
                also=also, when=_zero3("megatron"), source=src),
            Row("zero", 3, (("use_torch_fsdp2", True),), also=(("no_gradient_accumulation_fusion", True),),
                when=_zero3("fsdp2"), source=_args_at(tag) + " --use-torch-fsdp2"),
            Row("fsdp", "megatron", (("use_custom_fsdp", True),), source=src, when=lambda plan: plan.zero == 3),
            # Megatron-FSDP of this release, which validate_args runs without the fusion at optim_grads /
            # optim_grads_params, copies each micro-batch's gradient as main's (read back from these keys).
            *(Row("grad_accum_pass", "main_grad_copy", (("use_custom_fsdp", True),
                                                        ("data_parallel_sharding_strategy", strategy)),
                  write=False, source=src + "; " + _MFSDP_GRAD_ACC) for strategy in ("optim_grads", "optim_grads_params")))


def _flex_deepep(tag: str) -> Row:
    """DeepEP before the flex dispatcher's backends: --moe-token-dispatcher-type flex with
    --moe-enable-deepep (arguments.py@core_v0.13.0 _add_moe_args: 'Only works with flex token dispatcher')."""
    return Row("moe_dispatcher", "deepep", (("moe_token_dispatcher_type", "flex"), ("moe_enable_deepep", True)),
               source=_args_at(tag) + " --moe-enable-deepep")


@dataclass(frozen=True)
class ReleaseArguments:
    """One Megatron-Core release's arguments.py, as the export writes for it."""

    tag: str
    """The Megatron-LM tag (megatron_arguments_<tag>.txt)."""
    commit: str
    rows: tuple = ()
    """The release's spellings: rows replacing TABLE's rows that write the same option value."""
    notes: tuple = ()
    """Lines the exported file states about this release's spellings."""


CORE_R08 = "core_r0.8.0"
CORE_V012 = "core_v0.12.0"
CORE_V013 = "core_v0.13.0"

RELEASE_ARGUMENTS: dict[str, ReleaseArguments] = {
    CORE_R08: ReleaseArguments(CORE_R08, "baf94af3c667248865f23df73b9fb8e2395e6fd0", rows=(
        *_te_attention(CORE_R08),
        # No --fp8-recipe: delayed scaling (amax history) is the one recipe (TransformerEngine's default).
        Row("fp8_recipe", "delayed", (), also=(("fp8_amax_history_len", 1024), ("fp8_amax_compute_algo", "max")),
            when=_fp8, source=_args_at(CORE_R08) + " (no --fp8-recipe: delayed scaling)"),
        Row("fp8_recipe", "current", (("fp8_recipe", "tensorwise"),), when=_fp8, source=ARGS),
        Row("fp8_recipe", "blockwise", (("fp8_recipe", "blockwise"),), when=_fp8, source=ARGS),
        Row("fp8_recipe", "mxfp8", (("fp8_recipe", "mxfp8"),), when=_fp8, source=ARGS),
        Row("fp8_recipe", "nvfp4", (("fp4_recipe", "nvfp4"),), when=_fp8, source=ARGS),
        *(Row("fp8_recipe", r, (), when=lambda plan: not _fp8(plan), source="moot without --precision fp8")
          for r in FP8_RECIPES),
        # No --expert-tensor-parallel-size: experts split over the TP group (etp = tp).
        Row("etp", NUMBER, (), when=lambda plan: not plan.is_moe or plan.etp == plan.tp,
            source=_args_at(CORE_R08) + " (experts split over tensor parallelism: etp = tp)"),
        Row("etp", NUMBER, (("expert_tensor_parallel_size", 0),), source=ARGS),
        # Interleaving by layers per virtual stage (export/megatron.py writes it from the split).
        Row("vpp", NUMBER, (), source=_args_at(CORE_R08) + " --num-layers-per-virtual-pipeline-stage"),
        Row("dp_shard", NUMBER, (), when=lambda plan: plan.shard_replicas <= 1, source=_DDP),
        Row("dp_shard", NUMBER, (("num_distributed_optimizer_instances", 0),), source=_DDP),
        # --moe-grouped-gemm: TEGroupedMLP with TransformerEngine >= 1.9, else GroupedMLP (the
        # grouped_gemm CUTLASS kernel, one launch: fused); NeMo 24.07 ran TE 1.8.0.dev0 (NeMo r2.0.0rc1
        # Dockerfile.ci TE_TAG 7d576ed252). Without the flag: SequentialMLP (the per-expert loop).
        Row("moe_grouped_gemm", "fused", (("moe_grouped_gemm", True),),
            source="Megatron-LM megatron/core/transformer/moe/moe_layer.py@core_r0.8.0 (GroupedMLP unless "
                   "TEColumnParallelGroupedLinear, TE >= 1.9.0.dev0: custom_layers/transformer_engine.py)"),
        Row("moe_grouped_gemm", "loop", (), default=True, source=_args_at(CORE_R08) + " (SequentialMLP)"),
    ), notes=(
        "Megatron-Core r0.8: --moe-grouped-gemm runs GroupedMLP (fused) with TransformerEngine before 1.9 "
        "(NeMo 24.07's TE 1.8), TEGroupedMLP with a newer TE.",
    )),
    CORE_V012: ReleaseArguments(CORE_V012, "d580efc68a9f0dbf1945f834f6f6200cd01d3343", rows=(
        *_custom_fsdp(CORE_V012), _flex_deepep(CORE_V012),
        Row("cuda_graphs", True, (("enable_cuda_graph", True),), source=_args_at(CORE_V012) + " --enable-cuda-graph"),
    )),
    CORE_V013: ReleaseArguments(CORE_V013, "c550cf6c41c31cd3ec72e05c25ea0c979f2b6631", rows=(
        *_custom_fsdp(CORE_V013), _flex_deepep(CORE_V013),
        Row("cuda_graphs", True, (("enable_cuda_graph", True),), source=_args_at(CORE_V013) + " --enable-cuda-graph"),
    )),
}
"""The Megatron-Core releases ``--framework`` names (``planner.frameworks.releases``), by tag."""


def _release_spellings() -> tuple:
    """The releases' rows that spell a setting with keys main's TABLE has no row for (r0.12 / r0.13's
    --use-custom-fsdp, --moe-enable-deepep, --enable-cuda-graph), read-only: a file written for a
    release reads back as the same layout. Rows whose keys main reads otherwise stay out (r0.8's
    --moe-grouped-gemm is GroupedMLP there, TransformerEngine's grouped linear in main)."""
    mine = TABLE.keys()
    out, seen = [], set()
    for spec in RELEASE_ARGUMENTS.values():
        for row in spec.rows:
            keys = tuple(k for k, _ in row.sets)
            if keys and not set(keys) <= mine and (row.option, row.value, row.sets) not in seen:
                seen.add((row.option, row.value, row.sets))
                out.append(replace(row, write=False, when=None))
    return tuple(out)


READ_TABLE = Table("megatron", TABLE.rows + _release_spellings(), TABLE.refusals, source=TABLE.source,
                   releases=TABLE.releases, elsewhere=TABLE.elsewhere)
"""What ``planner.launch.mcore`` reads through: TABLE and the releases' own spellings (read-only)."""

MAPPED = MAPPED | (READ_TABLE.keys() - TABLE.keys())


@lru_cache(maxsize=None)
def release_flags(tag: str) -> tuple[frozenset, dict]:
    """(flags, flag -> choices) of Megatron-LM's arguments.py at ``tag`` (megatron_arguments_<tag>.txt)."""
    known, choices = set(), {}
    path = Path(__file__).with_name(f"megatron_arguments_{tag}.txt")
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("--"):
            name, _kind, _group, *rest = line.split()
            known.add(name)
            for word in rest:
                if word.startswith("choices="):
                    choices[name] = tuple(word[len("choices="):].split(","))
    return frozenset(known), choices


def is_env(key: str) -> bool:
    """An environment variable among a row's keys (upper case), not an argparse dest."""
    return key.isupper()


def lacks(tag: str, key: str, value, carried: bool = False) -> str:
    """Why release ``tag`` cannot take setting ``key`` = ``value`` ("" : it can); ``carried``: the
    value is the plan's number (no choice to check)."""
    if is_env(key):
        return ""
    known, choices = release_flags(tag)
    name = flag(key)
    if name not in known:
        return f"{name}, which Megatron-LM {tag} does not have"
    if not carried and value is not True and name in choices and str(value) not in choices[name]:
        return f"{name} {value}, which Megatron-LM {tag} does not offer ({', '.join(choices[name])})"
    return ""


@dataclass(frozen=True)
class ReleaseTable(Table):
    """TABLE as one release writes it: its own rows for the options it spells differently, and a
    ``megatron_release_<option>`` refusal for a row whose flag (or value) the release lacks."""

    tag: str = ""

    def write(self, option: str, value, plan=None):
        settings = Table.write(self, option, value, plan)
        if value is None:
            return settings
        for row in self.rows_for(option):  # the row Table.write took (same order and tests)
            if not row.write or (row.when is not None and plan is not None and not row.when(plan)):
                continue
            number = row.value == NUMBER and not isinstance(value, bool) and isinstance(value, (int, float))
            if number or row.value == value:
                break
        else:
            return settings
        missing = [why for key, v in row.sets + row.also
                   if (why := lacks(self.tag, key, v, carried=number and (key, v) in row.sets))]
        if missing and number and not value:
            return []  # a zero count (no layers offloaded): nothing to write
        if missing:
            raise CannotExpress(f"megatron_release_{option}", f"{option} {value} needs {missing[0]}: price "
                                "another value for this release, or export without --framework (Megatron-LM "
                                f"{MEGATRON_COMMIT[:12]})", _args_at(self.tag))
        return settings


@lru_cache(maxsize=None)
def release_table(tag: str) -> Table:
    """TABLE as Megatron-LM release ``tag`` writes it (TABLE when ``tag`` is ""): ``ReleaseArguments.rows``
    come first among their option's rows and replace TABLE's rows that write the same value (TABLE's
    rows that write nothing, the defaults and moot values, stay)."""
    if not tag:
        return TABLE
    spec = RELEASE_ARGUMENTS[tag]
    own = {(r.option, r.value) for r in spec.rows}
    rows, placed = [], set()
    for row in TABLE.rows:
        if row.option in {o for o, _ in own} and row.option not in placed:
            rows += [r for r in spec.rows if r.option == row.option]  # first: they win
            placed.add(row.option)
        if not (row.sets and (row.option, row.value) in own):  # TABLE's spelling of a value the release respells
            rows.append(row)
    return ReleaseTable("megatron", tuple(rows), TABLE.refusals, source=_args_at(tag),
                        releases=f"Megatron-LM {tag} (megatron_arguments_{tag}.txt)", elsewhere=TABLE.elsewhere,
                        tag=tag)
