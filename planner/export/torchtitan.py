"""torchtitan launch files, each for a named torchtitan release.

* ``torchtitan_overrides.sh``: the command line of torchtitan 0.3.x (checked against 0.3.0):
  ``torchrun ... -m torchtitan.train --module llama3 --config <fn> <overrides> activation_checkpoint:<mode>``.
  Source it for the arrays, or run it on every node to launch.
* ``torchtitan.toml``: the same layout as a job config for the releases that read
  ``--job.config_file``: 0.2.x (default 0.2.2, the last one) or 0.1.x. 0.3.x reads no TOML.

``--torchtitan-version`` (``export_layout(options={"torchtitan_version": ...})``) picks the release both
files target: 0.1 / 0.2 / 0.3 or an exact release (``RELEASES``). Without it the overrides target 0.3.0
and the TOML 0.2.2. A file the chosen release cannot read is left out with its reason (0.3: no TOML;
0.1, 0.2: no --module/--config command line).

Every setting is checked against the release's list, ``torchtitan_fields_<0.1|0.2|0.3>.txt``, extracted
from that release's config dataclasses. A setting whose field a release lacks is refused (rule
torchtitan_release_field), never dropped. Decisions torchtitan forces:

* torchtitan builds its own model from a registered flavor; the export refuses a model whose
  shape matches no checked flavor: llama3 8B / 70B / 405B, and the MoE flavors of
  ``MOE_FLAVORS`` (qwen3 30B-A3B / 235B-A22B and deepseek_v3 671B from 0.2.0, gpt_oss 20b / 120b
  from 0.2.2; a preset with MTP layers is refused, torchtitan trains none). In 0.3.0 the config
  function also fixes the precision (llama3_8b, llama3_70b: bf16; llama3_405b: float8 + compile),
  so the overrides are refused where no config function has the plan's precision, and for MoE.
* MoE (TOML): ``expert_parallel_degree`` = ep and ``expert_tensor_parallel_degree`` = etp (1 or
  tp; without EP torchtitan shards the experts over TP, so etp = tp); EP borrows the FSDP shard x
  cp (x tp at etp 1) ranks (parallel_dims.py). Refused: pp > 1 where the flavor has no
  pipelining_fn (qwen3, gpt_oss), cp > 1 under FlexAttention (deepseek_v3, gpt_oss), tensorwise
  float8 (the experts' grouped GEMMs stay BF16).
* MXFP8 (``--fp8-recipe mxfp8``, Blackwell): the 0.2.x MX converters (``quantize.linear.mx``,
  recipe mxfp8_cublas; ``quantize.grouped_mm.mx`` on the experts), tp 1 only.
* What torchtitan always runs (loss eager, SDPA attention, FP32 gradient reduction, FSDP2 overlap,
  async TP as its TP overlap, no ZeRO-1, per-op SAC) is the table's (``planner.frameworks.torchtitan``):
  a plan priced otherwise is refused with the reason, never written as something else.
* ZeRO: zero 3 -> FSDP2 with ``fsdp_reshard_after_forward=always``; zero 2 -> ``never`` (weights stay
  gathered from forward to backward); zero 0 -> replication: 0.3.0 applies FSDP over the
  [replicate, shard=1] mesh (gradients all-reduced); job-config releases (0.1, 0.2) use DDP, which
  llama3's parallelize refuses on a >1-D mesh, so the TOML refuses zero 0 with TP/PP/CP.
* Pipeline split: 0.2 and 0.3 place layers by first/last-stage weights
  (``generate_llm_fqn_per_model_part``), searched to reproduce the plan's per-rank layers; 0.1
  takes explicit ``pipeline_parallel_split_points``.
* Full recompute of half of each stage's layers -> per-op SAC (how planner prices it). TP overlap
  -> async TP with torch.compile on; fused kernels -> torch.compile on, eager -> off.
"""

from __future__ import annotations

import json
import math
import tomllib

from planner.export import torchrun
from planner.export.common import (
    CannotExpress, NotThisRelease, Plan, bash_array, comment_block, partial_recompute_per_chunk, q, selective_modules,
    safe_name, window_text,
)
from planner.export.registry import EXECUTABLE, PLAIN, Exporter, each_file
from planner.frameworks.torchtitan import (  # noqa: F401 (names the tests and the reader use)
    CLI_DEFAULT, CONFIG_FUNCTIONS, FAMILY_DEFAULT, FIELD_NEEDED_FOR, LLAMA3_FLAVORS, MOE_FLAVORS, PER_OP_SAC_SHARE,
    RELEASES, TABLE, TOML_DEFAULT, TOML_NAMES, MoEFlavor, Release, _all_fields, cli_field, cli_word, config_function_for,
    flavor_for, moe_flavor_for, release_for, stage_split, torchtitan_fields, GPT_OSS_WINDOW,
)

