"""torchtitan: its releases, config fields, flavors and config functions, and the one table of
planner option <-> torchtitan setting, for the exporter (``planner/export/torchtitan.py``) and the
reader (``planner/launch/torchtitan.py``).

Releases 0.1.x (torchtitan/config_manager.py), 0.2.x (torchtitan/config/job_config.py) and 0.3.x
(torchtitan/config/configs.py; command line only) are ``RELEASES``; the same names are what
``--torchtitan-version`` and ``--framework torchtitan-0.2`` take (``planner.frameworks.releases``).
The fields of each release are listed in ``torchtitan_fields_<family>.txt`` (copies of the config
dataclasses in tests/data/torchtitan check them).

What torchtitan always runs, and so what the table refuses at export with its reason (never written
as something else):

* loss: F.cross_entropy on FP32 logits outside the compiled blocks (torchtitan train.py): loss eager;
* attention: SDPA (FlashAttention-2 class): attention flash;
* gradient reduction in FP32 (training.mixed_precision_reduce accepts float32 only);
* FSDP2 prefetches its all-gathers and overlaps its reduce-scatters (dp_comm_overlap on, zero3_gather prefetch);
* data parallelism is FSDP2 (``data_parallel_shard_degree``) or replication: ZeRO-3 (reshard after
  forward), ZeRO-2 (``fsdp_reshard_after_forward = "never"``) or ZeRO-0; there is no ZeRO-1;
* TP overlap is PyTorch async TP under torch.compile (tp_overlap_kind asynctp);
* selective activation checkpointing is per-op SAC, priced as full recompute of half the layers
  (``PER_OP_SAC``);
* MoE flavors (``MOE_FLAVORS``): experts as torch._grouped_mm (moe_grouped_gemm fused), dropless
  token-choice routing, tokens exchanged by blocking all_to_all_single (moe_dispatcher alltoall,
  no EP overlap).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from costmodel.options import OPTIONS_BY_NAME
from hardware_catalog.errors import PlannerInputError
from planner.frameworks.table import NUMBER, Above, Refusal, Row, Table

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
            "assets": "model.hf_assets_path", "mx_converter": "quantize.linear.mx",
            "mx_grouped_converter": "quantize.grouped_mm.mx"},
}
# What in a plan needs a field, for the refusal when a release lacks it.
FIELD_NEEDED_FOR = {
    "parallelism.enable_sequence_parallel": "tensor parallelism without sequence parallelism (sequence_parallel off)",
    "parallelism.context_parallel_rotate_method": "ring context parallelism (cp_comm_type p2p: the alltoall "
                                                  "rotation; 0.3.0 all-gathers, price with --cp-comm-type allgather)",
    "quantize.linear.mx.recipe_name": "MXFP8 (fp8_recipe mxfp8: torchao MXLinear, recipe mxfp8_cublas)",
    "parallelism.expert_parallel_degree": "an MoE flavor (expert parallelism)",
    "parallelism.expert_tensor_parallel_degree": "an MoE flavor (expert tensor parallelism)",
}
LLAMA3_VOCAB = 128256
GPT_OSS_WINDOW = (128, 2)
"""torchtitan 0.2.2 models/gpt_oss as (``ModelSpec.sliding_window``, ``full_attention_every``): layers with
layer_id % 2 == 0 (0-based, model/model.py) attend sliding_window_size = 128 keys (model/args.py), so
1-based layers 2, 4, ... attend every earlier key. Fixed in code: a job config cannot change it."""
PIPE_SOURCE = "torchtitan torchtitan/distributed/pipeline_parallel.py (generate_llm_fqn_per_model_part)"

def release_for(version, default: str = TOML_DEFAULT) -> Release:
    """The release ``version`` names: "0.2", "0.2.x", "v0.2.2", "0.2.2", "torchtitan-0.2" (the
    ``--framework`` name) ...; ``default`` when None."""
    if version is None:
        return RELEASES[default]
    key = str(version).strip().lower().removeprefix("torchtitan").strip(" -").removeprefix("v").removesuffix(".x")
    key = FAMILY_DEFAULT.get(key, key)
    if key not in RELEASES:
        known = ", ".join(list(FAMILY_DEFAULT) + list(RELEASES))
        raise PlannerInputError(f"torchtitan version {version!r}: the export knows {known}")
    return RELEASES[key]


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


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    low = text.lower()
    return {"true": True, "false": False}.get(low, text)


def cli_settings(words: list[str]) -> dict:
    """torchtitan command-line words -> {section.field: value} (tyro: ``--a.b v``, ``--a.b`` /
    ``--a.no_b`` for bools, ``activation_checkpoint:<mode>`` subcommand)."""
    out, i = {}, 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("activation_checkpoint:"):
            out["activation_checkpoint.mode"] = word.split(":", 1)[1].replace("-", "_")
            continue
        if not word.startswith("--"):
            continue
        key, eq, inline = word[2:].partition("=")
        if eq:
            out[key] = _value(inline)
        elif i < len(words) and not words[i].startswith("--") and ":" not in words[i][:25]:
            out[key] = _value(words[i])
            i += 1
        else:
            section, _, name = key.rpartition(".")
            if name.startswith("no_"):
                out[f"{section}.{name[3:]}" if section else name[3:]] = False
            else:
                out[key] = True
    return out


def cli_word(key: str, value) -> tuple[str, list]:
    """One setting as torchtitan's tyro command line takes it: ``--a.b v``; a bool field is a flag
    with a ``no_`` form (``cli_settings`` reads both back)."""
    if isinstance(value, bool):
        section, _, name = key.rpartition(".")
        return (f"--{section}.{name}" if value else f"--{section}.no_{name}", [])
    return (f"--{key}", [str(value)])


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


FLAVORS = {flavor: f"llama3-{flavor.lower()}" for _, flavor in LLAMA3_FLAVORS}
"""torchtitan llama3 flavors -> catalog presets (same shapes: torchtitan/models/llama3/__init__.py)."""


@dataclass(frozen=True)
class MoEFlavor:
    """A registered torchtitan MoE flavor, as its release's ``<model>/__init__.py`` declares it."""

    name: str
    """model.name (the TrainSpec's registered name)."""
    flavor: str
    """model.flavor (the key of the model's args dict)."""
    preset: str
    """The catalog preset of the same shape (with ``mtp_layers`` 0: torchtitan trains no MTP module)."""
    releases: tuple
    """The releases whose torchtitan/models registers it."""
    shape: tuple
    """``moe_shape`` of the flavor, from the file: (n_layers, dim, n_heads, n_kv_heads, head_dim, vocab,
    dense ffn, n_dense_layers, num_experts, top_k, moe_inter_dim, num_shared_experts, expert groups,
    limited groups, MLA (q_lora, kv_lora, qk_nope, qk_rope, v_head) or None, linear bias, sliding
    window (size, every) or None, SwiGLU clamp or None)."""
    attention: str
    """"sdpa" or "flex" (FlexAttention: no context parallelism in 0.2.x, parallelize.py)."""
    pipeline: bool
    """The TrainSpec has a pipelining_fn (None: train.py raises with pipeline_parallel_degree > 1)."""
    source: str


