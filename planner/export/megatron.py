"""Megatron-LM arguments for ``pretrain_gpt.py`` (``megatron_args.sh``), shared by the torchrun
and SLURM launchers.

Layout settings are written through the Megatron table (``planner.frameworks.megatron.TABLE``), the
one the reader reads them back with; every flag is one of ``megatron_arguments.txt`` (Megatron-LM
``megatron/training/arguments.py`` at ``MEGATRON_COMMIT``); every refusal names the Megatron rule
and the file that enforces it.
"""

from __future__ import annotations

from planner.export.common import (
    CannotExpress, Plan, bash_array, comment_block, partial_recompute_per_chunk, q, selective_modules, sanitize,
)
from planner.export.registry import EXECUTABLE, Exporter, one_file
from planner.frameworks.megatron import ARGS_PY as _ARGS_PY
from planner.frameworks.megatron import (
    CORE_R08, CORE_V012, CORE_V013, MEGATRON_COMMIT, RELEASE_ARGUMENTS, TABLE, flag, flag_choices, is_env,
    known_flags, lacks, release_table, removed_flags, words,
)

FILE_NAME = "megatron_args.sh"
MEGATRON_LM_FORMATS = ("megatron", "torchrun", "slurm")
"""The formats that write Megatron-LM flags (``validate_flags``), for a release its arguments.py's."""
Args = list[tuple[str, list]]
"""(flag, values) pairs."""
_TCFG = "Megatron-LM megatron/core/transformer/transformer_config.py (uneven pipeline checks)"
_SCHED = "Megatron-LM megatron/core/pipeline_parallel/schedules.py (interleaved 1F1B)"
_ATTN = "Megatron-LM megatron/core/transformer/attention.py (divide(num_query_groups, TP))"
_TCFG_OFFLOAD = "Megatron-LM megatron/core/transformer/transformer_config.py __post_init__ (cpu_offloading)"
_FSDP = "Megatron-FSDP supports TP/EP/CP but not PP (Megatron-LM docs; issue NVIDIA/Megatron-LM#1455)"

def megatron_release(plan: Plan) -> str:
    """The Megatron-LM tag the files target: the ``--framework`` release's (``Plan.options``
    ``megatron_release``, set from the record), "" for Megatron-LM ``MEGATRON_COMMIT``."""
    return str(plan.options.get("megatron_release") or "")


def _flags(settings) -> Args:
    """(flag, values) of table settings, environment variables left out (``env_lines`` writes them)."""
    return words([(k, v) for k, v in settings if not is_env(k)])


def megatron_flags() -> frozenset[str]:
    """Every flag of Megatron-LM's arguments.py at ``MEGATRON_COMMIT`` (``megatron_arguments.txt``,
    less the flags marked removed: an older commit's, which the export never writes)."""
    return frozenset(known_flags()) - removed_flags()


# ----------------------------------------------------------------------------------- checks


