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
  shape matches no checked flavor (llama3 8B / 70B / 405B). In 0.3.0 the config function also
  fixes the precision (llama3_8b, llama3_70b: bf16; llama3_405b: float8 + compile), so the
  overrides are refused where no config function has the plan's precision.
* ZeRO: torchtitan has FSDP2 (``data_parallel_shard_degree``) and replication
  (``data_parallel_replicate_degree``), no ZeRO-1/2. zero 3 -> FSDP with
  ``fsdp_reshard_after_forward=always`` (weights gathered for every micro-batch's forward and
  backward, as the cost model prices ZeRO-3); zero 1/2 -> FSDP with ``never`` (weights stay
  gathered from forward to backward): weight memory at or below the plan's, but without pipeline
  parallelism FSDP may gather/reduce per micro-batch (noted in the header). zero 0 -> replication:
  0.3.0 applies FSDP over the [replicate, shard=1] mesh (gradients all-reduced); job-config
  releases (0.1, 0.2) use DDP, which llama3's parallelize refuses on a >1-D mesh, so the TOML
  refuses zero 0 with TP/PP/CP.
* Pipeline split: 0.2 and 0.3 place layers by first/last-stage weights
  (``generate_llm_fqn_per_model_part``), searched to reproduce the plan's per-rank layers; 0.1
  takes explicit ``pipeline_parallel_split_points``.
* Selective recompute -> torchtitan's per-op SAC, which is not Megatron's core-attention recompute
  (noted). TP overlap -> torchtitan's async TP with torch.compile on (the only TP overlap it has;
  a plan priced as TE userbuffers says so, since async TP hides only the forward passes); without
  it, async TP is switched off.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from hardware_catalog.errors import PlannerInputError
from planner.export import torchrun
from planner.export.common import (
    CannotExpress, Plan, bash_array, comment_block, partial_recompute_per_chunk, q, selective_modules, safe_name,
)
from planner.export.registry import EXECUTABLE, PLAIN, Exporter, each_file

OVERRIDES_FILE = "torchtitan_overrides.sh"
TOML_FILE = "torchtitan.toml"
VERSION_OPTION = "torchtitan_version"
"""Key of ``Plan.options`` (``export_layout(options=...)``, ``--torchtitan-version``)."""


@dataclass(frozen=True)
class Release:
    """A torchtitan release the export can target."""

    version: str
    family: str
    """Releases of one family share a layout and ``torchtitan_fields_<family>.txt``."""
    config_files: str
    """Where the release declares its config fields."""
    origin: str
    reads_toml: bool

    @property
    def source(self) -> str:
        return f"torchtitan {self.version} {self.config_files}"

    @property
    def manager(self) -> str:
        """The ConfigManager that reads the command line and the job config file."""
        path = "torchtitan/config_manager.py" if self.family == "0.1" else "torchtitan/config/manager.py"
        return f"torchtitan {self.version} {path}"


RELEASES: dict[str, Release] = {r.version: r for r in (
    Release("0.1.0", "0.1", "torchtitan/config_manager.py", "tag v0.1.0, f7084fc78567", True),
    Release("0.2.0", "0.2", "torchtitan/config/job_config.py", "tag v0.2.0, 29624e37fa6d", True),
    Release("0.2.1", "0.2", "torchtitan/config/job_config.py", "tag v0.2.1, 81af8833ddef", True),
    Release("0.2.2", "0.2", "torchtitan/config/job_config.py", "tag v0.2.2, 73a0e6979dd1", True),
    Release("0.3.0", "0.3", "torchtitan/config/configs.py + torchtitan/trainer.py",
            "PyPI wheel; release/0.3 at 4f9e9a47d49d", False),
)}
FAMILY_DEFAULT = {"0.1": "0.1.0", "0.2": "0.2.2", "0.3": "0.3.0"}
CLI_DEFAULT = "0.3.0"
TOML_DEFAULT = "0.2.2"
"""The last release that reads a TOML job config."""