OVERRIDES_FILE = "torchtitan_overrides.sh"
TOML_FILE = "torchtitan.toml"
VERSION_OPTION = "torchtitan_version"
"""Key of ``Plan.options`` (``export_layout(options=...)``, ``--torchtitan-version``)."""


_REGISTRY = "torchtitan 0.3.0 torchtitan/models/llama3/config_registry.py"
CHUNKED_LOSS_CHUNKS = 8
"""Chunks torchtitan 0.3.0's llama3 configs split the loss into (ChunkedLossWrapper.Config num_chunks
default 8, torchtitan/components/loss.py; every llama3 config function in config_registry.py uses it)."""
_CHUNKED_LOSS = "torchtitan 0.3.0 torchtitan/components/loss.py ChunkedLossWrapper (_chunk_local)"
_PIPE = "torchtitan torchtitan/distributed/pipeline_parallel.py (generate_llm_fqn_per_model_part)"
_PIPE_01 = "torchtitan 0.1.0 torchtitan/models/llama3/infra/pipeline.py (pipeline_llama_manual_split)"
_PARALLELIZE = "torchtitan torchtitan/models/llama3/infra/parallelize.py (0.1, 0.2: DDP only on a 1-D mesh)"
_TORCH_SCHED = "torch torch/distributed/pipelining/schedules.py (torch 2.13.0)"
_PARALLEL_DIMS = "torchtitan torchtitan/distributed/parallel_dims.py (0.2.0 _validate; 0.2.1+ efsdp = dp_shard*cp*tp/(ep*etp))"
_SAC_SAVE = ("torchtitan 0.2.x torchtitan/models/<name>/infra/parallelize.py _op_sac_save_list; "
             "distributed/activation_checkpoint.py _custom_policy (PREFER_RECOMPUTE for ops outside the list)")
MX_EXPERT_FQNS = ["experts"]
"""quantize.grouped_mm.mx.fqns: the MoE experts (a substring of every GroupedExperts module's name,
moe_module_filter_fn in components/quantization/mx.py; the job_config example's value)."""


def target_release(plan: Plan, default: str) -> Release:
    """The release a torchtitan file targets: the plan's ``torchtitan_version`` option, else ``default``."""
    return release_for(plan.options.get(VERSION_OPTION), default)


def check_fields(keys, release: Release, section: str) -> None:
    """Refuse a setting whose field ``release`` lacks (rule torchtitan_release_field)."""
    have = torchtitan_fields(release.family, section)
    for key in keys:
        if key in have:
            continue
        if key not in _all_fields():  # programming error: every setting must be checked against torchtitan first
            raise RuntimeError(f"torchtitan setting {key} is in no torchtitan_fields_*.txt")
        others = [r.version for r in RELEASES.values() if key in torchtitan_fields(r.family, "cli")
                  | torchtitan_fields(r.family, "toml")]
        need = FIELD_NEEDED_FOR.get(key, "this layout")
        raise CannotExpress("torchtitan_release_field", f"{need} needs {key}, which torchtitan {release.version} "
                            f"lacks (present in {', '.join(others)})", release.source)


# ----------------------------------------------------------------------------------- pipeline