def check_megatron(plan: Plan) -> None:
    """Raise ``CannotExpress`` for a layout Megatron-LM would reject or run differently."""
    m = plan.model
    tp, pp = plan.tp, plan.pp
    if m.position_embedding == "alibi":
        raise CannotExpress("megatron_position_embedding", f"model {m.name} uses ALiBi; Megatron's "
                            "--position-embedding-type offers learned_absolute, rope, mrope, relative, none", _ARGS_PY)
    if m.position_embedding == "learned" and plan.seq_len > m.max_position_embeddings:
        raise CannotExpress("megatron_learned_positions", f"seq_len={plan.seq_len} exceeds the learned position table "
                            f"({m.max_position_embeddings}); validate_args requires --max-position-embeddings >= --seq-length", _ARGS_PY)
    if m.num_attention_heads % tp:
        raise CannotExpress("megatron_heads_divisible_by_tp", f"tp={tp} does not divide {m.num_attention_heads} attention heads", _ATTN)
    if m.mla is None and m.kv_heads % tp:
        raise CannotExpress("megatron_query_groups_divisible_by_tp", f"tp={tp} does not divide num_query_groups={m.kv_heads}; "
                            "Megatron splits KV heads over TP and cannot replicate them", _ATTN)
    ffn_sizes = [("ffn_hidden_size", m.ffn_hidden_size, tp)]
    if m.moe is not None:
        ffn_sizes.append(("moe_ffn_hidden_size", m.moe.expert_ffn_hidden_size, plan.etp))
        if m.moe.num_shared_experts:
            shared = m.moe.num_shared_experts * (m.moe.shared_expert_ffn_hidden_size or m.moe.expert_ffn_hidden_size)
            ffn_sizes.append(("moe_shared_expert_intermediate_size", shared, tp))
    for name, size, split in ffn_sizes:
        if size % split:
            raise CannotExpress("megatron_ffn_divisible", f"{name}={size} is not divisible by its tensor-parallel size {split}",
                                "Megatron-LM megatron/core/tensor_parallel/layers.py (column/row-parallel split)")
    # ep_divides_experts, ep_divides_dp_cp, cp_divides_seq and vpp_divides_stage_layers are rules of
    # search.rules, which build_plan has checked: not repeated here.
    # An MoE model under TP without sequence parallelism is search.rules' moe_tp_needs_sequence_parallel.
    if m.moe is not None:
        if (m.linear_bias) and plan.etp > 1:
            raise CannotExpress("megatron_moe_bias_etp", f"MoE with linear biases requires etp=1 (got etp={plan.etp})", _TCFG)
    if plan.zero >= 2 and pp > 1:
        raise CannotExpress("megatron_fsdp_no_pp", f"zero={plan.zero} maps to Megatron-FSDP, which does not run with pp={pp}", _FSDP)
    TABLE.write("fsdp", plan.fsdp, plan)  # the ZeRO-3 flavour's refusal before the zero rows' generic one
    if plan.zero == 3 and plan.fsdp == "fsdp2" and (plan.ep > 1 or plan.shard_replicas > 1):
        raise CannotExpress("megatron_fsdp2_ep_hsdp", f"fsdp2 with ep={plan.ep}, dp_shard={plan.dp_shard}: validate_args "
                            "runs --use-torch-fsdp2 without expert parallelism and without the distributed optimizer "
                            "(whose instances shard hybrid): price with --fsdp megatron", _ARGS_PY)
    _check_offload_graphs(plan)
    _check_release_rules(plan)
    TABLE.check(plan)  # a value Megatron cannot run (the table's refusals)
    _check_pipeline(plan)


def check_gpt_entrypoint(plan: Plan) -> None:
    """The Megatron-LM launchers run pretrain_gpt.py, whose model is a stack of transformer (GPT) layers."""
    m = plan.model
    if m.hybrid_pattern:
        raise CannotExpress("megatron_lm_hybrid_model", f"model {m.name} is a hybrid Mamba model (layer pattern "
                            f"{m.hybrid_pattern[:24]}{'...' if len(m.hybrid_pattern) > 24 else ''}); these files describe "
                            "transformer layers for pretrain_gpt.py, and Megatron-LM trains hybrids with pretrain_mamba.py "
                            "(--hybrid-override-pattern, --mamba-*), which this export does not write: use --format "
                            "megatron-bridge over the model's recipe", _ARGS_PY + " (--hybrid-override-pattern); "
                            "Megatron-LM pretrain_mamba.py")


def _check_release_rules(plan: Plan) -> None:
    """What a --framework release's Megatron-Core refuses that main (the table's target) runs."""
    release = megatron_release(plan)
    at = f"Megatron-LM megatron/core/transformer/transformer_config.py@{release}"
    if release in (CORE_V012, CORE_V013) and plan.cuda_graphs and plan.recompute != "none":
        raise CannotExpress("megatron_release_cuda_graphs_recompute", f"cuda_graphs with recompute {plan.recompute}: "
                            f"{release} raises 'CUDA graphs not supported with activation recomputation'", at)
    if release in (CORE_V012, CORE_V013) and plan.model.mtp_layers and plan.cp > 1:
        raise CannotExpress("megatron_release_mtp_cp", f"multi-token prediction with cp={plan.cp}: {release} "
                            "asserts 'Multi-Token Prediction (MTP) is not supported with Context Parallelism'",
                            f"Megatron-LM megatron/training/arguments.py@{release}")
    if release == CORE_V012 and plan.precision == "fp8" and plan.fp8_recipe == "mxfp8" and plan.fp8_param_gather:
        raise CannotExpress("megatron_release_mxfp8_fp8_params", f"{release} raises 'MXFP8 currently does not "
                            "support fp8_param': price with --no-fp8-param-gather", at)
    if release == CORE_R08 and plan.is_moe and plan.dp % plan.ep:  # dp: data-parallel ranks without CP
        raise CannotExpress("megatron_release_ep_divides_dp", f"ep={plan.ep} does not divide dp={plan.dp} "
                            f"(data-parallel ranks without CP): {release}'s parallel_state.py raises before MoE "
                            "parallel folding (later releases fold EP over DP x CP)",
                            f"Megatron-LM megatron/core/parallel_state.py@{release}")