# Names that moved between the job-config releases (the field lists hold the fields themselves).
TOML_NAMES = {
    "0.1": {"compile": "training.compile", "float8": "float8", "converter": "float8",
            "assets": "model.tokenizer_path"},
    "0.2": {"compile": "compile.enable", "float8": "quantize.linear.float8", "converter": "quantize.linear.float8",
            "assets": "model.hf_assets_path"},
}
# What in a plan needs a field, for the refusal when a release lacks it.
FIELD_NEEDED_FOR = {
    "parallelism.enable_sequence_parallel": "tensor parallelism without sequence parallelism (sequence_parallel off)",
}
_REGISTRY = "torchtitan 0.3.0 torchtitan/models/llama3/config_registry.py"
_PIPE = "torchtitan torchtitan/distributed/pipeline_parallel.py (generate_llm_fqn_per_model_part)"
_PIPE_01 = "torchtitan 0.1.0 torchtitan/models/llama3/infra/pipeline.py (pipeline_llama_manual_split)"
_PARALLELIZE = "torchtitan torchtitan/models/llama3/infra/parallelize.py (0.1, 0.2: DDP only on a 1-D mesh)"
_TORCH_SCHED = "torch torch/distributed/pipelining/schedules.py (torch 2.13.0)"
LLAMA3_VOCAB = 128256


def release_for(version, default: str = TOML_DEFAULT) -> Release:
    """The release ``version`` names: "0.2", "0.2.x", "v0.2.2", "0.2.2" ...; ``default`` when None."""
    if version is None:
        return RELEASES[default]
    key = str(version).strip().lower().removeprefix("v").removesuffix(".x")
    key = FAMILY_DEFAULT.get(key, key)
    if key not in RELEASES:
        known = ", ".join(list(FAMILY_DEFAULT) + list(RELEASES))
        raise PlannerInputError(f"torchtitan version {version!r}: the export knows {known}")
    return RELEASES[key]


def target_release(plan: Plan, default: str) -> Release:
    """The release a torchtitan file targets: the plan's ``torchtitan_version`` option, else ``default``."""
    return release_for(plan.options.get(VERSION_OPTION), default)


@lru_cache(maxsize=8)
def torchtitan_fields(family: str, section: str) -> frozenset[str]:
    """Names listed under ``[section]`` ("cli", "toml" or "converters") in torchtitan_fields_<family>.txt;
    empty where the file has no such section."""
    text = Path(__file__).with_name(f"torchtitan_fields_{family}.txt").read_text(encoding="utf-8")
    current, out = None, set()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            continue
        if current == section:
            out.add(line.split()[0])
    return frozenset(out)


def _all_fields() -> frozenset[str]:
    """Every setting any release's list holds (a name in none of them is a programming error)."""
    families = sorted({r.family for r in RELEASES.values()})
    return frozenset().union(*(torchtitan_fields(f, s) for f in families for s in ("cli", "toml")))


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


def cli_field(word: str) -> str | None:
    """The config field a torchtitan command-line word sets (None for a value)."""
    if word.startswith("activation_checkpoint:"):
        return "activation_checkpoint"
    if not word.startswith("--"):
        return None
    key = word[2:]
    section, _, name = key.rpartition(".")
    if name.startswith("no_"):
        name = name[3:]
    return f"{section}.{name}" if section else name


def _ffn(dim: int, multiple_of: int, multiplier: float) -> int:
    """torchtitan's compute_ffn_hidden_dim for the llama3 flavors."""
    hidden = int(2 * 4 * dim / 3)
    hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


# (name, flavor): (n_layers, dim, n_heads, n_kv_heads, ffn hidden) from torchtitan/models/llama3/__init__.py
LLAMA3_FLAVORS = {
    ("llama3", "8B"): (32, 4096, 32, 8, _ffn(4096, 1024, 1.3)),
    ("llama3", "70B"): (80, 8192, 64, 8, _ffn(8192, 4096, 1.3)),
    ("llama3", "405B"): (126, 16384, 128, 8, _ffn(16384, 4096, 1.2)),
}

# torchtitan 0.3.0 config functions: (flavor, precision) -> --config name.
CONFIG_FUNCTIONS = {
    ("8B", "bf16"): "llama3_8b",
    ("70B", "bf16"): "llama3_70b",
    ("405B", "fp8"): "llama3_405b",
}