def pipeline_settings(plan: Plan) -> dict:
    """first/last-stage weights (and layers per virtual stage) that reproduce the plan's per-rank
    layer counts under torchtitan's split; raises CannotExpress if none do."""
    pp, vpp, L = plan.pp, plan.vpp, plan.model.num_layers
    stages = pp * vpp
    target = list(plan.stage_layers)
    candidates = [(1, 1)] + [(a, b) for s in range(0, 2 * (L // stages) + 3) for a in range(s + 1) for b in [s - a]]
    for first_less, last_less in candidates:
        counts = stage_split(L, stages, first_less, last_less)
        if counts is None:
            continue
        per_rank = [sum(counts[r::pp]) for r in range(pp)]
        if per_rank != target:
            continue
        out = {"first_less": first_less, "last_less": last_less, "layers_per_stage": None}
        if vpp > 1:
            eff = L + first_less + last_less
            lps = math.ceil(eff / stages)
            if math.ceil(eff / lps) != stages:
                continue
            out["layers_per_stage"] = lps
        return out
    raise CannotExpress("torchtitan_pipeline_split", f"no first/last-stage weights make torchtitan place layers "
                        f"{'/'.join(map(str, target))} on the {pp} ranks with {vpp} stage(s) each", _PIPE)


def split_points(plan: Plan) -> list[str]:
    """0.1.x ``pipeline_parallel_split_points``: the first layer of every (virtual) stage after the
    first. Stage s runs on rank s % pp (torchtitan's "loop" order); each rank's layers are split as
    evenly as possible over its vpp stages."""
    pp, vpp = plan.pp, plan.vpp
    counts = [0] * (pp * vpp)
    for rank, layers in enumerate(plan.stage_layers):
        base, extra = divmod(layers, vpp)
        for chunk in range(vpp):
            counts[chunk * pp + rank] = base + (1 if chunk < extra else 0)
    if min(counts) < 1:
        raise CannotExpress("torchtitan_pipeline_split", f"layers {'/'.join(map(str, plan.stage_layers))} leave a "
                            f"rank fewer layers than its {vpp} stages", _PIPE_01)
    points, at = [], 0
    for count in counts[:-1]:
        at += count
        points.append(f"layers.{at}")
    return points


# ----------------------------------------------------------------------------------- checks


def per_op_sac(plan: Plan) -> bool:
    """The plan fully recomputes half of each stage's layers: how torchtitan's per-op SAC is priced
    (``PER_OP_SAC_SHARE``), so torchtitan's selective AC (option "op") writes it."""
    from costmodel.pipeline import partial_recompute_per_chunk as per_chunk

    done = partial_recompute_per_chunk(plan)
    if not done:
        return False
    first, last = (plan.stage_layers[0], plan.stage_layers[-1]) if plan.pp > 1 else (0, 0)
    half, _ = per_chunk(plan.model.num_layers, plan.pp, plan.vpp, first, last, 0, PER_OP_SAC_SHARE)
    return int(half) == done


def ac_mode(plan: Plan) -> str:
    """torchtitan's activation_checkpoint.mode for the plan: none, full, or selective (per-op SAC)."""
    return "selective" if per_op_sac(plan) else plan.recompute


def check_common(plan: Plan) -> None:
    """Rules every target shares (whole nodes, flavor, the table's refusals, torch pipeline schedules)."""
    if async_tp(plan) and plan.kernels == "eager":
        raise CannotExpress("torchtitan_async_tp_compiles", "TP overlap in torchtitan is async TP, which runs only under "
                            "torch.compile, and the plan prices eager kernels: price it with --kernels fused, or "
                            "without --tp-comm-overlap", "torchtitan config: CompileConfig __post_init__ (async TP needs "
                            "compile.enable)")
    if plan.precision == "fp8" and plan.kernels == "eager":
        raise CannotExpress("torchtitan_fp8_compiles", "fp8 in torchtitan runs torchao Float8Linear under torch.compile "
                            "(the export compiles it, as torchtitan recommends), and the plan prices eager kernels: "
                            "price it with --kernels fused", "torchtitan docs/float8.md")
    if plan.zero == 0 and plan.cp > 1:
        raise CannotExpress("torchtitan_cp_fsdp", f"zero=0 with cp={plan.cp}: torchtitan applies FSDP2 over the "
                            "data-parallel-shard x context-parallel ranks whenever CP is on, so weights are sharded "
                            "over the CP ranks: price with --zero 2 or 3", _PARALLELIZE)
    if partial_recompute_per_chunk(plan) and not per_op_sac(plan):
        raise CannotExpress("torchtitan_partial_recompute", "recomputing only some layers of each stage is Megatron's "
                            "block method; torchtitan's per-op SAC is priced as half of each stage's layers, and other "
                            "counts have no equivalent setting", "planner.export")
    if selective_modules(plan):
        raise CannotExpress("torchtitan_recompute_modules", f"recomputing the submodules {', '.join(selective_modules(plan))} "
                            "is Megatron-Core's --recompute-modules; torchtitan's activation checkpointing has no "
                            "such setting", "planner.export")
    torchrun.check_nodes(plan)
    flavor = flavor_for(plan.model)
    if plan.model.sliding_window is not None and not (
            flavor is not None and flavor[0] == "gpt_oss"
            and (plan.model.sliding_window, plan.model.full_attention_every) == GPT_OSS_WINDOW):
        raise CannotExpress("torchtitan_sliding_window", f"model {plan.model.name} has {window_text(plan.model)}; "
                            "torchtitan's llama3, qwen3 and deepseek_v3 flavors attend every earlier key and a job "
                            f"config sets no window (only its gpt_oss flavors window: {GPT_OSS_WINDOW[0]} keys on every "
                            "other layer, fixed in code): use --format megatron or megatron-bridge",
                            "torchtitan torchtitan/models/llama3/__init__.py; torchtitan 0.2.2 "
                            "torchtitan/models/gpt_oss/model/args.py (sliding_window_size)")
    if flavor is None:
        near = moe_flavor_for(plan.model, ignore_mtp=True)
        if near is not None:
            raise CannotExpress("torchtitan_mtp", f"{plan.model.name} has {plan.model.mtp_layers} multi-token-prediction "
                                f"layer(s); torchtitan's {near.name} {near.flavor} trains none: price a model file with "
                                "mtp_layers 0 (the same shape otherwise)", near.source)
        names = ", ".join(f"{n} {f}" for n, f in [*LLAMA3_FLAVORS, *MOE_FLAVORS])
        raise CannotExpress("torchtitan_flavor", f"torchtitan builds models from registered flavors and none matches "
                            f"{plan.model.name}'s shape (checked: {names}); register a flavor first",
                            "torchtitan torchtitan/models/<name>/__init__.py")
    check_moe_common(plan)
    TABLE.check(plan)  # what torchtitan always runs (planner.frameworks.torchtitan): refused, never changed
    if plan.pp > 1:
        m = plan.grad_accum
        if plan.vpp == 1 and m < plan.pp:
            raise CannotExpress("torchtitan_1f1b_microbatches", f"{m} micro-batches < pp={plan.pp}: Schedule1F1B requires "
                                "at least as many micro-batches as stages", _TORCH_SCHED)
        if plan.vpp > 1:
            rounds = max(1, m // plan.pp)
            if m % rounds:
                raise CannotExpress("torchtitan_interleaved_rounds", f"{m} micro-batches is not a multiple of the "
                                    f"{rounds} rounds Interleaved1F1B uses with pp={plan.pp}", _TORCH_SCHED)


def moe_flavor(plan: Plan) -> MoEFlavor | None:
    """The plan's torchtitan MoE flavor (None for a dense model); ``check_common`` must have passed."""
    return MOE_FLAVORS[flavor_for(plan.model)] if plan.is_moe else None


def check_moe_common(plan: Plan) -> None:
    """What torchtitan's MoE flavors cannot run beside the table's refusals (which read the layout
    alone): per-op SAC, priced from the pipeline split."""
    if moe_flavor(plan) is not None and per_op_sac(plan):
        raise CannotExpress("torchtitan_moe_sac", "per-op SAC on an MoE flavor: its save list keeps aten.mm and "
                            "attention outputs but not torch._grouped_mm or all_to_all_single, so every expert GEMM and "
                            "both EP all-to-alls run again, more than the half layer planner prices it as: price with "
                            "--recompute full (every layer) or none", _SAC_SAVE)


def check_moe_release(plan: Plan, release: Release) -> None:
    """What one release lacks for the plan's MoE flavor."""
    flavor = moe_flavor(plan)
    if flavor is None:
        return
    if release.version not in flavor.releases:
        raise CannotExpress("torchtitan_flavor_release", f"torchtitan {release.version} registers no {flavor.name} "
                            f"{flavor.flavor} under torchtitan/models (present in {', '.join(flavor.releases)}): use "
                            f"--torchtitan-version {flavor.releases[-1]}", flavor.source)
    ep, etp, cp, tp = plan.ep, plan.etp, plan.cp, plan.tp
    if release.version == "0.2.0" and ep > 1 and ep % (cp * (tp if etp == 1 else 1)):
        raise CannotExpress("torchtitan_ep_mesh", f"ep={ep} with cp={cp}, tp={tp}, etp={etp}: torchtitan 0.2.0 asserts "
                            f"ep % {'(cp * tp)' if etp == 1 else 'cp'} == 0 (later releases fold EP freely): use "
                            "--torchtitan-version 0.2.2", _PARALLEL_DIMS)


def config_function(plan: Plan) -> str:
    """The torchtitan 0.3.0 ``--config`` function for this model and precision."""
    _, flavor = flavor_for(plan.model)
    fn = config_function_for(flavor, plan.precision)
    if fn is None:
        from planner.frameworks.torchtitan import config_precision

        have = ", ".join(f"{flavor} {config_precision(n)}" for n, f in CONFIG_FUNCTIONS.items()
                         if f["model.flavor"] == flavor) or "none"
        raise CannotExpress("torchtitan_config_precision", f"torchtitan {CLI_DEFAULT} fixes the precision in each "
                            f"llama3 config function and none trains {flavor} in {plan.precision} (available: {have})",
                            _REGISTRY)
    return fn


def check_cli(plan: Plan, release: Release) -> None:
    if release.family != "0.3":
        raise NotThisRelease("torchtitan_cli_release", f"{OVERRIDES_FILE} is torchtitan 0.3's --module/--config command "
                            f"line; torchtitan {release.version} takes its settings from a job config file "
                            f"(--job.config_file {TOML_FILE})", release.manager)
    if plan.cuda_graphs and plan.pp > 1:
        raise CannotExpress("torchtitan_cuda_graphs_pp", f"cuda_graphs with pp={plan.pp}: torchtitan {release.version} "
                            "raises 'CUDA graphs do not support pipeline parallelism yet'",
                            f"torchtitan {release.version} trainer.py _validate_cuda_graphs")
    check_common(plan)
    if plan.is_moe:
        _, flavor = flavor_for(plan.model)
        raise CannotExpress("torchtitan_cli_moe", f"{OVERRIDES_FILE} is written with torchtitan {release.version}'s llama3 "
                            f"config functions only; the MoE flavor {flavor} needs its own module's: use {TOML_FILE} "
                            f"(--torchtitan-version 0.2)", _REGISTRY)
    if plan.precision == "fp8" and plan.fp8_recipe == "mxfp8":
        raise CannotExpress("torchtitan_cli_mxfp8", f"mxfp8: {OVERRIDES_FILE} is written with the llama3 config "
                            f"functions planner maps (BF16, and Float8 for 405B); torchtitan {release.version}'s "
                            f"llama3_8b_mxfp8 is not one of them: use {TOML_FILE} (--torchtitan-version 0.2)",
                            _REGISTRY)
    local = plan.seq_len // plan.cp
    if local % CHUNKED_LOSS_CHUNKS:
        raise CannotExpress("torchtitan_chunked_loss", f"seq_len={plan.seq_len} with cp={plan.cp}: {local} tokens per "
                            f"context-parallel rank; torchtitan {release.version}'s llama3 configs compute the loss in "
                            f"{CHUNKED_LOSS_CHUNKS} chunks of the local sequence and require it to divide evenly "
                            "('ChunkedLossWrapper sequence length must be divisible by num_chunks')", _CHUNKED_LOSS)
    config_function(plan)


def check_toml(plan: Plan, release: Release) -> None:
    if not release.reads_toml:
        raise NotThisRelease("torchtitan_toml_release", f"torchtitan {release.version} reads no TOML job config "
                            f"(--job.config_file is gone; configs are Python functions chosen with --module/--config): "
                            f"use {OVERRIDES_FILE}", release.manager)
    check_common(plan)
    check_moe_release(plan, release)
    if plan.cuda_graphs:
        raise CannotExpress("torchtitan_cuda_graphs_release", f"cuda_graphs: torchtitan {release.version} has no "
                            f"CUDA-graph capture of the training step (0.3.0 has: use {OVERRIDES_FILE})", release.source)
    if plan.zero == 0 and max(plan.tp, plan.pp, plan.cp) > 1:
        raise CannotExpress("torchtitan_ddp_1d", f"zero=0 maps to DDP, which torchtitan {release.version} refuses with "
                            "TP/PP/CP ('DDP has not supported > 1D parallelism')", _PARALLELIZE)


# ----------------------------------------------------------------------------------- settings


def _local_batch(plan: Plan) -> int:
    return plan.gbs // plan.dp if plan.pp > 1 else plan.mbs


def _dp_settings(plan: Plan) -> list[tuple[str, object]]:
    if plan.zero == 0:
        return [("parallelism.data_parallel_replicate_degree", plan.dp)] + TABLE.write("zero", 0, plan)
    replicas = plan.shard_replicas  # HSDP: FSDP over the shard groups, replicated across them
    return [("parallelism.data_parallel_replicate_degree", replicas),
            ("parallelism.data_parallel_shard_degree", plan.dp // replicas)] + TABLE.write("zero", plan.zero, plan)


def _pipe_settings(plan: Plan, release: Release, section: str) -> list[tuple[str, object]]:
    """Schedule, micro-batch and split. 0.2 and later: first/last-stage weights (and layers per
    virtual stage); releases without them (0.1): explicit split points."""
    if plan.pp == 1:
        return []
    out: list[tuple[str, object]] = [
        ("parallelism.pipeline_parallel_schedule", "Interleaved1F1B" if plan.vpp > 1 else "1F1B"),
        ("parallelism.pipeline_parallel_microbatch_size", plan.mbs),
    ]
    if "parallelism.pipeline_parallel_first_stage_less_layers" not in torchtitan_fields(release.family, section):
        return out + [("parallelism.pipeline_parallel_split_points", split_points(plan))]
    pipe = pipeline_settings(plan)
    out += [("parallelism.pipeline_parallel_first_stage_less_layers", pipe["first_less"]),
            ("parallelism.pipeline_parallel_last_stage_less_layers", pipe["last_less"])]
    if pipe["layers_per_stage"] is not None:
        out.append(("parallelism.pipeline_parallel_layers_per_stage", pipe["layers_per_stage"]))
    return out


def _batch_settings(plan: Plan) -> list[tuple[str, object]]:
    return [("training.local_batch_size", _local_batch(plan)), ("training.global_batch_size", plan.gbs),
            ("training.seq_len", plan.seq_len), ("training.max_norm", 1.0)]


def _parallel_settings(plan: Plan, release: Release, section: str) -> list[tuple[str, object]]:
    """Data, tensor, context and pipeline parallel settings, in the release's names."""
    out = _dp_settings(plan) + TABLE.write("tp", plan.tp)
    if plan.tp > 1:
        out += TABLE.write("sequence_parallel", bool(plan.sp))
    out += [("parallelism.context_parallel_degree", plan.cp), ("parallelism.pipeline_parallel_degree", plan.pp)]
    return out + _pipe_settings(plan, release, section) + _table_settings(plan)


_WRITTEN_HERE = frozenset({"tp", "sequence_parallel", "zero", "tp_comm_overlap", "tp_overlap_kind", "kernels",
                           "recompute", "precision", "cuda_graphs"})
"""Table options the settings above write (with the data-parallel degrees, compile, the converters
and the AC mode, which depend on more than one option)."""


def _table_settings(plan: Plan) -> list[tuple[str, object]]:
    """Every other option of the table, from its rows (what torchtitan always runs writes nothing);
    ``check_fields`` then refuses a key the target release lacks. A new torchtitan setting is one row."""
    out: list[tuple[str, object]] = []
    for option in TABLE.options:
        if option not in _WRITTEN_HERE:
            out += TABLE.write(option, getattr(plan, option), plan)
    return out


def async_tp(plan: Plan) -> bool:
    """The plan overlaps TP communication: torchtitan's way is async TP (torch.compile's
    micro-pipeline TP pass), which needs TP > 1 with sequence parallelism."""
    return bool(plan.tp_comm_overlap) and plan.tp > 1 and bool(plan.sp)


def cli_words(plan: Plan, release: Release | None = None) -> tuple[list[tuple[str, list]], str]:
    """(flag, values) overrides for torchtitan 0.3 and the activation-checkpoint subcommand that
    must come last. ``check_cli`` must have passed."""
    release = release or RELEASES[CLI_DEFAULT]
    items: list[tuple[str, list]] = [("--module", ["llama3"]), ("--config", [config_function(plan)])]
    settings = _batch_settings(plan) + _parallel_settings(plan, release, "cli")
    items += [cli_word(key, value) for key, value in settings]
    # 0.3.0 captures the step in CUDA graphs unless disabled (and refuses them with PP: check_cli).
    extra = [] if plan.cuda_graphs else [("training.disable_cuda_graphs", [])]
    # torch.compile on for fused kernels (and async TP, which runs only under compile), off for eager:
    # the config function's own choice is overridden either way (llama3_405b compiles).
    extra.append(("compile.enable" if plan.kernels == "fused" or async_tp(plan) else "compile.no_enable", []))
    if async_tp(plan):
        extra.append(("compile.enable_async_tensor_parallel", []))
    else:
        extra.append(("compile.no_enable_async_tensor_parallel", []))
    items += [(f"--{k}", v) for k, v in extra]
    subcommand = "activation_checkpoint:" + ac_mode(plan)
    fields = {cli_field(f) for f, _ in items} | {cli_field(subcommand)} | {"training.steps", "hf_assets_path"}
    check_fields(sorted(fields), release, "cli")
    return items, subcommand


def toml_settings(plan: Plan, release: Release | None = None) -> list[tuple[str, object]]:
    """(section.field, value) pairs in ``release``'s names (default 0.2.2). ``check_toml`` must have passed."""
    release = release or RELEASES[TOML_DEFAULT]
    names = TOML_NAMES[release.family]
    name, flavor = flavor_for(plan.model)
    out: list[tuple[str, object]] = [("model.name", name), ("model.flavor", flavor)]
    mx = plan.precision == "fp8" and plan.fp8_recipe == "mxfp8"
    if mx:
        if "mx_converter" not in names:
            raise CannotExpress("torchtitan_release_field", f"MXFP8 needs the quantize.linear.mx converter, which "
                                f"torchtitan {release.version} lacks (present in 0.2.0-0.2.2)", release.source)
        out.append(("model.converters", [names["mx_converter"]] + ([names["mx_grouped_converter"]] if plan.is_moe else [])))
    elif plan.precision == "fp8":
        out.append(("model.converters", [names["converter"]]))
    out += _batch_settings(plan) + [("training.steps", 100)]
    if plan.precision == "fp8" or plan.kernels == "fused" or async_tp(plan):
        # torch.compile fuses the elementwise work between GEMMs, as the "fused" pricing assumes
        # (and async TP runs only under compile).
        out.append((names["compile"], True))
    out += _parallel_settings(plan, release, "toml")
    if async_tp(plan):
        out.append(("parallelism.enable_async_tensor_parallel", True))
    out.append(("activation_checkpoint.mode", ac_mode(plan)))
    if per_op_sac(plan):
        out.append(("activation_checkpoint.selective_ac_option", "op"))
    if mx and plan.is_moe:
        out.append(("quantize.grouped_mm.mx.fqns", MX_EXPERT_FQNS))
    if plan.precision == "fp8" and not mx and plan.zero >= 1 and plan.dp > 1:
        f8 = names["float8"]
        out += [(f"{f8}.enable_fsdp_float8_all_gather", True), (f"{f8}.precompute_float8_dynamic_scale_for_fsdp", True)]
    check_fields([k for k, _ in out] + ["job.description"], release, "toml")
    for converter in dict(out).get("model.converters", [names["converter"]]):  # programming error
        if converter not in torchtitan_fields(release.family, "converters"):
            raise RuntimeError(f"converter {converter} is not in torchtitan_fields_{release.family}.txt")
    return out


def _cli_notes(plan: Plan, release: Release) -> list[str]:
    out = [f"torchtitan {release.version} command line ({release.origin}); settings checked against "
           f"{release.config_files} (planner/frameworks/torchtitan_fields_{release.family}.txt [cli]).",
           "The --config function supplies the model, optimizer, data loader (HuggingFace c4, streamed from the Hub)",
           "and tokenizer folder (hf_assets_path; fetch it with torchtitan's scripts/download_hf_assets.py or set",
           "HF_ASSETS_PATH); the overrides below pin every parallel, batch and recompute setting of the plan."]
    if plan.precision == "fp8":
        out.append("fp8: the llama3_405b config converts linears to torchao Float8Linear and compiles the model.")
    if plan.zero == 0:
        out.append("zero 0: torchtitan applies FSDP over the [replicate, shard=1] mesh, i.e. plain replication.")
    return out


def _toml_notes(plan: Plan, release: Release) -> list[str]:
    names = TOML_NAMES[release.family]
    out = [f"torchtitan {release.version} job config ({release.origin}); settings checked against "
           f"{release.config_files} (planner/frameworks/torchtitan_fields_{release.family}.txt [toml])."]
    if plan.precision == "fp8" and plan.fp8_recipe == "mxfp8":
        out.append(f"mxfp8: the {names.get('mx_converter')} converter (torchao MXLinear, recipe mxfp8_cublas; the output "
                   "layer stays BF16, its default filter_fqns)" + (f" and {names.get('mx_grouped_converter')} on the "
                   "experts' grouped GEMMs" if plan.is_moe else "") + "; Blackwell (SM100) only.")
    elif plan.precision == "fp8":
        out.append(f"fp8: the {names['converter']} converter (torchao Float8Linear, tensorwise), with "
                   f"{names['compile']} on as torchtitan recommends.")
    flavor = moe_flavor(plan)
    if flavor is not None:
        out.append(f"MoE: torchtitan {flavor.name} {flavor.flavor} (catalog {flavor.preset}); experts as "
                   "torch._grouped_mm, tokens exchanged by all_to_all_single over expert_parallel_degree ranks "
                   "taken from the FSDP shard dimension" + (" and TP" if plan.ep > 1 and plan.etp == 1 and plan.tp > 1
                                                            else "") + ".")
        if flavor.attention == "flex":
            out.append(f"{flavor.name} {flavor.flavor} runs FlexAttention"
                       + (" with block_causal (per-document) masks" if flavor.name == "deepseek_v3" else "")
                       + "; planner priced SDPA-class flash attention over whole sequences.")
    if plan.pp > 1 and release.family == "0.1":
        out.append("Pipeline split as pipeline_parallel_split_points (this release has no first/last-stage weights).")
    out.append(f"torchtitan reads the vocabulary from its tokenizer: point {names['assets']} at the model's tokenizer.")
    out.append("Data: training.dataset is left at torchtitan's default (c4_test, a sample in its source tree); set it "
               "(e.g. \"c4\") for a real run.")
    return out


def notes(plan: Plan, target: str, release: Release | None = None) -> list[str]:
    """Header lines: what the target release runs, and where it differs from what was priced."""
    if target == "cli":
        out = _cli_notes(plan, release or RELEASES[CLI_DEFAULT])
    else:
        out = _toml_notes(plan, release or RELEASES[TOML_DEFAULT])
    if plan.zero == 2:
        out.append("ZeRO-2 -> FSDP2 with reshard_after_forward=never (weights stay gathered from forward to backward).")
        if plan.pp == 1 and plan.grad_accum > 1:
            out.append(f"Without PP, FSDP may gather/reduce-scatter on each of the {plan.grad_accum} micro-batches: "
                       "data-parallel traffic can exceed the plan's.")
    if plan.zero == 3:
        out.append("ZeRO-3 -> FSDP2 with reshard_after_forward=always (weights gathered for each micro-batch).")
    if plan.zero >= 2 and plan.pp > 1:
        out.append("Under PP, torch.distributed.pipelining keeps FSDP gradients (and weights after a backward) "
                   "unsharded until the last micro-batch: ZeRO-1's memory, as priced.")
    if per_op_sac(plan):
        out.append("Full recompute of half of each stage's layers -> torchtitan's per-op SAC (selective_ac_option op), "
                   "which is how planner prices per-op SAC (planner.frameworks.torchtitan.PER_OP_SAC_SHARE).")
    return out


# ----------------------------------------------------------------------------------- render


def render_overrides(plan: Plan) -> str:
    release = target_release(plan, CLI_DEFAULT)
    check_cli(plan, release)
    items, subcommand = cli_words(plan, release)
    job = safe_name(f"planner-{plan.model.name}")
    head = comment_block(list(plan.header) + [""] + notes(plan, "cli", release) + [
        "",
        "Source this file for the bash arrays TORCHTITAN_OVERRIDES and TORCHTITAN_AC, or run it on each node to",
        f"launch torchrun -m torchtitan.train on {plan.nnodes} node(s) x {plan.nproc_per_node} GPUs (c10d rendezvous).",
        "Environment: MASTER_ADDR (localhost), MASTER_PORT (29500), JOB_ID (" + job + "), TRAIN_STEPS (100),",
        "HF_ASSETS_PATH (the config's). Extra arguments go before the activation_checkpoint subcommand, which tyro",
        "needs last.",
    ])
    words = [
        "torchrun",
        "--nnodes", str(plan.nnodes),
        "--nproc-per-node", str(plan.nproc_per_node),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", '"${MASTER_ADDR}:${MASTER_PORT}"',
        "--rdzv-id", '"${JOB_ID}"',
        "-m", "torchtitan.train",
        '"${TORCHTITAN_OVERRIDES[@]}"',
    ]
    return (
        "#!/usr/bin/env bash\n"
        + head
        + bash_array("TORCHTITAN_OVERRIDES", items)
        + 'TORCHTITAN_OVERRIDES+=(--training.steps "${TRAIN_STEPS:-100}")\n'
        + 'if [[ -n "${HF_ASSETS_PATH:-}" ]]; then TORCHTITAN_OVERRIDES+=(--hf_assets_path "${HF_ASSETS_PATH}"); fi\n'
        + f"TORCHTITAN_AC=({q(subcommand)})\n"
        + "\n"
        + 'if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then\n'
        + "  set -euo pipefail\n"
        + '  MASTER_ADDR="${MASTER_ADDR:-localhost}"\n'
        + '  MASTER_PORT="${MASTER_PORT:-29500}"\n'
        + f"  PLANNER_DEFAULT_JOB_ID={q(job)}\n"
        + '  JOB_ID="${JOB_ID:-${PLANNER_DEFAULT_JOB_ID}}"\n'
        + "  exec " + " \\\n    ".join(torchrun._pairs(words)) + ' "$@" "${TORCHTITAN_AC[@]}"\n'
        + "fi\n"
    )


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def render_toml(plan: Plan) -> str:
    release = target_release(plan, TOML_DEFAULT)
    check_toml(plan, release)
    sections: dict[str, list[tuple[str, object]]] = {}
    for key, value in toml_settings(plan, release):
        section, name = key.rsplit(".", 1)
        sections.setdefault(section, []).append((name, value))
    head = comment_block(list(plan.header) + [""] + notes(plan, "toml", release) + [
        "",
        f"For torchtitan {release.version} (torchtitan 0.3 and later read no TOML: use {OVERRIDES_FILE}):",
        f"  torchrun ... -m torchtitan.train --job.config_file {TOML_FILE}",
    ])
    body = [f'[job]\ndescription = {_toml_value("planner " + plan.layout_summary())}\n']
    for section, pairs in sections.items():
        body.append(f"[{section}]\n" + "".join(f"{n} = {_toml_value(v)}\n" for n, v in pairs))
    text = head + "\n" + "\n".join(body)
    parsed = tomllib.loads(text)
    if parsed["training"]["global_batch_size"] != plan.gbs:  # round-trip check of what we wrote
        raise RuntimeError("torchtitan.toml did not round-trip")
    return text


EXPORTER = Exporter(
    name="torchtitan",
    files={OVERRIDES_FILE: EXECUTABLE, TOML_FILE: PLAIN},
    # The 0.3 command line and the job-config TOML refuse independently.
    render=each_file({OVERRIDES_FILE: lambda plan, entrypoint: render_overrides(plan),
                      TOML_FILE: lambda plan, entrypoint: render_toml(plan)}),
    table=TABLE,
    description="torchtitan 0.3.0 command line (run it to launch), and the same layout as a TOML job config for "
                "torchtitan 0.2.2 (0.1.x / 0.2.x with --torchtitan-version)",
)