def _check_offload_graphs(plan: Plan) -> None:
    """CUDA graphs and CPU activation offload against recompute and each other, as Megatron refuses them."""
    if plan.cuda_graphs and plan.recompute == "full":
        raise CannotExpress("megatron_cuda_graphs_full_recompute", "cuda_graphs with recompute full: validate_args "
                            "asserts 'recompute_granularity must not be full when CUDA Graphs are enabled'", _ARGS_PY)
    if plan.cpu_offload_layers:
        if plan.recompute != "none":
            raise CannotExpress("megatron_cpu_offload_recompute", f"cpu_offload_layers={plan.cpu_offload_layers} with "
                                f"recompute {plan.recompute}: TransformerConfig raises 'CPU offloading does not work "
                                "when activation recomputation is enabled'", _TCFG_OFFLOAD)
        if plan.cuda_graphs:
            raise CannotExpress("megatron_cpu_offload_cuda_graphs", "cpu_offload_layers with cuda_graphs: "
                                "TransformerConfig raises 'CUDA graphs not supported with CPU offloading'", _TCFG_OFFLOAD)


def _embedding_loss_split(plan: Plan) -> bool:
    """First and last stages one layer short of the middle ones, with (L + 2) divisible by
    pp * vpp: Megatron expresses this by counting the input embedding and the loss as one
    layer each (--account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split,
    _add_distributed_args in megatron/training/arguments.py)."""
    stages = plan.stage_layers
    if plan.pp < 3 or not plan.uneven:
        return False
    first, last, middle = stages[0], stages[-1], stages[1:-1]
    if len(set(middle)) != 1:
        return False
    return (first == last == middle[0] - 1
            and (plan.model.num_layers + 2) % (plan.pp * plan.vpp) == 0)


def _check_pipeline(plan: Plan) -> None:
    L, pp, vpp = plan.model.num_layers, plan.pp, plan.vpp
    if pp == 1:
        return
    stages = plan.stage_layers
    if not plan.uneven:
        if L % pp:
            raise CannotExpress("megatron_pp_divides_layers", f"{L} layers do not split evenly over pp={pp}", _ARGS_PY)
    else:
        first, last = stages[0], stages[-1]
        middle = stages[1:-1]
        if len(set(middle)) > 1:
            raise CannotExpress("megatron_uneven_middle", f"middle stages hold different layer counts {middle}; "
                                "Megatron splits what first/last leave evenly", _TCFG)
        if vpp > 1 and _embedding_loss_split(plan):
            return
        if vpp > 1:
            for name, count in (("first", first), ("last", last)) + ((("middle", middle[0]),) if middle else ()):
                if count % vpp:
                    raise CannotExpress("megatron_uneven_vpp", f"{name} stage holds {count} layers, not divisible by vpp={vpp}", _TCFG)
    if vpp > 1:
        m = plan.grad_accum
        if m < pp or m % pp:
            raise CannotExpress("megatron_interleaved_microbatches", f"{m} micro-batches per step is not a positive multiple "
                                f"of pp={pp}, as the interleaved schedule requires with the default "
                                "--microbatch-group-size-per-virtual-pipeline-stage (= pp)", _SCHED)


# ----------------------------------------------------------------------------------- args


def _vocab_divisor(vocab: int, tp: int) -> int:
    """Largest ``--make-vocab-size-divisible-by`` (<= Megatron's default 128) that leaves the
    model's vocabulary unpadded at this TP; 1 when TP does not divide it."""
    if vocab % tp:
        return 1
    per_rank = vocab // tp
    return max(d for d in range(1, 129) if per_rank % d == 0)


def _moe_pattern(model) -> str | None:
    moe = model.moe
    if moe.num_dense_layers == 0 and moe.moe_layer_frequency == 1:
        return None
    bits = [0] * moe.num_dense_layers
    bits += [1 if i % moe.moe_layer_frequency == 0 else 0 for i in range(model.num_layers - moe.num_dense_layers)]
    runs: list[list[int]] = []
    for b in bits:
        if runs and runs[-1][0] == b:
            runs[-1][1] += 1
        else:
            runs.append([b, 1])
    return "(" + "+".join(f"[{b}]*{n}" for b, n in runs) + ")"


def uses_fsdp(plan: Plan) -> bool:
    return plan.zero >= 2


def _attention_args(m) -> Args:
    """Attention shape: GQA / head size, or multi-latent attention."""
    if m.mla is None:
        args: Args = []
        if m.kv_heads != m.num_attention_heads:
            args += [("--group-query-attention", []), ("--num-query-groups", [m.kv_heads])]
        if m.head_dim is not None and m.head_dim * m.num_attention_heads != m.hidden_size:
            args.append(("--kv-channels", [m.head_dim]))
        return args
    args = [("--multi-latent-attention", [])]
    if m.mla.q_lora_rank is not None:
        args.append(("--q-lora-rank", [m.mla.q_lora_rank]))
    return args + [
        ("--kv-lora-rank", [m.mla.kv_lora_rank]),
        ("--qk-head-dim", [m.mla.qk_nope_head_dim]),
        ("--qk-pos-emb-head-dim", [m.mla.qk_rope_head_dim]),
        ("--v-head-dim", [m.mla.v_head_dim]),
    ]