def flavor_for(model) -> tuple[str, str] | None:
    """torchtitan (model name, flavor) whose architecture equals ``model``, or None."""
    if model.moe is not None or model.mla is not None:
        return None
    if not (model.gated_mlp and model.norm == "rmsnorm" and model.position_embedding == "rope"
            and not model.tied_embeddings and not model.linear_bias and not model.qkv_bias
            and model.vocab_size == LLAMA3_VOCAB):
        return None
    if model.head_dim is not None and model.head_dim * model.num_attention_heads != model.hidden_size:
        return None
    shape = (model.num_layers, model.hidden_size, model.num_attention_heads, model.kv_heads, model.ffn_hidden_size)
    for key, flavor_shape in LLAMA3_FLAVORS.items():
        if flavor_shape == shape:
            return key
    return None


# ----------------------------------------------------------------------------------- pipeline


def stage_split(num_layers: int, num_stages: int, first_less: int, last_less: int) -> list[int] | None:
    """Layers per (virtual) stage as torchtitan's generate_llm_fqn_per_model_part assigns them;
    None where torchtitan raises."""
    if num_stages == 1:
        return [num_layers]
    eff = num_layers + first_less + last_less
    if num_stages > eff:
        return None
    base, extra = divmod(eff, num_stages)
    if base == 0 or first_less > base or last_less > base:
        return None
    counts = []
    for i in range(num_stages):
        e = base + (1 if i < extra else 0)
        counts.append(e - first_less if i == 0 else e - last_less if i == num_stages - 1 else e)
    return counts


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


def check_common(plan: Plan) -> None:
    """Rules every target shares (flavor, whole nodes, torch pipeline schedules)."""
    if async_tp(plan) and plan.kernels == "eager":
        raise CannotExpress("torchtitan_async_tp_compiles", "TP overlap in torchtitan is async TP, which runs only under "
                            "torch.compile, and the plan prices eager kernels: price it with --kernels fused, or "
                            "without --tp-comm-overlap", "torchtitan config: CompileConfig __post_init__ (async TP needs "
                            "compile.enable)")
    if partial_recompute_per_chunk(plan):
        raise CannotExpress("torchtitan_partial_recompute", "recomputing only some layers of each stage is Megatron's "
                            "block method; torchtitan has no equivalent setting", "planner.export")
    if selective_modules(plan):
        raise CannotExpress("torchtitan_recompute_modules", f"recomputing the submodules {', '.join(selective_modules(plan))} "
                            "is Megatron-Core's --recompute-modules; torchtitan's activation checkpointing has no "
                            "such setting", "planner.export")
    torchrun.check_nodes(plan)
    if flavor_for(plan.model) is None:
        names = ", ".join(f"{n} {f}" for n, f in LLAMA3_FLAVORS)
        raise CannotExpress("torchtitan_flavor", f"torchtitan builds models from registered flavors and none matches "
                            f"{plan.model.name}'s shape (checked: {names}); register a flavor first",
                            "torchtitan torchtitan/models/llama3/__init__.py")
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


def config_function(plan: Plan) -> str:
    """The torchtitan 0.3.0 ``--config`` function for this model and precision."""
    _, flavor = flavor_for(plan.model)
    fn = CONFIG_FUNCTIONS.get((flavor, plan.precision))
    if fn is None:
        have = ", ".join(f"{f} {p}" for (f, p) in CONFIG_FUNCTIONS if f == flavor) or "none"
        raise CannotExpress("torchtitan_config_precision", f"torchtitan {CLI_DEFAULT} fixes the precision in each "
                            f"llama3 config function and none trains {flavor} in {plan.precision} (available: {have})",
                            _REGISTRY)
    return fn


def check_cli(plan: Plan, release: Release) -> None:
    if release.family != "0.3":
        raise CannotExpress("torchtitan_cli_release", f"{OVERRIDES_FILE} is torchtitan 0.3's --module/--config command "
                            f"line; torchtitan {release.version} takes its settings from a job config file "
                            f"(--job.config_file {TOML_FILE})", release.manager)
    check_common(plan)
    config_function(plan)


def check_toml(plan: Plan, release: Release) -> None:
    if not release.reads_toml:
        raise CannotExpress("torchtitan_toml_release", f"torchtitan {release.version} reads no TOML job config "
                            f"(--job.config_file is gone; configs are Python functions chosen with --module/--config): "
                            f"use {OVERRIDES_FILE}", release.manager)
    check_common(plan)
    if plan.zero == 0 and max(plan.tp, plan.pp, plan.cp) > 1:
        raise CannotExpress("torchtitan_ddp_1d", f"zero=0 maps to DDP, which torchtitan {release.version} refuses with "
                            "TP/PP/CP ('DDP has not supported > 1D parallelism')", _PARALLELIZE)