_QWEN3 = "torchtitan 0.2.x torchtitan/models/qwen3/__init__.py qwen3_args"
_DSV3 = "torchtitan 0.2.x torchtitan/models/deepseek_v3/__init__.py deepseekv3_args"
_GPT_OSS = ("torchtitan 0.2.2 torchtitan/models/gpt_oss/__init__.py gptoss_configs + model/args.py GptOssModelArgs "
            "defaults (dim 2880, moe_inter_dim 2880, head_dim 64, n_heads 64, n_kv_heads 8, vocab 201088, "
            "sliding_window_size 128, swiglu_limit 7.0)")
_TOML_02 = ("0.2.0", "0.2.1", "0.2.2")
MOE_FLAVORS: dict[tuple[str, str], MoEFlavor] = {(f.name, f.flavor): f for f in (
    # qwen3: every layer MoE (moe_enabled), softmax top-8 router, no shared expert; TrainSpec pipelining_fn=None.
    MoEFlavor("qwen3", "30B-A3B", "qwen3-30b-a3b", _TOML_02,
              (48, 2048, 32, 4, 128, 151936, None, 0, 128, 8, 768, 0, None, None, None, False, None, None),
              "sdpa", False, _QWEN3),
    MoEFlavor("qwen3", "235B-A22B", "qwen3-235b-a22b", _TOML_02,
              (94, 4096, 64, 4, 128, 151936, None, 0, 128, 8, 1536, 0, None, None, None, False, None, None),
              "sdpa", False, _QWEN3),
    # deepseek_v3 671B: MLA, 3 dense layers of inter_dim 18432, 256 routed + 1 shared expert, top-8 over
    # 4 of 8 groups; FlexAttention with block_causal masks; pipelining_fn=pipeline_llm; no MTP module.
    MoEFlavor("deepseek_v3", "671B", "deepseek-v3", _TOML_02,
              (61, 7168, 128, None, None, 129280, 18432, 3, 256, 8, 2048, 1, 8, 4, (1536, 512, 128, 64, 128),
               False, None, None),
              "flex", True, _DSV3),
    # gpt_oss (models/ from 0.2.2; 0.2.1 has it under experiments/): biases, top-4, alternate 128-key windows.
    MoEFlavor("gpt_oss", "20b", "gpt-oss-20b", ("0.2.2",),
              (24, 2880, 64, 8, 64, 201088, None, 0, 32, 4, 2880, 0, None, None, None, True, (128, 2), 7.0),
              "flex", False, _GPT_OSS),
    MoEFlavor("gpt_oss", "120b", "gpt-oss-120b", ("0.2.2",),
              (36, 2880, 64, 8, 64, 201088, None, 0, 128, 4, 2880, 0, None, None, None, True, (128, 2), 7.0),
              "flex", False, _GPT_OSS),
)}
"""The MoE flavors whose shape matches a catalog preset. torchtitan 0.1.0 registers none under
torchtitan/models (its MoE models are experiments), and the 0.3.0 command line is written with
llama3's config functions only."""