def window_args(m) -> Args:
    """Sliding-window attention: ``--window-size w-1,0`` (TransformerEngine's (left, right) keys
    beside the query, so a ``w``-key window is ``w-1`` to the left; arguments.py tuple_type reads
    "127,0") and ``--window-attn-skip-freq N`` (layers N, 2N, ... full attention: transformer/utils.py
    is_layer_window_attention), as Megatron-Bridge models/gpt_oss/gpt_oss_bridge.py sets
    window_size=(sliding_window - 1, 0), window_attn_skip_freq=2. No window: neither flag."""
    if m.sliding_window is None:
        return []
    args: Args = [("--window-size", [f"{m.sliding_window - 1},0"])]
    if m.full_attention_every is not None:
        args.append(("--window-attn-skip-freq", [m.full_attention_every]))
    return args


def _model_args(plan: Plan) -> Args:
    """The model's shape, its layers' variants and the sequence."""
    m = plan.model
    args: Args = [
        ("--num-layers", [m.num_layers]),
        ("--hidden-size", [m.hidden_size]),
        ("--ffn-hidden-size", [m.ffn_hidden_size]),
        ("--num-attention-heads", [m.num_attention_heads]),
    ]
    args += _attention_args(m) + window_args(m)
    if m.mla is not None and megatron_release(plan) == CORE_V012:
        # transformer_config.py@core_v0.12.0 raises "multi_latent_attention does not support
        # apply_rope_fusion", which --no-rope-fusion turns off (on by default there).
        args.append(("--no-rope-fusion", []))
    if m.gated_mlp:
        args.append(("--swiglu", []))
    args.append(("--normalization", ["RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"]))
    pos = {"rope": "rope", "learned": "learned_absolute", "none": "none"}[m.position_embedding]
    args.append(("--position-embedding-type", [pos]))
    if not m.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", []))
    if not m.linear_bias:
        args.append(("--disable-bias-linear", []))
        if m.qkv_bias:
            args.append(("--add-qkv-bias", []))
    if not m.dropout:
        args += [("--attention-dropout", ["0.0"]), ("--hidden-dropout", ["0.0"])]
    if m.mtp_layers:  # multi-token prediction heads on the last stage, as priced (costmodel/mtp.py)
        args.append(("--mtp-num-layers", [m.mtp_layers]))
    max_pos = m.max_position_embeddings if m.position_embedding == "learned" else max(m.max_position_embeddings, plan.seq_len)
    return args + [
        ("--seq-length", [plan.seq_len]),
        ("--max-position-embeddings", [max_pos]),
        ("--make-vocab-size-divisible-by", [_vocab_divisor(m.vocab_size, plan.tp)]),
    ]


def _moe_args(plan: Plan, table=TABLE) -> Args:
    """Experts, router and token dispatcher (MoE models)."""
    moe = plan.model.moe
    args: Args = [
        ("--num-experts", [moe.num_experts]),
        ("--moe-router-topk", [moe.top_k]),
        ("--moe-ffn-hidden-size", [moe.expert_ffn_hidden_size]),
    ]
    if moe.num_shared_experts:
        size = moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size
        args.append(("--moe-shared-expert-intermediate-size", [moe.num_shared_experts * size]))
    pattern = _moe_pattern(plan.model)
    if pattern is not None:
        args.append(("--moe-layer-freq", [pattern]))
    if moe.top_k == 1:
        args.append(("--moe-router-pre-softmax", []))
    if moe.router_groups and moe.router_group_topk:
        args += [("--moe-router-num-groups", [moe.router_groups]),
                 ("--moe-router-group-topk", [moe.router_group_topk])]
    args += [
        ("--moe-router-load-balancing-type", ["aux_loss"]),
        ("--moe-aux-loss-coeff", ["1e-2"]),
    ]
    args += _flags(table.write("moe_dispatcher", plan.moe_dispatcher))
    return args + _flags(table.write("moe_grouped_gemm", plan.moe_grouped_gemm))