# ----------------------------------------------------------------------------------- settings


def _local_batch(plan: Plan) -> int:
    return plan.gbs // plan.dp if plan.pp > 1 else plan.mbs


def _dp_settings(plan: Plan) -> list[tuple[str, object]]:
    if plan.zero == 0:
        return [("parallelism.data_parallel_replicate_degree", plan.dp), ("parallelism.data_parallel_shard_degree", 1)]
    replicas = plan.shard_replicas  # HSDP: FSDP over the shard groups, replicated across them
    return [("parallelism.data_parallel_replicate_degree", replicas),
            ("parallelism.data_parallel_shard_degree", plan.dp // replicas),
            ("parallelism.fsdp_reshard_after_forward", "always" if plan.zero == 3 else "never")]


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
    out = _dp_settings(plan) + [("parallelism.tensor_parallel_degree", plan.tp)]
    if plan.tp > 1 and not plan.sp:
        out.append(("parallelism.enable_sequence_parallel", False))
    out += [("parallelism.context_parallel_degree", plan.cp), ("parallelism.pipeline_parallel_degree", plan.pp)]
    return out + _pipe_settings(plan, release, section)


def async_tp(plan: Plan) -> bool:
    """The plan overlaps TP communication: torchtitan's way is async TP (torch.compile's
    micro-pipeline TP pass), which needs TP > 1 with sequence parallelism."""
    return bool(plan.tp_comm_overlap) and plan.tp > 1 and bool(plan.sp)


def _async_tp_note(plan: Plan) -> list[str]:
    if not async_tp(plan) or plan.tp_overlap_kind == "asynctp":
        return []
    return ["TP overlap: the plan was priced as TransformerEngine userbuffers; torchtitan runs async TP, which hides "
            "only the forward passes' TP collectives (re-price with --tp-overlap-kind asynctp)."]


def cli_words(plan: Plan, release: Release | None = None) -> tuple[list[tuple[str, list]], str]:
    """(flag, values) overrides for torchtitan 0.3 and the activation-checkpoint subcommand that
    must come last. ``check_cli`` must have passed."""
    release = release or RELEASES[CLI_DEFAULT]
    items: list[tuple[str, list]] = [("--module", ["llama3"]), ("--config", [config_function(plan)])]
    settings = _batch_settings(plan) + _parallel_settings(plan, release, "cli")
    for key, value in settings:
        if isinstance(value, bool):  # tyro: a bool field is a flag with a no_ form
            section, _, name = key.rpartition(".")
            items.append((f"--{section}.{name}" if value else f"--{section}.no_{name}", []))
        else:
            items.append((f"--{key}", [str(value)]))
    extra = [("training.disable_cuda_graphs", [])] if plan.pp > 1 else []
    if async_tp(plan):
        extra += [("compile.enable", []), ("compile.enable_async_tensor_parallel", [])]
    else:
        extra.append(("compile.no_enable_async_tensor_parallel", []))
    items += [(f"--{k}", v) for k, v in extra]
    subcommand = "activation_checkpoint:" + plan.recompute
    fields = {cli_field(f) for f, _ in items} | {cli_field(subcommand)} | {"training.steps", "hf_assets_path"}
    check_fields(sorted(fields), release, "cli")
    return items, subcommand


def toml_settings(plan: Plan, release: Release | None = None) -> list[tuple[str, object]]:
    """(section.field, value) pairs in ``release``'s names (default 0.2.2). ``check_toml`` must have passed."""
    release = release or RELEASES[TOML_DEFAULT]
    names = TOML_NAMES[release.family]
    name, flavor = flavor_for(plan.model)
    out: list[tuple[str, object]] = [("model.name", name), ("model.flavor", flavor)]
    if plan.precision == "fp8":
        out.append(("model.converters", [names["converter"]]))
    out += _batch_settings(plan) + [("training.steps", 100)]
    if plan.precision == "fp8" or plan.kernels == "fused" or async_tp(plan):
        # torch.compile fuses the elementwise work between GEMMs, as the "fused" pricing assumes
        # (and async TP runs only under compile).
        out.append((names["compile"], True))
    out += _parallel_settings(plan, release, "toml")
    if async_tp(plan):
        out.append(("parallelism.enable_async_tensor_parallel", True))
    out.append(("activation_checkpoint.mode", plan.recompute))
    if plan.recompute == "selective":
        out.append(("activation_checkpoint.selective_ac_option", "op"))
    if plan.precision == "fp8" and plan.zero >= 1 and plan.dp > 1:
        f8 = names["float8"]
        out += [(f"{f8}.enable_fsdp_float8_all_gather", True), (f"{f8}.precompute_float8_dynamic_scale_for_fsdp", True)]
    check_fields([k for k, _ in out] + ["job.description"], release, "toml")
    if names["converter"] not in torchtitan_fields(release.family, "converters"):  # programming error
        raise RuntimeError(f"converter {names['converter']} is not in torchtitan_fields_{release.family}.txt")
    return out


def _cli_notes(plan: Plan, release: Release) -> list[str]:
    out = [f"torchtitan {release.version} command line ({release.origin}); settings checked against "
           f"{release.config_files} (planner/export/torchtitan_fields_{release.family}.txt [cli]).",
           "The --config function supplies the model, optimizer, data loader (HuggingFace c4, streamed from the Hub)",
           "and tokenizer folder (hf_assets_path; fetch it with torchtitan's scripts/download_hf_assets.py or set",
           "HF_ASSETS_PATH); the overrides below pin every parallel, batch and recompute setting of the plan."]
    if plan.precision == "fp8":
        out.append("fp8: the llama3_405b config converts linears to torchao Float8Linear and compiles the model.")
    if plan.zero == 0:
        out.append("zero 0: torchtitan applies FSDP over the [replicate, shard=1] mesh, i.e. plain replication.")
    return out + _async_tp_note(plan)


def _toml_notes(plan: Plan, release: Release) -> list[str]:
    names = TOML_NAMES[release.family]
    out = [f"torchtitan {release.version} job config ({release.origin}); settings checked against "
           f"{release.config_files} (planner/export/torchtitan_fields_{release.family}.txt [toml])."]
    if plan.precision == "fp8":
        out.append(f"fp8: the {names['converter']} converter (torchao Float8Linear, tensorwise), with "
                   f"{names['compile']} on as torchtitan recommends.")
    if plan.pp > 1 and release.family == "0.1":
        out.append("Pipeline split as pipeline_parallel_split_points (this release has no first/last-stage weights).")
    out += _async_tp_note(plan)
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
    if plan.zero in (1, 2):
        out.append(f"torchtitan has no ZeRO-{plan.zero}: this is FSDP2 with reshard_after_forward=never (weights stay "
                   "gathered from forward to backward).")
        if plan.pp == 1 and plan.grad_accum > 1:
            out.append(f"Without PP, FSDP may gather/reduce-scatter on each of the {plan.grad_accum} micro-batches: "
                       "data-parallel traffic can exceed the plan's.")
    if plan.zero == 3:
        out.append("ZeRO-3 -> FSDP2 with reshard_after_forward=always (weights gathered for each micro-batch).")
    if plan.zero >= 2 and plan.pp > 1:
        out.append("Under PP, torch.distributed.pipelining keeps FSDP gradients (and weights after a backward) "
                   "unsharded until the last micro-batch: ZeRO-1's memory, as priced.")
    if plan.grad_dtype == "bf16":
        out.append("grad_dtype bf16: torchtitan's FSDP2 reduces gradients in float32 (training.mixed_precision_reduce "
                   "accepts only float32): data-parallel reduction bytes are twice what was priced.")
    if plan.recompute == "selective":
        out.append("Selective recompute -> torchtitan's per-op SAC, which saves attention outputs and recomputes every "
                   "second matmul: not Megatron's core-attention recompute, so step time may exceed the prediction.")
    if plan.loss != "eager":
        out.append(f"The plan prices a {plan.loss} cross-entropy; torchtitan computes the loss with F.cross_entropy on "
                   "FP32 logits, which holds more memory on the last stage (price it with --loss eager).")
    if plan.attention == "flash3":
        out.append("The plan prices FlashAttention-3 / cuDNN attention; torchtitan's SDPA runs FlashAttention-2 "
                   "unless its cuDNN backend is selected.")
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
    description="torchtitan 0.3.0 command line (run it to launch), and the same layout as a TOML job config for "
                "torchtitan 0.2.2 (0.1.x / 0.2.x with --torchtitan-version)",
)