def moe_shape(model) -> tuple | None:
    """The fields of ``model`` a torchtitan MoE flavor fixes (``MoEFlavor.shape``), or None for a
    dense model or one torchtitan's MoE models do not build (LayerNorm, learned positions, tied
    embeddings, QKV bias alone)."""
    moe = model.moe
    if moe is None or not (model.gated_mlp and model.norm == "rmsnorm" and model.position_embedding == "rope"
                           and not model.tied_embeddings and not (model.qkv_bias and not model.linear_bias)):
        return None
    if moe.moe_layer_frequency != 1 or moe.shared_expert_ffn_hidden_size not in (
            None, moe.expert_ffn_hidden_size * max(moe.num_shared_experts, 1)):
        return None
    mla = model.mla
    mla_shape = None if mla is None else (mla.q_lora_rank, mla.kv_lora_rank, mla.qk_nope_head_dim,
                                           mla.qk_rope_head_dim, mla.v_head_dim)
    window = None if model.sliding_window is None else (model.sliding_window, model.full_attention_every)
    return (model.num_layers, model.hidden_size, model.num_attention_heads,
            None if mla else model.num_kv_heads, None if mla else model.head_dim, model.vocab_size,
            model.ffn_hidden_size if moe.num_dense_layers else None, moe.num_dense_layers, moe.num_experts,
            moe.top_k, moe.expert_ffn_hidden_size, moe.num_shared_experts, moe.router_groups, moe.router_group_topk,
            mla_shape, bool(model.linear_bias), window, model.glu_clamp)


def moe_flavor_for(model, ignore_mtp: bool = False) -> MoEFlavor | None:
    """The MoE flavor whose shape equals ``model``'s (and which, like every torchtitan model, has no
    MTP module unless ``ignore_mtp``), or None."""
    if getattr(model, "mtp_layers", 0) and not ignore_mtp:
        return None
    shape = moe_shape(model)
    return next((f for f in MOE_FLAVORS.values() if f.shape == shape), None) if shape else None


CONFIG_FUNCTIONS = {
    "llama3_8b": {"model.flavor": "8B", "training.local_batch_size": 1, "training.seq_len": 8192,
                  "activation_checkpoint.mode": "selective", "activation_checkpoint.selective_ac_option": "op"},
    "llama3_70b": {"model.flavor": "70B", "training.local_batch_size": 8, "training.seq_len": 8192,
                   "parallelism.tensor_parallel_degree": 8, "activation_checkpoint.mode": "full"},
    "llama3_405b": {"model.flavor": "405B", "training.local_batch_size": 2, "training.seq_len": 8192,
                    "parallelism.tensor_parallel_degree": 8, "activation_checkpoint.mode": "full",
                    "compile.enable": True, "compile.enable_async_tensor_parallel": True,
                    "model.converters": ["float8"]},
}
"""What torchtitan 0.3.0's llama3 config functions set (models/llama3/config_registry.py); the export
picks the one whose flavor and precision match the plan (``config_function_for``)."""


def config_precision(name: str) -> str:
    return "fp8" if "float8" in CONFIG_FUNCTIONS[name].get("model.converters", []) else "bf16"


def config_function_for(flavor: str, precision: str) -> str | None:
    """The 0.3.0 ``--config`` function training ``flavor`` at ``precision``, or None."""
    return next((name for name, fields in CONFIG_FUNCTIONS.items()
                 if fields["model.flavor"] == flavor and config_precision(name) == precision), None)


def flavor_for(model) -> tuple[str, str] | None:
    """torchtitan (model name, flavor) whose architecture equals ``model``, or None (a release may
    still lack the flavor: ``MoEFlavor.releases``)."""
    if model.moe is not None:
        found = moe_flavor_for(model)
        return (found.name, found.flavor) if found else None
    if model.mla is not None:
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



# ----------------------------------------------------------------------------------- the table

_AC = "torchtitan torchtitan/distributed/activation_checkpoint.py"
PER_OP_SAC_SHARE = 2
"""Per-op SAC, priced as full recompute of half of each stage's layers (``recompute_share`` 2: two
quarters). Its policy (_apply_op_sac / _custom_policy in activation_checkpoint.py) saves the outputs
of SDPA, of reduce-scatters and of every other matmul, and recomputes the rest: the elementwise work
(norms, RoPE, SiLU) and every second matmul (in a llama block: wk, wo, w3 of the seven), about half of
a layer's forward time, and keeps about half of its activations. Megatron's selective recompute is
the opposite trade (it recomputes the attention kernel and keeps every matmul output), so it is not
used for torchtitan. ``--framework torchtitan-0.2 --recompute selective`` prices the same
(planner.frameworks.profiles)."""
_FSDP = "torchtitan torchtitan/distributed/fsdp.py + parallelize.py (FSDP2 fully_shard)"
_CP = "torchtitan parallelism.context_parallel_rotate_method (0.1.0 config_manager.py, 0.2.x job_config.py)"
_FLOAT8 = "torchtitan float8 / quantize.linear.float8 recipe_name (None: torchao Float8LinearConfig tensorwise)"
_MX = ("torchtitan 0.2.x config/job_config.py MXLinear (recipe_name 'mxfp8_cublas'), MXGroupedMM (recipe 'mxfp8'); "
       "components/quantization/mx.py: converters quantize.linear.mx / quantize.grouped_mm.mx, SM100 only")