def _parallel_args(plan: Plan, table=TABLE) -> Args:
    """Degrees, sequence parallelism and the pipeline split."""
    args: Args = _flags(table.write("tp", plan.tp) + table.write("pp", plan.pp) + table.write("cp", plan.cp))
    if plan.is_moe:
        args += _flags(table.write("ep", plan.ep) + table.write("etp", plan.etp, plan))
    args += _flags(table.write("sequence_parallel", bool(plan.sp and plan.tp > 1)))
    if plan.pp > 1 and plan.uneven and plan.vpp > 1 and _embedding_loss_split(plan):
        args += [("--account-for-embedding-in-pipeline-split", []),
                 ("--account-for-loss-in-pipeline-split", [])]
    elif plan.pp == 2 and plan.uneven and megatron_release(plan) == CORE_V012:
        # Two stages: the first's count fixes the last's. transformer_config.py@core_v0.12.0 takes
        # a stage off the middle for each flag and divides by the none left (ZeroDivisionError).
        args += [("--decoder-first-pipeline-num-layers", [plan.first_layers])]
    elif plan.pp > 1 and plan.uneven:
        args += [("--decoder-first-pipeline-num-layers", [plan.first_layers]),
                 ("--decoder-last-pipeline-num-layers", [plan.last_layers])]
    if plan.vpp > 1:
        args += _flags(table.write("vpp", plan.vpp, plan))
        if table is not TABLE and "--num-virtual-stages-per-pipeline-rank" not in _release_flags(table):
            # Before r0.9 interleaving is stated as layers per virtual stage (arguments.py@core_r0.8.0
            # --num-layers-per-virtual-pipeline-stage); an even split here (uneven ones need flags r0.8 lacks).
            args.append(("--num-layers-per-virtual-pipeline-stage", [plan.stage_layers[0] // plan.vpp]))
    args += _flags(table.write("cp_comm_type", plan.cp_comm_type, plan))
    if plan.cp_comm_type == "a2a+p2p":  # all-to-all inside the scale-up domain, ring across (as priced)
        a2a, ring = hierarchical_cp_sizes(plan)
        args += [("--hierarchical-context-parallel-sizes", [a2a, ring])]
    return args


def hierarchical_cp_sizes(plan: Plan) -> tuple[int, int]:
    """(all-to-all ranks, ring ranks) of a2a+p2p context parallelism: the CP ranks of one scale-up
    domain all-to-all (costmodel.placement.cp_a2a_ranks), the ring spans cp over them; Megatron-LM
    --hierarchical-context-parallel-sizes takes them innermost first (their product is cp)."""
    from costmodel.options import CP_COMM_TYPES
    from costmodel.placement import cp_a2a_ranks

    a2a = int(cp_a2a_ranks(CP_COMM_TYPES.index("a2a+p2p"), plan.cp, plan.tp, plan.cluster.scaleup_domain_size))
    return a2a, plan.cp // a2a


def _data_parallel_args(plan: Plan, table=TABLE) -> Args:
    """ZeRO stage: distributed optimizer (1) or Megatron-FSDP (2, 3), and the DP overlaps."""
    args = _flags(table.write("zero", plan.zero, plan))
    if plan.shard_replicas > 1:  # the key carries the instance count, dp / dp_shard (the table's row)
        args += _flags(table.write("dp_shard", plan.shard_replicas, plan))
    return args + _flags(table.write("dp_comm_overlap", bool(plan.dp_comm_overlap), plan))


def _recompute_args(plan: Plan) -> Args:
    """Selective (with its modules), partial full (block method) or full recompute."""
    per_chunk = partial_recompute_per_chunk(plan)
    if plan.recompute == "selective":
        modules = selective_modules(plan)
        return [("--recompute-granularity", ["selective"])] + ([("--recompute-modules", list(modules))] if modules else [])
    if plan.recompute == "full" and per_chunk:
        # Partial recompute: the first N layers of every chunk (Megatron's block method).
        return [("--recompute-granularity", ["full"]), ("--recompute-method", ["block"]),
                ("--recompute-num-layers", [per_chunk])]
    if plan.recompute == "full":
        return [("--recompute-granularity", ["full"]), ("--recompute-method", ["uniform"]), ("--recompute-num-layers", [1])]
    return []


def _precision_args(plan: Plan, table=TABLE) -> Args:
    """--bf16 parameters, the gradient-reduction dtype and FP8 GEMMs, from the table."""
    return [("--bf16", [])] + _flags(table.write("grad_dtype", plan.grad_dtype) + table.write("precision", plan.precision, plan)
                                     + table.write("fp8_recipe", plan.fp8_recipe, plan))


_WRITTEN_IN_SECTIONS = frozenset({"tp", "pp", "cp", "ep", "etp", "sequence_parallel", "vpp", "zero", "dp_shard",
                                  "dp_comm_overlap", "grad_dtype", "precision", "moe_dispatcher",
                                  "moe_grouped_gemm", "cp_comm_type", "fp8_recipe", "fsdp"})
"""Table options the sections above write (with the model's shape or the batch); every other option
of the table is written by ``_overlap_args``, so a new Megatron setting is one row of the table."""


def _overlap_settings(plan: Plan, table=TABLE) -> list:
    """The (key, value) settings of every table option the other sections do not write."""
    settings = []
    for option in table.options:
        if option not in _WRITTEN_IN_SECTIONS:
            settings += table.write(option, getattr(plan, option), plan)
    return settings


def _overlap_args(plan: Plan, table=TABLE) -> Args:
    """The communication overlaps, fusions and kernels the plan was priced with: every table option
    the other sections do not write, in the table's order."""
    return _flags(_overlap_settings(plan, table))


def _run_args(plan: Plan) -> Args:
    """Placeholders: optimizer and run length are not part of the plan."""
    return [
        ("--train-iters", ["${TRAIN_ITERS}"]),
        ("--lr", ["1.0e-4"]), ("--min-lr", ["1.0e-5"]), ("--lr-decay-style", ["cosine"]),
        ("--weight-decay", ["0.1"]), ("--clip-grad", ["1.0"]), ("--adam-beta1", ["0.9"]), ("--adam-beta2", ["0.95"]),
        ("--log-interval", [1]), ("--eval-iters", [0]),
    ]


def megatron_sections(plan: Plan, release: str = "") -> list[tuple[str, Args]]:
    """(title, [(flag, values)]) groups of Megatron arguments for this plan, as Megatron-LM
    ``release`` spells them ("": ``MEGATRON_COMMIT``); empty groups are left out. ``check_megatron``
    must have passed (and ``check_release`` for a release)."""
    table = release_table(release)
    sections = [
        (f"Model shape ({plan.model.name})", _model_args(plan)),
        ("Mixture of experts", _moe_args(plan, table) if plan.is_moe else []),
        ("Parallel layout", _parallel_args(plan, table)),
        (f"Batch ({plan.grad_accum} micro-batches of {plan.mbs} per step on each of {plan.dp} data-parallel ranks)",
         [("--micro-batch-size", [plan.mbs]), ("--global-batch-size", [plan.gbs])]),
        (f"Data parallel: ZeRO-{plan.zero}", _data_parallel_args(plan, table)),
        (f"Activation recompute: {plan.recompute}", _recompute_args(plan)),
        (f"Precision: {plan.precision}", _precision_args(plan, table)),
        ("Overlap and fusion (as priced)", _overlap_args(plan, table)),
        ("PLACEHOLDER optimizer and run length (not part of the plan; edit freely)", _run_args(plan)),
    ]
    if release:
        sections = [(title, _as_release(plan, args, release)) for title, args in sections]
    return [(title, args) for title, args in sections if args]


def _release_flags(table) -> frozenset:
    from planner.frameworks.megatron import release_flags

    return release_flags(table.tag)[0]


_RELEASE_DEFAULTS = {
    "--moe-ffn-hidden-size": lambda plan, values: values == [plan.model.ffn_hidden_size],
    "--recompute-modules": lambda plan, values: [str(v) for v in values] == ["core_attn"],
}
"""Flags a release without them runs at the value written (core_r0.8.0: experts as wide as
--ffn-hidden-size, transformer_config.py moe_ffn_hidden_size = ffn_hidden_size; selective recompute
of core attention only, arguments.py --recompute-granularity 'selective: core attention'): left out there."""


def _as_release(plan: Plan, args: Args, release: str) -> Args:
    """``args`` as Megatron-LM ``release`` takes them: a flag it lacks left out where the release runs
    the value written anyway (``_RELEASE_DEFAULTS``), else refused (``megatron_release_<dest>``)."""
    out = []
    for name, values in args:
        why = next((w for v in values or [True] if (w := lacks(release, name[2:].replace("-", "_"), v,
                                                           carried=not isinstance(v, str)))), "")
        if not why:
            out.append((name, values))
        elif not (name in _RELEASE_DEFAULTS and _RELEASE_DEFAULTS[name](plan, list(values))):
            raise CannotExpress(f"megatron_release_{name[2:].replace('-', '_')}", f"this layout needs {why}: "
                                "price another layout for this release, or export without --framework "
                                f"(Megatron-LM {MEGATRON_COMMIT[:12]})", f"Megatron-LM megatron/training/arguments.py@{release}")
    return out


def emitted_flags(plan: Plan) -> list[str]:
    """Every Megatron flag the files for this plan contain (the data defaults included)."""
    flags = [flag for _, items in megatron_sections(plan, megatron_release(plan)) for flag, _ in items]
    return flags + [flag for flag, _ in default_data_args(plan)]


def default_data_args(plan: Plan) -> list[tuple[str, list]]:
    # NullTokenizer reports vocab_size + 1 (one EOD id), so ask for V - 1 to get V.
    return [("--mock-data", []), ("--tokenizer-type", ["NullTokenizer"]), ("--vocab-size", [plan.model.vocab_size - 1])]


def check_release(plan: Plan, release: str) -> None:
    """``CannotExpress`` (``megatron_release_*``) for a setting Megatron-LM ``release`` lacks: its
    table's rows and refusals, then every flag the sections write against its argument list."""
    release_table(release).check(plan)
    release_table(release).write("fsdp", plan.fsdp, plan)
    for _, items in megatron_sections(plan, release):
        for name, _ in items:
            if lacks(release, name[2:].replace("-", "_"), True):  # a programming error: _as_release filters
                raise RuntimeError(f"Megatron flag {name} not in megatron_arguments_{release}.txt")
    for name, values in default_data_args(plan):
        why = next((w for v in values or [True] if (w := lacks(release, name[2:].replace("-", "_"), v,
                                                           carried=not isinstance(v, str)))), "")
        if why:
            raise RuntimeError(f"data default {name} {values}: {why}")


def validate_flags(plan: Plan) -> None:
    release = megatron_release(plan)
    if release:  # the --framework release's arguments.py: checked flag by flag (values too)
        check_release(plan, release)
        return
    unknown = sorted(set(emitted_flags(plan)) - megatron_flags())
    newer = [(f, row) for f in unknown for row in TABLE.rows if row.write and row.releases
             and row.value == getattr(plan, row.option, None) and any(flag(d) == f for d, _ in row.sets)]
    if newer:  # a table row of another release than the arguments planner targets: refused, not written
        f, row = newer[0]
        gone = "no longer has" if f in removed_flags() else "does not have"
        raise CannotExpress(f"megatron_release_{row.option}", f"{row.option} {row.value} needs {f} ({row.releases}), "
                            f"which Megatron-LM {MEGATRON_COMMIT[:12]} (the release this export targets) {gone}: "
                            "use --format megatron-bridge, or price another value", row.source)
    if unknown:  # a programming error: every flag must be checked against arguments.py first
        raise RuntimeError(f"Megatron flags not in megatron_arguments.txt: {', '.join(unknown)}")
    choices = flag_choices()
    wrong = [f"{f} {v}" for _, items in megatron_sections(plan) for f, values in items
             for v in values if f in choices and str(v) not in choices[f]]
    if wrong:  # a programming error too: a value argparse would reject (the table needs a row or a refusal)
        raise RuntimeError(f"Megatron values outside their argparse choices: {', '.join(wrong)}")


def env_lines(plan: Plan) -> list[str]:
    """Shell lines that set the environment Megatron's validate_args checks (and the release's
    environment settings: TransformerEngine's attention kernel before --attention-backend)."""
    release = megatron_release(plan)
    env = [(k, v) for k, v in _overlap_settings(plan, release_table(release)) if is_env(k)] if release else []
    lines = [f"# Megatron-LM {release} has no --attention-backend: TransformerEngine picks the attention kernel "
             "among those left on.", "export " + " ".join(f"{k}={v}" for k, v in env)] if env else []
    return lines + _device_connections(plan)


def _device_connections(plan: Plan) -> list[str]:
    if uses_fsdp(plan):
        return [
            "# Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1 (validate_args); leave it unset.",
            "unset CUDA_DEVICE_MAX_CONNECTIONS",
        ]
    if plan.tp > 1 or plan.cp > 1:
        return [
            "# validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or CP > 1 (before Blackwell).",
            "export CUDA_DEVICE_MAX_CONNECTIONS=1",
        ]
    if megatron_release(plan) == CORE_R08:
        # arguments.py@core_r0.8.0 validate_args raises unless it is 1 whenever
        # async_tensor_model_parallel_allreduce is on, its default without sequence parallelism,
        # whatever the TP size.
        return [
            "# Megatron-LM core_r0.8.0 validate_args requires CUDA_DEVICE_MAX_CONNECTIONS=1 with the async "
            "TP all-reduce (on by default), even at TP 1.",
            "export CUDA_DEVICE_MAX_CONNECTIONS=1",
        ]
    return []


def notes(plan: Plan) -> list[str]:
    m = plan.model
    release = megatron_release(plan)
    out = [
        "Flags checked against " + _ARGS_PY + " (see planner/frameworks/megatron_arguments.txt)." if not release else
        f"Flags checked against Megatron-LM megatron/training/arguments.py@{release} (the --framework release; see "
        f"planner/frameworks/megatron_arguments_{release}.txt).",
        *(RELEASE_ARGUMENTS[release].notes if release and plan.is_moe else ()),
        "Model details the planner does not track (rotary base and scaling, norm epsilon, init std) are left at",
        "Megatron defaults: add them for checkpoint-exact numerics; they do not change the layout's cost.",
    ]
    if plan.tp > 1 and not plan.tp_comm_overlap:
        out.append("TP communication overlap (--tp-comm-overlap) stays off, as priced: plan with --tp-comm-overlap to use it.")
    if m.vocab_size % plan.tp:
        out.append(f"Vocabulary {m.vocab_size} is not divisible by TP={plan.tp}: Megatron pads it to a multiple of {plan.tp}.")
    if m.moe is not None:
        dispatcher = {"deepep": "the flex dispatcher with DeepEP", "allgather": "the allgather dispatcher",
                      "hybridep": "the flex dispatcher with HybridEP"}.get(plan.moe_dispatcher, "the all-to-all dispatcher")
        out.append(f"Router: aux-loss load balancing (coeff 1e-2) and {dispatcher}; adjust to your recipe.")
    if m.mla is not None:
        out.append("MLA: Megatron defaults rope_type to yarn for MLA; DeepSeek checkpoints also use --qk-layernorm.")
    if m.glu_clamp is not None:
        # transformer_config.py activation_func_clamp_value has no flag in arguments.py: the run skips
        # the clamp whose unfused kernels costmodel.moe.expert_epilogues prices.
        out.append(f"GLU clamp {m.glu_clamp:g} (TransformerConfig.activation_func_clamp_value) has no Megatron-LM flag: "
                   "this run does not clamp, and runs a little faster than priced (the clamp's eager kernels).")
    return out


def data_block(plan: Plan, array: str = "DATA_ARGS_ARRAY") -> str:
    default = " ".join(q(x) for flag, values in default_data_args(plan) for x in [flag, *values])
    return (
        "# ---- PLACEHOLDER: data and tokenizer (not part of the plan) ----------------------------\n"
        "# As written the job trains on Megatron's --mock-data with a NullTokenizer sized to the model's\n"
        f"# vocabulary ({plan.model.vocab_size}), so it starts without edits. For real data set DATA_ARGS, e.g.\n"
        "#   DATA_ARGS='--data-path /data/corpus_text_document --tokenizer-type HuggingFaceTokenizer --tokenizer-model /models/tok'\n"
        'TRAIN_ITERS="${TRAIN_ITERS:-100}"\n'
        'if [[ -n "${DATA_ARGS:-}" ]]; then\n'
        f'  read -r -a {array} <<< "${{DATA_ARGS}}"\n'
        "else\n"
        f"  {array}=({default})\n"
        "fi\n"
    )


def args_block(plan: Plan, array: str = "MEGATRON_ARGS") -> str:
    """Bash that defines ``array`` with every Megatron argument (data placeholders included)."""
    parts = [data_block(plan), "\n", f"{array}=()\n"]
    for title, items in megatron_sections(plan, megatron_release(plan)):
        parts.append(f"# {sanitize(title)}\n")
        rendered = bash_array(f"{array}+", items)
        # ${TRAIN_ITERS} must expand at run time: it is ours, not user input, so leave it unquoted-safe.
        rendered = rendered.replace(q("${TRAIN_ITERS}"), '"${TRAIN_ITERS}"')
        parts.append(rendered)
    parts.append(f'{array}+=("${{DATA_ARGS_ARRAY[@]}}")\n')
    return "".join(parts)


def render(plan: Plan) -> str:
    """``megatron_args.sh``: source it to get ``MEGATRON_ARGS``; run it to print them."""
    check_megatron(plan)
    check_gpt_entrypoint(plan)
    validate_flags(plan)
    head = comment_block(list(plan.header) + [""] + notes(plan) + [
        "",
        "Source this file from a launcher (it defines the bash array MEGATRON_ARGS), e.g.",
        "  source megatron_args.sh && torchrun ... pretrain_gpt.py \"${MEGATRON_ARGS[@]}\"",
        "Running it directly prints the arguments, one per line.",
    ])
    env = "\n".join(env_lines(plan))
    return (
        "#!/usr/bin/env bash\n"
        + head
        + "\n"
        + (env + "\n\n" if env else "")
        + args_block(plan)
        + "\n"
        + 'if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then\n'
        + '  printf \'%s\\n\' "${MEGATRON_ARGS[@]}"\n'
        + "fi\n"
    )


EXPORTER = Exporter(
    name="megatron",
    files={FILE_NAME: EXECUTABLE},
    render=one_file(FILE_NAME, lambda plan, entrypoint: render(plan)),
    table=TABLE,
    description="MEGATRON_ARGS bash array for pretrain_gpt.py",
)