_EP = "torchtitan 0.2.x torchtitan/distributed/expert_parallel.py ExpertParallel (torch all_to_all_single)"
_EP_DIMS = ("torchtitan 0.2.x config/job_config.py Parallelism.expert_parallel_degree / expert_tensor_parallel_degree; "
            "distributed/parallel_dims.py ('Currently we only support ETP=TP or ETP=1'; 0.2.1+ efsdp = "
            "dp_shard*cp*tp/(etp*ep)); models/<name>/infra/parallelize.py apply_moe_ep_tp (without EP the experts "
            "are sharded over TP)")
_MOE_PARALLELIZE = "torchtitan 0.2.x torchtitan/models/<name>/infra/parallelize.py; train.py (pipelining_fn)"


def _flavor_of(plan) -> MoEFlavor | None:
    """The plan's MoE flavor (None: dense, or a shape torchtitan has no flavor for)."""
    return moe_flavor_for(plan.model) if plan.model.moe is not None else None


def _moe_without(plan, what: str) -> bool:
    """The plan's MoE flavor lacks ``what``: "pipeline" (no pipelining_fn) or "cp" (FlexAttention)."""
    flavor = _flavor_of(plan)
    if flavor is None:
        return False
    return not flavor.pipeline if what == "pipeline" else flavor.attention != "sdpa"


def _etp_runs(plan) -> bool:
    """torchtitan's expert TP is tp without EP (apply_moe_ep_tp) and 1 or tp with it (parallel_dims.py)."""
    return plan.etp == plan.tp if plan.ep == 1 else plan.etp in (1, plan.tp)


def _ep_folds(plan) -> bool:
    """EP x ETP ranks come from the FSDP shard dimension x cp x tp (efsdp = dp_shard*cp*tp/(ep*etp))."""
    return ((plan.dp // plan.shard_replicas) * plan.cp * plan.tp) % (plan.ep * plan.etp) == 0
_GRAPHS = "torchtitan 0.3.0 configs.py training.disable_cuda_graphs; trainer.py _validate_cuda_graphs"

def _fsdp_applies(plan) -> bool:
    """Whether the ZeRO-3 implementation (``fsdp``) matters for ``plan``: ZeRO-3, or ZeRO-2 under a
    pipeline (``Option.applies``)."""
    return OPTIONS_BY_NAME["fsdp"].applies(plan)


TABLE = Table("torchtitan",
              source="torchtitan config dataclasses (0.1.0 config_manager.py, 0.2.x job_config.py, 0.3.0 configs.py)",
              releases="0.1.0-0.3.0 (torchtitan_fields_<family>.txt)", rows=(
    Row("tp", NUMBER, (("parallelism.tensor_parallel_degree", 0),), source="parallelism.tensor_parallel_degree"),
    # Expert parallelism of the MoE flavors (MOE_FLAVORS), written even at 1: etp defaults to 1, not tp.
    Row("ep", NUMBER, (("parallelism.expert_parallel_degree", 0),), releases="0.2.0-0.2.2", source=_EP_DIMS,
        when=lambda plan: plan.is_moe),
    Row("ep", 1, (), default=True, source="dense models: no experts", when=lambda plan: not plan.is_moe),
    Row("etp", NUMBER, (("parallelism.expert_tensor_parallel_degree", 0),), releases="0.2.0-0.2.2", source=_EP_DIMS,
        when=lambda plan: plan.is_moe),
    Row("etp", 1, (), default=True, source="dense models: no experts", when=lambda plan: not plan.is_moe),
    Row("sequence_parallel", False, (("parallelism.enable_sequence_parallel", False),),
        source="parallelism.enable_sequence_parallel (default true)", releases="0.3.0 (0.1, 0.2: no such field)"),
    Row("sequence_parallel", True, (), default=True, source="parallelism.enable_sequence_parallel (default true)"),
    Row("zero", 3, (("parallelism.fsdp_reshard_after_forward", "always"),), source=_FSDP),
    Row("zero", 2, (("parallelism.fsdp_reshard_after_forward", "never"),), source=_FSDP),
    Row("zero", 0, (("parallelism.data_parallel_shard_degree", 1),), source="replication (DDP / FSDP on a shard-1 mesh)"),
    Row("tp_comm_overlap", True, (("compile.enable_async_tensor_parallel", True),), releases="0.3.0",
        source="compile.enable_async_tensor_parallel (0.3) / parallelism.enable_async_tensor_parallel (0.1, 0.2)"),
    Row("tp_comm_overlap", False, (), default=True, source="async TP off by default"),
    Row("tp_overlap_kind", "asynctp", (), default=True, source="torch/_inductor/fx_passes/micro_pipeline_tp.py"),
    Row("tp_overlap_kind", "userbuffers", (), source="moot without TP overlap (refused with it)"),
    Row("kernels", "fused", (("compile.enable", True),), releases="0.2.0-0.3.0",
        source="compile.enable (0.2, 0.3) / training.compile (0.1)"),
    Row("kernels", "eager", (), default=True, source="no torch.compile: eager PyTorch operators"),
    Row("recompute", "none", (("activation_checkpoint.mode", "none"),), source=_AC),
    Row("recompute", "full", (("activation_checkpoint.mode", "full"),), source=_AC),
    Row("precision", "fp8", (("model.converters", ["float8"]),), source="torchao Float8Linear (tensorwise)"),
    Row("precision", "bf16", (), default=True, source="training.mixed_precision_param bfloat16"),
    Row("loss", "eager", (), default=True, source="torchtitan train.py: F.cross_entropy(pred.flatten(0, 1).float(), ...)"),
    Row("attention", "flash", (), default=True, source="torchtitan models/attention.py: F.scaled_dot_product_attention"),
    Row("grad_dtype", "fp32", (), default=True, source="training.mixed_precision_reduce: float32 only"),
    Row("dp_comm_overlap", True, (), default=True, source=_FSDP + " (prefetch, overlapped reduce-scatter)"),
    Row("nccl_ub", False, (), default=True, source=_FSDP + " (collectives on PyTorch-allocated buffers)"),
    Row("tp_overlap_rs_ring", False, (), default=True, source="TP overlap is AsyncTP, not TransformerEngine userbuffers"),
    Row("zero3_gather", "prefetch", (), default=True, source=_FSDP),
    Row("grad_reduce", "reduce_scatter", (), default=True, source=_FSDP + " (reduce-scatter; no optimizer-only sharding)"),
    Row("optimizer_states", "fp32", (), default=True,
        source=_FSDP + " (FP32 sharded parameters; AdamW moments in their dtype)"),
    # EP exchange: the token counts, then the tokens, by all_to_all_single (host sync on the splits), one
    # copy per routed (token, expert) pair, as Megatron-Core's alltoall dispatcher (costmodel.expert_parallel).
    Row("moe_dispatcher", "alltoall", (), default=True, source=_EP),
    Row("ep_comm_overlap", False, (), default=True, source=_EP + " (the all-to-alls block the MoE layer)"),
    # MoE expert GEMMs: torchtitan's MoE runs torch._grouped_mm (one launch; models/moe use_grouped_mm,
    # default True); the exported llama3 flavors are dense, so the loop is moot there (refused for MoE).
    Row("moe_grouped_gemm", "fused", (), default=True, source="torchtitan models/moe/moe.py: torch._grouped_mm"),
    Row("moe_grouped_gemm", "loop", (), source="moot for the dense llama3 flavors (refused for an MoE plan)"),
    # torchtitan's MoE routes token-choice top-k without a capacity (dropless, no padding).
    Row("moe_capacity_factor", 0.0, (), default=True, source="torchtitan models/moe/moe.py (dropless routing)"),
    Row("moe_pad_to_capacity", False, (), default=True, source="torchtitan models/moe/moe.py (dropless routing)"),
    # Pipeline sends: torch.distributed.pipelining sends each stage's output tensor whole from every rank.
    Row("p2p_scatter_gather", False, (), default=True, source="torch/distributed/pipelining/stage.py (whole tensors)"),
    Row("p2p_scatter_gather", True, (), source="moot without a pipeline, at tp 1 or with SP (refused where it applies)"),
    # torch.distributed.pipelining's interleaved schedules post their sends and receives asynchronously
    # (schedules.py: the sends of one action are waited on only before the buffers are reused).
    Row("p2p_comm_overlap", True, (), default=True, source="torch/distributed/pipelining/schedules.py"),
    Row("p2p_comm_overlap", False, (), source="moot without an interleaved pipeline (refused where it applies)"),
    # Context parallelism (PyTorch context_parallel SDPA): parallelism.context_parallel_rotate_method
    # "allgather" (default: K/V all-gathered) or "alltoall" (K/V shards rotated round the ring, priced as
    # p2p); the field is in 0.1.0-0.2.2 only (0.3.0 keeps PyTorch's default, allgather).
    Row("cp_comm_type", "allgather", (), default=True, source=_CP + " (default allgather)"),
    Row("cp_comm_type", "allgather", (("parallelism.context_parallel_rotate_method", "allgather"),), write=False,
        releases="0.1.0-0.2.2", source=_CP),
    Row("cp_comm_type", "p2p", (("parallelism.context_parallel_rotate_method", "alltoall"),), releases="0.1.0-0.2.2",
        when=lambda plan: plan.cp > 1, source=_CP + " (alltoall: the ring rotation)"),
    Row("cp_comm_type", "p2p", (), when=lambda plan: plan.cp == 1, source="moot without context parallelism"),
    # FP8: torchao Float8Linear with tensorwise dynamic scaling, the amax of the tensor itself (float8.recipe_name
    # None or "tensorwise"): the current recipe; the config's other recipes are rowwise (not priced).
    Row("fp8_recipe", "current", (), default=True, source=_FLOAT8),
    # MXFP8 (Blackwell: 1x32 blocks, E8M0 scales): the MX converters, 0.2.x (0.1.0 has an older [mx] section).
    Row("fp8_recipe", "mxfp8", (("quantize.linear.mx.recipe_name", "mxfp8_cublas"),), releases="0.2.0-0.2.2",
        when=lambda plan: plan.precision == "fp8", source=_MX),
    *(Row("fp8_recipe", r, (), when=lambda plan: plan.precision != "fp8", source="moot without FP8")
      for r in ("delayed", "blockwise", "mxfp8", "nvfp4")),
    # FP8 parameters: torchao keeps BF16 parameters (float8 all-gather casts a shard per gather, not a parameter).
    Row("fp8_param_gather", False, (), default=True, source=_FLOAT8 + " (the parameters stay high precision)"),
    Row("fp8_param_gather", True, (), when=lambda plan: plan.precision != "fp8", source="moot without FP8"),
    # CUDA graphs: 0.3.0 captures the forward+backward step unless training.disable_cuda_graphs (and
    # refuses them with PP); 0.1, 0.2 have no capture. export/torchtitan.py writes and checks it per release.
    Row("cuda_graphs", False, (("training.disable_cuda_graphs", True),), releases="0.3.0", source=_GRAPHS),
    Row("cuda_graphs", True, (), releases="0.3.0 (captured by default; pp = 1)", source=_GRAPHS),
    Row("cpu_offload_layers", None, (), default=True, source="no activation offload to host memory"),
    # ZeRO-3 flavour: torchtitan shards with FSDP2 (fully_shard); moot below ZeRO-3.
    Row("fsdp", "fsdp2", (), default=True, source=_FSDP),
    *(Row("fsdp", f, (), when=lambda plan: not _fsdp_applies(plan),
          source="moot below ZeRO-3 (and for ZeRO-2 without a pipeline)") for f in ("flat", "megatron")),
    # Micro-batch gradients: FSDP2 adds each reduce-scattered shard into the sharded gradient; a pipeline
    # stage accumulates unsharded gradients through autograd until its last micro-batch.
    Row("grad_accum_pass", "fused", (), when=lambda plan: plan.grad_accum == 1,
        source="moot with one micro-batch a step (autograd adds nothing)"),
    Row("grad_accum_pass", "autograd", (), default=True,
        source="torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce (sharded_param.grad._local_tensor "
               "+= new_sharded_grad); torch/distributed/pipelining/stage.py backward_maybe_with_nosync"),
), elsewhere=(
    *((o, "export/torchtitan.py _dp_settings / _parallel_settings (parallelism.*_degree; dp_shard as replicate x "
          "shard); launch/torchtitan.py reads them back") for o in ("pp", "dp", "cp", "vpp", "dp_shard")),
    *((o, "export/torchtitan.py _batch_settings (training.local_batch_size, global_batch_size, seq_len)")
      for o in ("mbs", "gbs", "seq_len")),
    *((o, "activation_checkpoint.mode / selective_ac_option (PER_OP_SAC_SHARE), written with the recompute row; "
          "partial or per-module recompute is refused by export/torchtitan.py check")
      for o in ("recompute_layers", "recompute_share", "recompute_modules")),
    *((o, "export/torchtitan.py pipeline split (first/last-stage weights, stage_split)")
      for o in ("pp_first_layers", "pp_last_layers")),
    ("launch_blocking", "an environment variable of the launch (CUDA_LAUNCH_BLOCKING=1), no torchtitan setting: a reader takes it from planner's command line"),
), refusals=(
    Refusal("zero", (1,), "torchtitan_no_zero1", "zero=1: torchtitan shards with FSDP2 (ZeRO-3, or ZeRO-2 with "
            "fsdp_reshard_after_forward never) or replicates (ZeRO-0); it has no optimizer-only sharding: price with "
            "--zero 0, 2 or 3", _FSDP),
    Refusal("loss", ("unfused", "fused"), "torchtitan_loss", "torchtitan computes the loss with F.cross_entropy on FP32 "
            "logits outside the compiled blocks: price with --loss eager (or --framework torchtitan-0.2)",
            "torchtitan train.py"),
    Refusal("attention", ("flash3", "unfused"), "torchtitan_attention", "torchtitan runs SDPA (FlashAttention-2 "
            "class): price with --attention flash (or --framework torchtitan-0.2)", "torchtitan models/attention.py"),
    Refusal("grad_dtype", ("bf16",), "torchtitan_grad_dtype", "grad_dtype bf16: torchtitan's FSDP2 reduces gradients "
            "in float32 (training.mixed_precision_reduce accepts only float32): price with --grad-dtype fp32",
            "torchtitan config: training.mixed_precision_reduce"),
    Refusal("dp_comm_overlap", (False,), "torchtitan_dp_overlap", "dp_comm_overlap off: FSDP2 always prefetches its "
            "all-gathers and overlaps its reduce-scatters with the backward", _FSDP),
    Refusal("grad_accum_pass", ("cast_add",), "torchtitan_grad_accum_pass", "grad_accum_pass cast_add prices "
            "DeepSpeed's BF16_Optimizer; torchtitan accumulates micro-batch gradients through autograd: price with "
            "--grad-accum-pass autograd (or --framework torchtitan-0.2)",
            "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py; torch/distributed/pipelining/stage.py"),
    Refusal("grad_accum_pass", ("fused",), "torchtitan_grad_accum_pass", "grad_accum_pass fused prices "
            "Megatron's accumulation inside the weight-gradient GEMM; torchtitan accumulates micro-batch gradients "
            "through autograd (FSDP2 on its shards, a pipeline stage on whole gradients): price with "
            "--grad-accum-pass autograd (or --framework torchtitan-0.2)",
            "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py; torch/distributed/pipelining/stage.py",
            when=lambda plan: plan.grad_accum > 1),
    Refusal("optimizer_states", ("remainders", "bf16"), "torchtitan_optimizer_states", "optimizer_states remainders / "
            "bf16 price NeMo 1's Apex distributed_fused_adam; torchtitan's AdamW updates FP32 sharded parameters with "
            "FP32 moments: price with --optimizer-states fp32", _FSDP),
    Refusal("grad_reduce", ("all_reduce", "all_reduce_fp32"), "torchtitan_grad_reduce", "grad_reduce all_reduce / "
            "all_reduce_fp32 price a ZeRO-1 that all-reduces the whole gradient (DeepSpeed's BF16_Optimizer, Aleph "
            "Alpha's scaling); torchtitan has no ZeRO-1 and FSDP2 reduce-scatters: price with --grad-reduce "
            "reduce_scatter", _FSDP),
    Refusal("zero3_gather", ("blocking", "post"), "torchtitan_zero3_gather", "zero3_gather blocking / post price "
            "DeepSpeed 2021's per-tensor gathers and FSDP1's BACKWARD_POST; FSDP2 prefetches", _FSDP),
    Refusal("tp_overlap_kind", ("userbuffers",), "torchtitan_tp_overlap_kind", "TP overlap priced as TransformerEngine "
            "userbuffers; torchtitan's TP overlap is PyTorch async TP, which hides only the forward passes' "
            "collectives: price with --tp-overlap-kind asynctp (or --framework torchtitan-0.2)",
            "torch/_inductor/fx_passes/micro_pipeline_tp.py", when=lambda plan: bool(plan.tp_comm_overlap)),
    Refusal("moe_grouped_gemm", ("loop",), "torchtitan_grouped_gemm", "moe_grouped_gemm loop prices TransformerEngine's "
            "per-expert GEMMs; torchtitan's MoE runs torch._grouped_mm, one launch: price with --moe-grouped-gemm fused",
            "torchtitan models/moe/moe.py", when=lambda plan: plan.is_moe),
    Refusal("moe_capacity_factor", Above(0), "torchtitan_token_drop", "a capacity factor prices token drop; "
            "torchtitan's MoE is dropless: price with --moe-capacity-factor 0", "torchtitan models/moe/moe.py"),
    Refusal("moe_pad_to_capacity", (True,), "torchtitan_token_drop", "padding experts to capacity prices token drop; "
            "torchtitan's MoE is dropless: price with --moe-pad-to-capacity false", "torchtitan models/moe/moe.py"),
    Refusal("p2p_scatter_gather", (True,), "torchtitan_p2p_scatter_gather", "p2p_scatter_gather on prices pipeline "
            "sends split over the TP ranks (Megatron-LM before Megatron-Core, DeepSpeed); torch.distributed.pipelining "
            "sends whole tensors: price with --p2p-scatter-gather false", "torch/distributed/pipelining/stage.py",
            when=lambda plan: plan.tp > 1 and plan.pp > 1 and not plan.sp),
    Refusal("p2p_comm_overlap", (False,), "torchtitan_p2p_comm_overlap", "p2p_comm_overlap off prices blocking "
            "steady-state pipeline sends (Megatron-LM before May 2023); torch.distributed.pipelining posts them "
            "asynchronously: price with --p2p-comm-overlap true", "torch/distributed/pipelining/schedules.py",
            when=lambda plan: plan.pp > 1 and plan.vpp > 1),
    Refusal("cp_comm_type", ("a2a", "a2a+p2p"), "torchtitan_cp_comm_type", "torchtitan's context parallelism "
            "splits the sequence and exchanges K/V shards (allgather, or the alltoall ring rotation = p2p); it has no "
            "Ulysses head all-to-all: price with --cp-comm-type p2p or allgather", _CP),
    Refusal("fp8_recipe", ("delayed", "blockwise", "nvfp4"), "torchtitan_fp8_recipe", "torchtitan's float8 converter "
            "scales tensorwise from the tensor's own amax (torchao Float8Linear; its other float8 recipes are rowwise) "
            "and its MX converters run MXFP8: price with --fp8-recipe current (or mxfp8 on Blackwell)",
            _FLOAT8 + "; " + _MX, when=lambda plan: plan.precision == "fp8"),
    Refusal("ep", Above(0), "torchtitan_moe_pipeline", "pipeline parallelism on torchtitan's qwen3 or gpt_oss: their "
            "TrainSpec registers no pipelining_fn and train.py raises 'Pipeline Parallel is enabled but ... does not "
            "support pipelining': price with --pp 1", _MOE_PARALLELIZE,
            when=lambda plan: plan.pp > 1 and _moe_without(plan, "pipeline")),
    Refusal("ep", Above(0), "torchtitan_moe_cp", "context parallelism on torchtitan's deepseek_v3 or gpt_oss: they run "
            "FlexAttention, and their parallelize raises for CP with it: price with --cp 1", _MOE_PARALLELIZE,
            when=lambda plan: plan.cp > 1 and _moe_without(plan, "cp")),
    Refusal("ep", Above(1), "torchtitan_ep_replicate", "expert parallelism with zero 0: torchtitan's EP borrows ranks "
            "of the FSDP shard dimension (data_parallel_shard_degree), which replication has not: price with --zero 2 "
            "or 3", _EP_DIMS, when=lambda plan: plan.is_moe and plan.zero == 0),
    Refusal("ep", Above(1), "torchtitan_ep_mesh", "ep*etp must divide data_parallel_shard_degree*cp*tp: torchtitan's "
            "experts take their EP ranks from the FSDP shard dimension (with HSDP, not from the replicas)", _EP_DIMS,
            when=lambda plan: plan.is_moe and not _ep_folds(plan)),
    Refusal("etp", Above(0), "torchtitan_etp", "torchtitan's expert tensor parallelism is tp without EP (the experts "
            "are sharded over the TP ranks) and 1 or tp with it ('Currently we only support ETP=TP or ETP=1'): price "
            "with --etp equal to --tp, or --etp 1 with --ep > 1", _EP_DIMS,
            when=lambda plan: plan.is_moe and not _etp_runs(plan)),
    Refusal("precision", ("fp8",), "torchtitan_moe_float8", "tensorwise fp8 on an MoE model: torchtitan's float8 "
            "converter swaps nn.Linear only, so the expert grouped GEMMs stay BF16 (Float8GroupedMM is a rowwise "
            "prototype) while planner prices them in FP8: price with --precision bf16, or --fp8-recipe mxfp8 on "
            "Blackwell (MXGroupedMM)", "torchtitan 0.2.x components/quantization/float8.py",
            when=lambda plan: plan.is_moe and plan.fp8_recipe != "mxfp8"),
    Refusal("fp8_recipe", ("mxfp8",), "torchtitan_mxfp8_tp", "mxfp8 with tensor parallelism: torchtitan's MXLinear "
            "converter asserts 'TP not yet supported with torch.compile for mxfp8', and fp8 runs compiled: price with "
            "--tp 1", _MX, when=lambda plan: plan.precision == "fp8" and plan.tp > 1),
    Refusal("tp_comm_overlap", (True,), "torchtitan_moe_async_tp", "TP overlap on torchtitan's gpt_oss: its "
            "parallelize applies TP with enable_async_tp=False: price without --tp-comm-overlap", _MOE_PARALLELIZE,
            when=lambda plan: plan.tp > 1 and getattr(_flavor_of(plan), "name", "") == "gpt_oss"),
    Refusal("moe_dispatcher", ("deepep", "allgather", "hybridep"), "torchtitan_moe_dispatcher", "torchtitan's expert "
            "parallelism exchanges tokens with torch all_to_all_single (DeepEP is an opt-in backend of 0.2.1+ "
            "deepseek_v3 that the export does not write): price with --moe-dispatcher alltoall", _EP,
            when=lambda plan: plan.is_moe),
    Refusal("ep_comm_overlap", (True,), "torchtitan_ep_comm_overlap", "ep_comm_overlap prices Megatron-Core's "
            "batch-level EP overlap; torchtitan's all-to-alls block the MoE layer (its only EP overlap is the "
            "DualPipeV schedule of 0.2.1+, which the export does not write): price with --ep-comm-overlap false",
            _EP, when=lambda plan: plan.is_moe),
    Refusal("fp8_param_gather", (True,), "torchtitan_fp8_param_gather", "fp8_param_gather: torchtitan's float8 and MX "
            "converters keep BF16 parameters (torchao Float8Linear / MXLinear; float8 all-gather casts each shard as "
            "it is gathered): price with --fp8-param-gather false", _FLOAT8 + "; " + _MX,
            when=lambda plan: plan.precision == "fp8"),
    Refusal("cpu_offload_layers", Above(0), "torchtitan_cpu_offload", "cpu_offload_layers: torchtitan offloads no "
            "activations to host memory (training.enable_cpu_offload moves FSDP parameters and optimizer states, "
            "which planner does not price)", "torchtitan config Training.enable_cpu_offload"),
    Refusal("tp_overlap_rs_ring", (True,), "torchtitan_tp_overlap_rs_ring", "tp_overlap_rs_ring: torchtitan's TP overlap "
            "is AsyncTP (torch.compile micro-pipeline TP), not TransformerEngine userbuffers, whose reduce-scatter method "
            "this sets: price with --tp-overlap-rs-ring false", "torch/_inductor/fx_passes/micro_pipeline_tp.py"),
    Refusal("nccl_ub", (True,), "torchtitan_nccl_ub", "nccl_ub: torchtitan's FSDP2 does not register its buffers as "
            "NCCL user buffers (Megatron-Core's --use-nccl-ub): price with --nccl-ub false", _FSDP),
    Refusal("fsdp", ("flat", "megatron"), "torchtitan_fsdp", "torchtitan's ZeRO-3 is FSDP2 (per-parameter DTensor "
            "shards), and so is its ZeRO-2, which under a pipeline keeps gradients whole until the last micro-batch "
            "(torch/distributed/pipelining/stage.py backward_maybe_with_nosync): price with --fsdp fsdp2", _FSDP,
            when=lambda plan: _fsdp_applies(plan)),
    Refusal("recompute", ("selective",), "torchtitan_selective", "recompute selective prices Megatron's core-attention "
            "recompute; torchtitan's selective AC is per-op SAC, priced as full recompute of half the layers: price with "
            "--framework torchtitan-0.2 --recompute selective (or --recompute full --recompute-layers <half a stage>)",
            _AC),
))
"""planner option <-> torchtitan setting. Degrees over data parallelism (replicate x shard), the
pipeline split and per-op SAC depend on more than one option: ``planner/export/torchtitan.py``
writes them and ``planner/launch/torchtitan.py`` reads them, with ``stage_split`` and
``PER_OP_SAC_SHARE`` from here."""
