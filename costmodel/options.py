"""Every layout option, declared once: ``Layout``'s fields.

A field of ``Layout`` is declared with ``option(...)``, which records what the rest of planner
derives from it: its kind and allowed values, default, unit, one-line help, the mechanism's
source, the rules that constrain it (``search.rules``), which commands take it and how the
search treats it. From that one declaration come

* ``LayoutBatch``'s columns (same names; enums as codes: the index in ``choices``),
* the typer options of ``planner evaluate`` / ``export`` / ``search`` (``planner.cli.options``),
* the CSV / JSON keys of a layout (``Layout.to_dict``), the export plan (``planner.export``) and
  the settings a runs file may state (``planner.validate``),
* input checking: ``parse_option`` turns what a user typed (or a JSON value) into a value,
  with one-line errors that name the option, the value and what is allowed.

Adding an option: one field here (with its docstring), its mechanism in ``costmodel/``, and
where it applies its export mapping, framework profile and report label (ARCHITECTURE.md).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Optional

# Ranges: the largest values a user may give (hardware_catalog.limits says why).
from hardware_catalog.limits import MAX_GBS, MAX_GPUS, MAX_LAYERS, MAX_SEQ_LEN, MAX_TOKENS_PER_BATCH

# Kinds: how a value is typed, stored in a LayoutBatch column, and checked.
INT = "int"
"""An integer (>= ``minimum``); column int64."""
OPTIONAL_INT = "optional_int"
"""An integer or None ("planner decides"); column int64 with 0 for None."""
CHOICE = "choice"
"""One of ``choices``; column int64 with the index as code."""
FLAG = "flag"
"""True or False; column bool."""
AUTO_FLAG = "auto_flag"
"""True, False or None (automatic, see the field); column bool with the resolved value."""
MODULES = "modules"
"""A set of names from ``choices`` (None = ``default_modules``); column int64 bit mask."""
FLOAT = "float"
"""A real number (>= ``minimum``, <= ``maximum``); column float64."""

# Groups: what kind of decision an option is.
PARALLEL = "parallel"
"""How the GPUs are split (degrees, ZeRO)."""
BATCH = "batch"
"""The batch: micro-batch size, global batch, sequence length."""
PIPELINE = "pipeline"
"""How the layers sit on the pipeline stages."""
MEMORY = "memory"
"""Activation recomputation and precision: memory against time."""
IMPLEMENTATION = "implementation"
"""How the framework runs the layout (kernels, overlaps, dispatchers): the same layout is
faster under one framework than another. The search prices every candidate with them."""

# How the search treats an option.
SEARCHED = "searched"
"""Searched over a default domain unless the user pins it (``--tp 8``)."""
SETTING = "setting"
"""Fixed at what the user states and applied to every candidate where it applies."""
PROBLEM = "problem"
"""Part of the problem, not of the layout (the batch)."""
INTERNAL = "internal"
"""Not a search flag (searched in its own terms, e.g. recompute shares)."""

EVALUATE, EXPORT, SEARCH = "evaluate", "export", "search"
ALL_COMMANDS = (EVALUATE, EXPORT, SEARCH)

def _shown(value) -> str:
    text = f"{value:g}" if isinstance(value, float) else repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _bound_text(x) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e13 else f"{x:g}"


def range_text(integer: bool = True, minimum=None, maximum=None, above=None, below=None) -> str:
    """What a number must be, in words: "an integer from 1 to 1,048,576", "a number > 0 and
    <= 1,000"."""
    kind = "an integer" if integer else "a number"
    if minimum is not None and maximum is not None:
        return f"{kind} from {_bound_text(minimum)} to {_bound_text(maximum)}"
    parts = [f">= {_bound_text(minimum)}" if minimum is not None else "",
             f"> {_bound_text(above)}" if above is not None else "",
             f"<= {_bound_text(maximum)}" if maximum is not None else "",
             f"< {_bound_text(below)}" if below is not None else ""]
    parts = [p for p in parts if p]
    return f"{kind} " + " and ".join(parts) if parts else kind


def check_number(value, label: str, *, integer: bool = True, minimum=None, maximum=None, above=None, below=None):
    """``value`` (as typed or read from a file) checked to be a finite number (``integer``: a
    whole one) in range; returns it as int or float. Raises ``PlannerInputError`` with one line
    naming ``label``, the value and what is allowed."""
    from hardware_catalog.errors import PlannerInputError

    allowed = range_text(integer, minimum, maximum, above, below)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PlannerInputError(f"{label}={_shown(value)}: must be {allowed}")
    if not math.isfinite(value) or (integer and int(value) != value):
        raise PlannerInputError(f"{label}={_shown(value)}: must be {allowed}")
    value = int(value) if integer else float(value)
    low_ok = (minimum is None or value >= minimum) and (above is None or value > above)
    high_ok = (maximum is None or value <= maximum) and (below is None or value < below)
    if not (low_ok and high_ok):
        raise PlannerInputError(f"{label}={_shown(value)}: must be {allowed}")
    return value


@dataclass(frozen=True)
class Bound:
    """The range of a job-level number that is not a layout option (GPU count, tokens, price):
    declared once, checked by ``parse`` wherever the number enters (CLI, API, files)."""

    flag: str
    """How errors name it, e.g. ``--gpus``."""
    integer: bool = True
    minimum: Optional[float] = None
    """Smallest allowed value (inclusive)."""
    maximum: Optional[float] = None
    """Largest allowed value (inclusive)."""
    above: Optional[float] = None
    """Exclusive lower bound (a price must be > 0)."""
    below: Optional[float] = None
    """Exclusive upper bound (a fraction must be < 1)."""

    def parse(self, value, where: str = ""):
        """``value`` checked (``check_number``); errors name ``where`` or the flag."""
        return check_number(value, where or self.flag, integer=self.integer, minimum=self.minimum,
                            maximum=self.maximum, above=self.above, below=self.below)

    def allowed(self) -> str:
        return range_text(self.integer, self.minimum, self.maximum, self.above, self.below)


GPUS = Bound("--gpus", minimum=1, maximum=MAX_GPUS)
"""GPUs in the job."""
TOKENS_PER_BATCH = Bound("--tokens-per-batch", minimum=1, maximum=MAX_TOKENS_PER_BATCH)
"""Global batch in tokens."""


@dataclass(frozen=True)
class Option:
    """What planner knows about one layout option (the metadata of a ``Layout`` field)."""

    name: str
    """Field name: also the LayoutBatch column, the JSON / CSV key and (dashed) the CLI flag."""
    kind: str
    """INT, OPTIONAL_INT, CHOICE, FLAG, AUTO_FLAG, MODULES or FLOAT."""
    default: Any
    """``Layout``'s default."""
    help: str
    """One line for ``--help``."""
    group: str
    """PARALLEL, BATCH, PIPELINE, MEMORY or IMPLEMENTATION."""
    choices: tuple = ()
    """Allowed values (CHOICE: the code is the index; MODULES: bit i is choices[i])."""
    unit: str = ""
    """Unit of the value, where it has one."""
    minimum: Optional[float] = None
    """Smallest value a user may type (INT / OPTIONAL_INT / FLOAT)."""
    maximum: Optional[float] = None
    """Largest value a user may type (INT / OPTIONAL_INT / FLOAT; see ``MAX_GPUS`` and friends)."""
    source: str = ""
    """Where the mechanism comes from (paper, framework file)."""
    rules: tuple = ()
    """Names of the rules in ``search.rules`` that constrain this option."""
    commands: tuple = ALL_COMMANDS
    """CLI commands that take it as a flag."""
    search: str = SEARCHED
    """SEARCHED, SETTING, PROBLEM or INTERNAL."""
    search_default: Any = None
    """Value ``planner search`` passes when the user gives none (None: searched)."""
    default_modules: tuple = ()
    """MODULES: what None means."""
    label: str = ""
    """How a one-line layout summary shows a value other than the default ("{value}" is
    replaced by it); empty: not shown."""
    phrase: str = ""
    """How a launch file's header names the setting the plan was priced with ("{value}"; a flag
    reads on / off); empty: not named."""
    phrase_when: str = "always"
    """When the header names it: "always", "set" (only when not the default) or "moe" (only
    for MoE models)."""
    recorded: bool = True
    """False for an internal column that records never show: it is resolved into a recorded
    option first (``recompute_share`` -> ``recompute_layers``, ``costmodel.record``)."""
    applies_with: str = ""
    """The layout the setting has an effect in, "" for every one: "zero3" (zero = 3), "fsdp" (zero = 3,
    or zero = 2 under a pipeline), "fp8" (precision fp8) or "flash3" (attention flash3). Elsewhere the cost model ignores it, so summaries and headers leave it out
    (``applies``)."""

    def applies(self, values) -> bool:
        """Whether the setting has an effect in the layout ``values`` (a dict or an object with
        the layout's attributes)."""
        get = values.get if isinstance(values, dict) else lambda k, d=None: getattr(values, k, d)
        if self.applies_with == "zero3":
            return get("zero", 1) == 3
        if self.applies_with == "fsdp":  # costmodel.data_parallel.Sharding.pipelined_fsdp
            return get("zero", 1) == 3 or (get("zero", 1) == 2 and get("pp", 1) > 1)
        if self.applies_with == "fp8":
            return get("precision", "bf16") == "fp8"
        if self.applies_with == "flash3":
            return get("attention", "flash") == "flash3"
        return True

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def column_dtype(self) -> str:
        if self.kind == FLOAT:
            return "float64"
        return "bool" if self.kind in (FLAG, AUTO_FLAG) else "int64"

    @property
    def default_code(self):
        """The column code of ``default`` (AUTO_FLAG: True, resolved per layout)."""
        if self.kind == AUTO_FLAG:
            return True
        return self.encode(self.default)

    def encode(self, value):
        """``Layout`` value -> LayoutBatch code (an unknown choice becomes -1, which the rules
        reject)."""
        if self.kind == CHOICE:
            return self.choices.index(value) if value in self.choices else -1
        if self.kind == OPTIONAL_INT:
            return int(value or 0)
        if self.kind in (FLAG, AUTO_FLAG):
            return bool(value)
        if self.kind == MODULES:
            names = self.default_modules if value is None else tuple(value)
            mask = 0
            for name in names:
                mask |= 1 << self.choices.index(name)
            return mask
        if self.kind == FLOAT:
            return float(value)
        return int(value)

    def decode(self, code):
        """LayoutBatch code -> ``Layout`` value (MODULES: None for the default set)."""
        if self.kind == CHOICE:
            return self.choices[int(code)]
        if self.kind == OPTIONAL_INT:
            return int(code) or None
        if self.kind in (FLAG, AUTO_FLAG):
            return bool(code)
        if self.kind == MODULES:
            names = tuple(n for i, n in enumerate(self.choices) if int(code) >> i & 1)
            return None if names == self.default_modules else names
        if self.kind == FLOAT:
            return float(code)
        return int(code)

    def parse(self, value, where: str = ""):
        """A value as typed or read from JSON -> a checked ``Layout`` value. Raises
        ``PlannerInputError`` with one line naming ``where`` (default: the CLI flag)."""
        from hardware_catalog.errors import PlannerInputError

        label = where or self.flag
        if value is None:
            if self.kind in (OPTIONAL_INT, AUTO_FLAG, MODULES):
                return None
            return self.default
        if self.kind in (INT, OPTIONAL_INT):
            return check_number(value, label, minimum=self.minimum, maximum=self.maximum)
        if self.kind == FLOAT:
            if isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    pass
            return check_number(value, label, integer=False, minimum=self.minimum, maximum=self.maximum)
        if self.kind == CHOICE:
            if value not in self.choices:
                raise PlannerInputError(f"{label}={value}: allowed {', '.join(map(str, self.choices))}")
            return value
        if self.kind in (FLAG, AUTO_FLAG):
            if not isinstance(value, bool) and type(value).__name__ != "bool_":
                raise PlannerInputError(f"{label}={value!r}: must be true or false")
            return bool(value)
        return parse_modules(self, value, label)


def parse_modules(opt: Option, value, label: str):
    """A MODULES value (comma-separated text or names) -> a tuple of known names."""
    from hardware_catalog.errors import PlannerInputError

    if isinstance(value, str):
        names = tuple(m.strip() for m in value.split(",") if m.strip())
    elif isinstance(value, (list, tuple)):
        names = tuple(value)
    else:
        raise PlannerInputError(f"{label}={value!r}: must be a list of module names")
    if not names:
        raise PlannerInputError(f"{label}={value!r}: name at least one of {', '.join(opt.choices)}")
    for name in names:
        if name not in opt.choices:
            raise PlannerInputError(f"{label}: unknown module {name!r} (allowed: {', '.join(opt.choices)})")
    return names


def option(default, help: str, *, kind: str = INT, group: str = PARALLEL, **meta):
    """A ``Layout`` field declared as an option (see ``Option`` for the metadata)."""
    return field(default=default, metadata={"option": dict(kind=kind, default=default, help=help, group=group, **meta)})


RECOMPUTE = ("none", "selective", "full")
"""Activation recomputation modes; codes 0, 1, 2."""
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act", "shared_experts", "moe")
"""Megatron-Core submodules selective recompute can cover (TransformerConfig.recompute_modules;
--recompute-modules). Bit i of the column is module i."""
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)
"""Megatron-Core's default for --recompute-granularity selective."""
PRECISIONS = ("bf16", "fp8")
"""Compute precisions; codes 0, 1. FP8 is TransformerEngine-style (linear-layer GEMMs in FP8,
attention and the rest in BF16)."""
ATTENTION = ("flash", "unfused", "flash3")
"""Attention kernels; codes 0, 1, 2."""
CUDNN_GENERATIONS = ("current", "2024")
"""cuDNN generations the native attention kernels are priced for; codes 0, 1."""
KERNELS = ("fused", "eager")
"""Elementwise kernels; codes 0, 1."""
LOSSES = ("unfused", "fused", "eager")
"""Cross-entropy implementations; codes 0, 1, 2."""
DISPATCHERS = ("alltoall", "deepep", "allgather", "hybridep")
"""MoE token dispatchers; codes 0-3 (new ones appended: earlier codes keep their meaning)."""
GROUPED_GEMMS = ("loop", "fused")
"""How the per-expert GEMMs of an MoE layer run; codes 0, 1."""
GRAD_DTYPES = ("fp32", "bf16")
"""Gradient buffer / data-parallel reduction dtypes; codes 0, 1."""
OPTIMIZER_STATES = ("fp32", "remainders", "bf16")
"""What Adam keeps per parameter beside the BF16 weight (costmodel.memory.OPTIMIZER_STATE_BYTES); codes 0-2."""
ZERO3_GATHERS = ("prefetch", "blocking", "post")
"""How ZeRO-3 fetches parameters; codes 0-2."""
GRAD_ACCUMS = ("fused", "autograd", "cast_add", "main_grad_copy")
"""How micro-batch gradients are accumulated (costmodel.grad_accumulation); codes 0-3."""
GRAD_REDUCES = ("reduce_scatter", "all_reduce", "all_reduce_fp32")
"""How ZeRO-1 reduces gradients across data parallel (costmodel.data_parallel); codes 0-2."""
CP_COMM_TYPES = ("p2p", "a2a", "allgather", "a2a+p2p")
"""How context-parallel attention communicates (Megatron --cp-comm-type); codes 0-3."""
TP_OVERLAP_KINDS = ("userbuffers", "asynctp")
"""What implements TP communication overlap; codes 0, 1."""
FP8_RECIPES = ("delayed", "current", "blockwise", "mxfp8", "nvfp4")
"""TransformerEngine low-precision recipes; codes 0-4 (costmodel.quantize). nvfp4 is TE's
NVFP4BlockScaling, which TE runs through the same autocast as its FP8 recipes: 4-bit GEMMs."""
FSDP_IMPLS = ("flat", "fsdp2", "megatron")
"""ZeRO-3 implementations; codes 0-2 (costmodel.data_parallel)."""

_EVAL_EXPORT = (EVALUATE, EXPORT)


@dataclass(frozen=True)
class Layout:
    """One parallel layout. Degrees multiply: tp * cp * pp * dp = GPUs (ep lives inside dp*cp)."""

    # ---------------------------------------------------------------- parallel degrees
    tp: int = option(1, "Tensor-parallel degree.", minimum=1, maximum=MAX_GPUS, unit="GPUs",
                     source="Shoeybi et al. 2019 (Megatron-LM), Sec. 3",
                     rules=("tp_divides_heads", "tp_within_scaleup_domain"))
    """Tensor-parallel degree (Megatron column/row split), inside the scale-up domain by default."""
    pp: int = option(1, "Pipeline-parallel stages.", minimum=1, maximum=MAX_LAYERS, unit="stages",
                     source="Narayanan et al. 2021, Sec. 2.2", rules=("pp_stage_split", "vpp_needs_pipeline"))
    """Pipeline-parallel stages."""
    dp: int = option(1, "Data-parallel replicas (evaluate derives it: gpus / (tp*pp*cp)).", minimum=1, maximum=MAX_GPUS, unit="GPUs",
                     commands=(SEARCH,), source="Rajbhandari et al. 2020 (ZeRO)",
                     rules=("degrees_multiply_to_gpus", "gbs_divisible_by_dp_mbs"))
    """Data-parallel replicas (with ZeRO, the sharding group too)."""
    cp: int = option(1, "Context-parallel degree.", minimum=1, maximum=MAX_GPUS, unit="GPUs",
                     source="Liu et al. 2023 (ring attention); Megatron-Core context parallel docs",
                     rules=("cp_divides_seq",))
    """Context-parallel degree: the sequence is split over cp ranks (ring attention)."""
    ep: int = option(1, "Expert-parallel degree (MoE).", minimum=1, maximum=MAX_GPUS, unit="GPUs",
                     source="Lepikhin et al. 2020 (GShard); Megatron-Core MoE parallel folding",
                     rules=("ep_divides_experts", "ep_divides_dp_cp"))
    """Expert-parallel degree for MoE layers, carved out of dp * cp."""
    etp: int = option(1, "Expert tensor-parallel degree (MoE).", minimum=1, maximum=MAX_GPUS, unit="GPUs",
                      source="Megatron-Core MoE parallel folding", rules=("etp_divides_expert_ffn", "ep_divides_dp_cp"))
    """Expert tensor-parallel degree (MoE expert weights split over etp ranks)."""
    vpp: int = option(1, "Virtual pipeline stages per GPU (interleaved 1F1B).", minimum=1, maximum=MAX_LAYERS, group=PIPELINE,
                      source="Narayanan et al. 2021, Sec. 2.2.2",
                      rules=("vpp_divides_stage_layers", "vpp_needs_pipeline", "interleaved_microbatches_divisible_by_pp"))
    """Virtual pipeline stages per GPU (interleaved 1F1B); 1 = plain 1F1B."""
    zero: int = option(1, "ZeRO stage 0-3 (1 = Megatron distributed optimizer, 3 = FSDP).", minimum=0, maximum=3,
                       source="Rajbhandari et al. 2020 (ZeRO), Sec. 5", rules=("zero_stage_valid",))
    """ZeRO stage 0-3: 0 plain DDP, 1 optimizer states sharded (Megatron distributed optimizer),
    2 + gradients, 3 + parameters (FSDP). With pipeline parallelism only FSDP2 runs stages 2-3,
    and under torch.distributed.pipelining it keeps gradients unsharded for the whole step:
    priced with ZeRO-1's footprint (ZeRO-3 re-gathers weights for each backward)."""

    dp_shard: Optional[int] = option(
        None, "ZeRO sharding group (HSDP): shard model states over this many data-parallel ranks and replicate them "
        "over dp/dp_shard groups (torchtitan data_parallel_shard_degree, Megatron --num-distributed-optimizer-instances "
        "dp/dp_shard, DeepSpeed MiCS mics_shard_size). Default: all data-parallel ranks. Applied where it divides dp.",
        kind=OPTIONAL_INT, minimum=1, maximum=MAX_GPUS, unit="ranks", search=SETTING, group=IMPLEMENTATION,
        source="Zhang et al. 2022 (MiCS), Sec. 3; PyTorch FSDP HYBRID_SHARD; Megatron-Core param_and_grad_buffer.py "
               "(reduce-scatter inside a distributed-optimizer instance, then all-reduce across instances)",
        rules=("dp_shard_divides_dp",))
    """Hybrid sharding: ZeRO shards states over ``dp_shard`` consecutive data-parallel ranks (times
    cp) and keeps dp/dp_shard replicas. Gradients are reduce-scattered inside a shard group and
    the shards all-reduced across the replicas; weights are all-gathered inside the group only.
    None = shard over every data-parallel rank (plain ZeRO / FSDP). Needs zero >= 1."""

    # ---------------------------------------------------------------- batch
    mbs: int = option(1, "Micro-batch size (sequences).", minimum=1, maximum=MAX_GBS, group=BATCH, unit="sequences",
                      rules=("mbs_positive", "gbs_divisible_by_dp_mbs"))
    """Micro-batch size, sequences."""
    gbs: int = option(1, "Global batch (sequences). Default: the model's tokens per batch / seq-len.", minimum=1,
                      maximum=MAX_GBS,
                      group=BATCH, unit="sequences", search=PROBLEM, rules=("gbs_divisible_by_dp_mbs",))
    """Global batch size, sequences per optimizer step."""
    seq_len: int = option(4096, "Sequence length. Default: the model preset's.", minimum=1, maximum=MAX_SEQ_LEN, group=BATCH,
                          unit="tokens", search=PROBLEM, rules=("cp_divides_seq",))
    """Tokens per sequence."""

    # ---------------------------------------------------------------- memory: recompute, precision
    recompute: str = option("selective", "Activation recompute: none | selective | full.", kind=CHOICE,
                            group=MEMORY, choices=RECOMPUTE, source="Korthikanti et al. 2022, Sec. 4-5",
                            rules=("recompute_valid",))
    """Activation recomputation: none, selective (core attention), full (whole layer)."""
    recompute_layers: Optional[int] = option(
        None, "With --recompute full: layers per pipeline stage to recompute (Megatron block method: the first "
        "recompute_layers/vpp layers of each model chunk); a multiple of --vpp, at most the stage's layers. "
        "Default: all.", kind=OPTIONAL_INT, group=MEMORY, minimum=1, maximum=MAX_LAYERS, unit="layers per stage",
        commands=_EVAL_EXPORT, search=INTERNAL,
        source="Megatron-LM --recompute-method block --recompute-num-layers (megatron/training/arguments.py; counted "
        "per model chunk in megatron/core/transformer/transformer_block.py _checkpointed_forward)",
        rules=("partial_recompute_needs_full", "recompute_layers_fit_stage"))
    """With recompute=full: layers per pipeline stage whose forward runs again in backward; the
    others keep their activations. None = every layer. One unit everywhere (flag, table, JSON,
    CSV, export header). Megatron's block method (--recompute-method block) recomputes the first
    --recompute-num-layers layers of each *model chunk*: arguments.py says "within each pipeline
    stage", but the loop in transformer_block.py ``_checkpointed_forward`` runs over one
    TransformerBlock, which holds one virtual-pipeline chunk. With vpp chunks per stage the
    export writes --recompute-num-layers = recompute_layers / vpp, so the value is a multiple of
    vpp and at most the largest stage's layers (rule recompute_layers_fit_stage); a chunk with
    fewer layers recomputes all of them. The search explores shares of a stage instead
    (``recompute_share``); records resolve them to layers per stage."""
    recompute_share: Optional[int] = option(
        None, "Internal: with recompute full, q quarters of each stage's layers (the shares the search explores).",
        kind=OPTIONAL_INT, group=MEMORY, minimum=1, maximum=3, unit="quarters of a middle stage's model chunk",
        commands=(), search=INTERNAL, recorded=False,
        source="Megatron-LM --recompute-method block --recompute-num-layers (a number of layers per model chunk)",
        rules=("partial_recompute_needs_full",))
    """With recompute=full: recompute round(q/4 x the layers of a middle stage's model chunk)
    layers (at least 1) of every chunk, q = 1..3; None = not a share (``recompute_layers``
    decides). Not a flag: the search's partial-recompute candidates (``search.space``) and
    framework profiles that state a share (torchtitan per-op SAC) set it. Records resolve it once
    to ``recompute_layers`` in layers per stage (``costmodel.record.recompute_layers_per_stage``),
    the unit evaluate and export take back."""
    recompute_modules: Optional[tuple] = option(
        None, "With --recompute selective: Megatron-Core submodules to recompute, comma-separated "
        "(core_attn, layernorm, mla_up_proj, mlp, moe_act, shared_experts, moe). Default: core_attn.",
        kind=MODULES, group=MEMORY, choices=RECOMPUTE_MODULES, default_modules=DEFAULT_RECOMPUTE_MODULES,
        search=SETTING, source="Megatron-Core TransformerConfig.recompute_modules",
        rules=("recompute_modules_need_selective", "recompute_modules_exist"))
    """With recompute=selective: the submodules recomputed in every layer (Megatron-Core
    --recompute-modules, names in ``RECOMPUTE_MODULES``); None = ("core_attn",), Megatron's
    default. core_attn, mlp, moe and shared_experts keep only their input; layernorm,
    mla_up_proj and moe_act drop their output (the next GEMM's saved input) and run again
    before backward needs it."""
    sequence_parallel: Optional[bool] = option(
        None, "Megatron sequence parallelism. Default: on when tp > 1.", kind=AUTO_FLAG,
        source="Korthikanti et al. 2022, Sec. 4.2.2", rules=("sequence_parallel_needs_tp",))
    """Megatron sequence parallelism for the non-TP regions; None = on whenever tp > 1."""
    precision: str = option("bf16", "bf16 | fp8 (TransformerEngine GEMMs; needs a GPU with FP8).", kind=CHOICE,
                            group=MEMORY, choices=PRECISIONS, search_default="bf16",
                            source="Micikevicius et al. 2022 (FP8 formats); TransformerEngine",
                            rules=("precision_supported",))
    """bf16, or fp8 (TransformerEngine: GEMMs in FP8)."""

    # ---------------------------------------------------------------- implementation
    attention: str = option(
        "flash", "Attention kernel: flash (FlashAttention-2, PyTorch SDPA) | flash3 (FlashAttention-3 / cuDNN "
        "via TransformerEngine on Hopper+) | unfused.", kind=CHOICE, group=IMPLEMENTATION, choices=ATTENTION,
        search=SETTING, label="attn-{value}", phrase="attention {value}", source="Dao 2023 (FlashAttention-2); Shah et al. 2024 (FlashAttention-3)")
    """Attention kernel: flash (FlashAttention-2 class: scores never stored, causal blocks
    skipped; PyTorch SDPA, flash-attn 2), flash3 (the Hopper/Blackwell-native kernels:
    FlashAttention-3, cuDNN fused attention as TransformerEngine runs it; same as flash on older
    GPUs) or unfused (scores materialised in HBM, softmax as a separate kernel: Megatron before
    FlashAttention, Dao et al. 2022; kept to price older runs)."""
    cudnn: str = option(
        "current", "cuDNN of the container, for --attention flash3: current (2025 on) | 2024 (the cuDNN 9 of "
        "2024 containers: 0.86 of today's attention speed).", kind=CHOICE, group=IMPLEMENTATION,
        choices=CUDNN_GENERATIONS, search=SETTING, label="cuDNN-{value}", phrase="cuDNN {value}", phrase_when="set",
        applies_with="flash3",
        source="cuDNN-frontend benchmark/benchmark_results.csv (cuDNN 9.1.0, 2024-05) and "
               "sdpa_benchmark_training/results/h200_919_only_cudnn (cuDNN 9.19, 2026)")
    """The cuDNN release whose fused attention runs (``attention`` flash3 on Hopper and
    Blackwell; moot otherwise): current, or 2024 (the cuDNN 9 of 2024 containers: NeMo 24.x,
    Megatron-Core r0.8; cuDNN-frontend measured 9.1.0), whose kernels ran at 0.86 of today's
    (``costmodel.compute.CUDNN_2024_ATTENTION_FRACTION``). Not a launch setting: the container
    fixes it, so no exporter writes it and no reader reads it (``planner.frameworks.table.CONTAINER``)."""
    kernels: str = option(
        "fused", "Elementwise kernels: fused (Megatron/TransformerEngine, torch.compile) | eager (plain PyTorch ops).",
        kind=CHOICE, group=IMPLEMENTATION, choices=KERNELS, search=SETTING, label="{value}-kernels", phrase="{value} kernels",
        source="torchtitan models/llama/model.py (eager operators)")
    """Elementwise kernels: fused (Megatron/TransformerEngine, torch.compile) or eager (plain
    PyTorch operators, e.g. torchtitan or llm-foundry without compile)."""
    loss: str = option(
        "unfused", "Cross entropy: unfused (Megatron default) | fused (--cross-entropy-loss-fusion, TE) | eager "
        "(F.cross_entropy on FP32 logits, torchtitan).", kind=CHOICE, group=IMPLEMENTATION, choices=LOSSES,
        search=SETTING, label="{value}-CE", phrase="cross-entropy {value}", source="Megatron-LM megatron/core/tensor_parallel/cross_entropy.py")
    """Cross-entropy kernel: unfused (Megatron's default vocab-parallel cross entropy: FP32
    passes over the logits, in place), fused (one kernel: Megatron --cross-entropy-loss-fusion,
    TransformerEngine or flash-attn cross entropy) or eager (torch.nn.functional.cross_entropy
    on FP32 logits, e.g. torchtitan, which does not compile its loss)."""
    tp_comm_overlap: bool = option(
        False, "Overlap TP all-gathers/reduce-scatters with GEMMs (Megatron --tp-comm-overlap; needs SP). "
        "Default: off.", kind=FLAG, group=IMPLEMENTATION, search=SETTING, label="TP-overlap", phrase="TP overlap {value}",
        source="Megatron-Core 'Communication overlap' docs; TransformerEngine userbuffers",
        rules=("tp_comm_overlap_needs_sequence_parallel",))
    """Overlap the tensor-parallel all-gathers / reduce-scatters with the GEMMs they feed
    (Megatron --tp-comm-overlap: TransformerEngine userbuffers, needs sequence parallelism).
    Off by default, as in Megatron. The search applies it where tp > 1 with SP."""
    cp_comm_type: str = option(
        "p2p", "With --cp > 1, how attention exchanges the sequence: p2p (ring of K/V chunks) | a2a (Ulysses: "
        "all-to-all heads for sequence, each kernel sees the whole sequence; heads/tp divisible by cp) | allgather "
        "(K/V all-gathered, each kernel sees the whole sequence) | a2a+p2p (all-to-all inside the scale-up "
        "domain, ring across domains).",
        kind=CHOICE, group=IMPLEMENTATION, choices=CP_COMM_TYPES, search=SETTING, label="cp-{value}",
        source="Megatron-LM --cp-comm-type (megatron/training/arguments.py); TransformerEngine "
               "attention/dot_product_attention/context_parallel.py (AttnFuncWithCPAndKVP2P, AttnFuncWithCPAndQKVOA2A, "
               "AttnFuncWithCPAndKVAllGather); Jacobs et al. 2023 (DeepSpeed-Ulysses)",
        rules=("cp_comm_type_needs_cp", "cp_a2a_divides_heads", "sliding_window_cp_comm_type"))
    """Context-parallel communication (Megatron-Core / TransformerEngine ``cp_comm_type``): p2p
    runs ring attention (each of the c - 1 steps sends a K/V chunk behind one chunk's attention;
    kernels see s/c keys); a2a (DeepSpeed-Ulysses) trades the sequence split for a head split
    with all-to-alls of Q, K, V before and O after attention, exposed, and every kernel sees the
    whole sequence; allgather gathers the K/V of the whole sequence before attention (and
    reduce-scatters dK/dV after it) without overlap, kernels see the whole sequence; a2a+p2p
    (hierarchical, LongVILA / USP) all-to-alls inside the CP ranks of one scale-up domain and
    rings across domains. Default p2p, Megatron's."""
    tp_overlap_kind: str = option(
        "userbuffers", "With --tp-comm-overlap, what overlaps: userbuffers (TransformerEngine: every pass) | asynctp "
        "(PyTorch micro-pipeline TP, torchtitan: the forward passes; backward TP collectives stay exposed).",
        kind=CHOICE, group=IMPLEMENTATION, choices=TP_OVERLAP_KINDS, search=SETTING, label="{value}",
        source="Megatron-Core 'Communication overlap' docs (userbuffers); PyTorch dev-discuss 'Introducing Async "
               "Tensor Parallelism in PyTorch' (torchtitan: ~29% forward, ~8% end-to-end speedup)",
        rules=("tp_overlap_kind_needs_tp_comm_overlap",))
    """Which TP overlap runs: TransformerEngine userbuffers (Megatron-Core, NeMo: the all-gathers
    and reduce-scatters of every pass pipelined with their GEMMs) or PyTorch's AsyncTP
    (torchtitan ``enable_async_tensor_parallel``: torch.compile's micro-pipeline TP pass
    decomposes all-gather + matmul and matmul + reduce-scatter; its authors measured up to 29%
    faster forward passes but 8% end to end, which is what hiding the forward collectives alone
    gives when backward is about two thirds of a step). Applies with tp_comm_overlap only."""
    tp_overlap_rs_ring: bool = option(
        False, "With TransformerEngine userbuffers TP overlap, the forward reduce-scatters (attention output and MLP "
        "down projections) run as ring exchange on 1 SM, summed by one kernel after the GEMM, instead of pipelined on "
        "24 / 16 SMs the GEMM lacks (Megatron-Bridge's H100 FP8 Llama 3 presets). Default: off.", kind=FLAG,
        group=IMPLEMENTATION, search=SETTING, label="rs-ring",
        source="TransformerEngine common/comm_gemm_overlap/comm_gemm_overlap.cpp (v2.7) CommOverlapP2PBase::"
               "split_overlap_rs: per-chunk GEMMs on sm_count - num_comm_sm SMs, userbuffers_send/recv, then "
               "reduce_bf16 over tp chunks on the main stream; Megatron-Bridge src/megatron/bridge/training/"
               "comm_overlap.py userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192 (6307e8a37, v0.2.0, 406d3be77)",
        rules=("tp_overlap_rs_ring_needs_userbuffers",))
    """How userbuffers overlaps the two forward reduce-scatters of a layer (TransformerEngine's
    proj_fprop and fc2_fprop). Off: the "pipeline" method of NeMo's tuned H100 configs and TE's
    default, whose reduce-scatter kernels sum the chunks on SMs the GEMM gives up
    (``costmodel.tensor_parallel.TP_OVERLAP_SM_MARGIN``). On: "ring_exchange" (RingExchangeOverlapCfg
    num_sm=1): the GEMM runs in tp chunks on all SMs but one, each chunk sent peer to peer, and one
    memory-bound kernel sums the tp received chunks after the last GEMM (reduce_bf16). Applies with
    tp_comm_overlap and the userbuffers kind only."""
    ep_comm_overlap: bool = option(
        False, "Hide MoE all-to-alls behind another micro-batch's compute (Megatron "
        "--overlap-moe-expert-parallel-comm; needs vpp > 1 or pp = 1). Default: off.", kind=FLAG,
        group=IMPLEMENTATION, search=SETTING, label="EP-overlap", phrase="EP all-to-all overlap {value}",
        phrase_when="set",
        source="DeepSeek-V3 report Sec. 3.2.1, Fig. 4; Megatron-Core MoE README",
        rules=("ep_comm_overlap_needs_moe", "ep_comm_overlap_needs_interleaving"))
    """Hide the expert-parallel all-to-alls of one micro-batch behind the computation of
    another (Megatron-Core --overlap-moe-expert-parallel-comm --delay-wgrad-compute, MoE
    "batch-level overlapping"; needs an interleaved pipeline or pp = 1). Off by default. The
    search applies it where the schedule allows."""
    moe_dispatcher: str = option(
        "alltoall", "MoE token dispatcher: alltoall (Megatron-Core) | deepep (one network copy per destination node) | "
        "allgather (every EP rank gathers all tokens) | hybridep (NVLink-domain dispatch, e.g. NVL72).",
        kind=CHOICE, group=IMPLEMENTATION, choices=DISPATCHERS, search=SETTING, label="{value}", phrase="{value} dispatcher", phrase_when="moe",
        source="DeepSeek-V3 report Sec. 3.2.2 (DeepEP); Megatron --moe-token-dispatcher-type",
        rules=("moe_dispatcher_needs_moe", "moe_pad_needs_capacity"))
    """MoE token dispatcher: alltoall (Megatron-Core's all-to-all, one copy per routed expert),
    deepep (DeepEP via --moe-token-dispatcher-type flex: one network copy per destination
    node, forwarded over NVLink), allgather (Megatron-Core's allgather dispatcher: every EP
    rank gathers the whole EP group's tokens and reduce-scatters the outputs) or hybridep
    (Megatron-Core v0.15 flex backend HybridEP: DeepEP-style dedup, TMA copies inside the
    NVLink domain with few SMs, device-side token counts). See costmodel.expert_parallel."""
    moe_grouped_gemm: str = option(
        "loop", "Per-expert GEMMs of an MoE layer: loop (TransformerEngine GroupedLinear: one cuBLAS call per "
        "expert on 4 streams) | fused (one grouped kernel with device-side splits: CUTLASS / DeepGEMM / "
        "torch._grouped_mm).", kind=CHOICE, group=IMPLEMENTATION, choices=GROUPED_GEMMS, search=SETTING,
        label="{value}-experts", source="TransformerEngine cublaslt_gemm.cu (multi-stream grouped GEMM, PR #853); "
        "TE PR #3134 (per-expert loop vs single-launch CUTLASS)")
    """How an MoE layer's expert GEMMs run: ``loop`` (TransformerEngine's GroupedLinear default:
    nvte_multi_tensor_gemm issues one cuBLASLt GEMM per local expert over 4 CUDA streams, each
    with its own setup, and needs the per-expert token counts on the host) or ``fused`` (one
    launch over all experts reading the counts on the device: the grouped_gemm CUTLASS kernel,
    DeepGEMM, TE's opt-in grouped-tensor path, torch._grouped_mm). See costmodel.moe."""
    moe_imbalance: float = option(
        1.0, "Routed tokens on the busiest expert-parallel rank over the mean (1.0 = the forced balance "
        "benchmarks use; measured routers run 1.1-1.5).", kind=FLOAT, group=IMPLEMENTATION, minimum=1.0,
        maximum=64.0, search=SETTING, label="imbalance {value:g}",
        source="Megatron-Core --moe-router-force-load-balancing (benchmarks); GShard (Lepikhin et al. 2020) "
               "expert capacity", rules=("moe_imbalance_needs_moe",))
    """Load imbalance of the router: the busiest EP rank's routed tokens over the balanced
    mean. Every rank waits for the busiest one at the combine all-to-all, so its expert GEMMs,
    its received all-to-all bytes and its expert activations set the pace (costmodel.moe).
    Capped at ep: the busiest of ep ranks holds at most every routed token (at EP 1, none waits).
    1.0 is the forced balance of published MoE benchmarks (Megatron
    --moe-router-force-load-balancing)."""
    moe_capacity_factor: float = option(
        0.0, "Expert capacity as a multiple of each expert's balanced share of routed tokens; tokens past it are "
        "dropped (Megatron --moe-expert-capacity-factor). 0 = dropless, Megatron's default.", kind=FLOAT,
        group=IMPLEMENTATION, minimum=0.0, maximum=64.0, search=SETTING, label="capacity {value:g}",
        phrase="capacity factor {value:g}", phrase_when="set",
        source="Megatron-Core transformer/moe/moe_utils.py get_capacity; GShard (Lepikhin et al. 2020) Sec. 2.2 "
               "expert capacity", rules=("moe_capacity_needs_moe", "moe_pad_needs_capacity"))
    """Token drop: each expert takes at most ``capacity = factor x tokens x top_k / experts`` of a
    micro-batch's routed copies (Megatron-Core moe_utils.get_capacity). Without padding it only
    caps the busiest rank at ``factor`` times the mean (a rank loaded less runs what it got);
    with ``moe_pad_to_capacity`` every expert runs exactly its capacity. 0 (default): dropless."""
    moe_pad_to_capacity: bool = option(
        False, "With a capacity factor, pad every expert's input to its capacity (Megatron "
        "--moe-pad-expert-input-to-capacity): static shapes, so the token counts never go to the host.",
        kind=FLAG, group=IMPLEMENTATION, search=SETTING, label="padded", phrase="padded to capacity {value}",
        phrase_when="set", source="Megatron-Core transformer/moe/token_dispatcher.py (drop_and_pad)",
        rules=("moe_pad_needs_capacity",))
    """Pad each expert's rows to its capacity: every expert GEMM and every all-to-all carries
    ``moe_capacity_factor`` times the balanced share, whatever the router did, and the
    dispatcher knows its splits without reading the token counts back (no host sync; a CUDA
    graph can capture the whole MoE layer). Needs ``moe_capacity_factor`` > 0."""
    grad_dtype: str = option(
        "fp32", "Gradient buffers and their data-parallel reduction: fp32 (Megatron main grads, FSDP reduce_dtype "
        "fp32) | bf16 (NeMo grad_sync_dtype bf16, Megatron-Core grad_reduce_in_fp32=False).", kind=CHOICE,
        group=IMPLEMENTATION, choices=GRAD_DTYPES, search=SETTING, label="{value}-grads",
        source="Megatron-LM --grad-reduce-in-bf16; NeMo optim.grad_sync_dtype")
    """Dtype the gradients are accumulated, kept and reduced across data parallel in: fp32
    (Megatron's main_grad buffers, which --bf16 forces; FSDP reduce_dtype float32) or bf16
    (Megatron-Core DDP grad_reduce_in_fp32=False, NeMo optim.grad_sync_dtype=bf16, FSDP
    reduce_dtype bfloat16): half the gradient memory and half the reduce-scatter /
    all-reduce bytes."""
    grad_accum_pass: str = option(
        "fused", "How each micro-batch's weight gradients are added into the step's: fused (Megatron's "
        "gradient-accumulation fusion: the weight-gradient GEMM adds into the main grad) | autograd (PyTorch's "
        "AccumulateGrad, param.grad += new: DeepSpeed fp16 / 16-bit ZeRO, FSDP2 on its shards) | cast_add "
        "(DeepSpeed's BF16_Optimizer: each micro-batch's BF16 gradient cast to FP32 and added) | main_grad_copy "
        "(Megatron-FSDP ZeRO-2/3 without the fusion: each micro-batch's whole gradient copied into the reduce-scatter "
        "bucket). Default: fused.",
        kind=CHOICE, group=IMPLEMENTATION, choices=GRAD_ACCUMS, search=SETTING, label="{value}-accum",
        source="Megatron-LM --no-gradient-accumulation-fusion; DeepSpeed runtime/bf16_optimizer.py update_hp_grads; "
               "Megatron-Core distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py _grad_acc")
    """Where a micro-batch's weight gradients are accumulated into the step's (with m > 1 micro-batches
    per step): fused into the weight-gradient GEMM (Megatron's gradient_accumulation_fusion, on by default
    where its fused kernel is installed: the GEMM's epilogue adds into the FP32 main grad, no extra pass),
    or by a separate memory-bound pass over every gradient the GPU accumulates, once per micro-batch:
    autograd (6 B a 16-bit gradient; 2 + 2 x the accumulator's bytes under ZeRO >= 2; from the second
    micro-batch on) or cast_add (26 B per gradient,
    every micro-batch), or main_grad_copy: Megatron-FSDP's optim_grads / optim_grads_params without
    gradient accumulation fusion (what planner's Megatron export writes for ZeRO-2/3), whose
    post-accumulate-grad hook copies every micro-batch's whole BF16 ``param.grad`` into the unsharded
    main-grad bucket it reduce-scatters (Megatron-Core distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py
    ``_grad_acc``: ``param.main_grad.copy_(param.grad)``), every micro-batch, the first and a lone one
    included. ``costmodel.grad_accumulation`` prices it; framework profiles and tables set it."""
    grad_reduce: str = option(
        "reduce_scatter", "How ZeRO-1 reduces gradients across data parallel: reduce_scatter (each rank receives its "
        "shard: Megatron's distributed optimizer, DeepSpeed's ZeRO optimizer) | all_reduce (the whole gradient, then "
        "each rank steps its shard: DeepSpeed's BF16_Optimizer) | all_reduce_fp32 (the same, each bucket cast to FP32 "
        "for it: Aleph Alpha's scaling). Default: reduce_scatter.",
        kind=CHOICE, group=IMPLEMENTATION, choices=GRAD_REDUCES, search=SETTING, label="{value}-grads-reduce",
        source="DeepSpeed runtime/pipe/engine.py _bf16_reduce_grads (buffered_allreduce_fallback); "
               "Aleph-Alpha/scaling src/scaling/core/optimizer/allreduce.py allreduce_tensor_in_float32",
        rules=("grad_reduce_needs_zero1",))
    """The collective ZeRO-1 reduces the step's gradients with: a reduce-scatter, each rank receiving the
    sum of its own shard ((n-1)/n of the gradient bytes through each rank: Megatron-Core's distributed
    optimizer, DeepSpeed's ZeRO stage 1 optimizer), or an all-reduce of the whole gradient after which
    each rank updates its shard of the optimizer states (twice the bytes): DeepSpeed's BF16_Optimizer,
    its own stage-1 equivalent (runtime/pipe/engine.py ``_exec_reduce_grads`` -> ``_bf16_reduce_grads``
    -> ``buffered_allreduce_fallback`` over ``get_grads_for_reduction()``, the FP32 gradients), and
    Aleph Alpha's scaling codebase, which all-reduces its BF16 gradients bucket by bucket in FP32
    (src/scaling/core/optimizer/allreduce.py ``allreduce_tensor_in_float32``; all_reduce_fp32: 4 B an
    element whatever ``grad_dtype`` keeps them in). Applies with zero = 1 only (ZeRO-0 all-reduces
    anyway; ZeRO-2/3 keep only their shard of the gradients)."""
    optimizer_states: str = option(
        "fp32", "Adam's states per parameter: fp32 (FP32 master weights and moments, 12 B: Megatron's distributed "
        "optimizer) | remainders (the low 16 bits of the FP32 master beside the BF16 weight, FP32 moments, 10 B: NeMo 1 "
        "distributed_fused_adam, Apex store_param_remainders) | bf16 (BF16 moments and no master, 4 B: NeMo 1 "
        "optim.dtype bf16).", kind=CHOICE, group=IMPLEMENTATION, choices=OPTIMIZER_STATES, search=SETTING,
        label="{value}-adam", source="Apex contrib/optimizers/distributed_fused_adam.py (dtype, store_params, "
        "store_param_remainders); NeMo 1 megatron_base_model.py setup_optimization",
        rules=("optimizer_remainders_need_bf16_weights",))
    """Bytes Adam keeps per parameter it owns (sharded by ZeRO >= 1 like any optimizer state):
    fp32, an FP32 master copy and FP32 first and second moments (Megatron-Core's optimizers);
    remainders, the 16 bits an FP32 master has beyond its BF16 weight (an int16 shard) and FP32
    moments: the BF16 weight and its remainder together are the FP32 master (NeMo 1 with
    ``distributed_fused_adam``, FP32 optimizer dtype and BF16 O2 weights; Megatron-Core's
    precision-aware optimizer keeps the same with TE >= 2.1); bf16, BF16 moments and no master,
    the BF16 weights updated in place (NeMo 1 ``optim.dtype: bf16``). Memory only: the optimizer
    step's time stays priced at the FP32 traffic (costmodel.optimizer)."""
    zero3_gather: str = option(
        "prefetch", "ZeRO-3 parameter fetching: prefetch (per-layer gathers hidden behind compute: FSDP, DeepSpeed "
        "today) | blocking (one synchronised gather per weight tensor, re-gathered after recompute: DeepSpeed 2021) | "
        "post (FSDP1 BackwardPrefetch.BACKWARD_POST, Composer's default: each backward gather waits for the previous "
        "unit's gradients, exposed).",
        kind=CHOICE, group=IMPLEMENTATION, choices=ZERO3_GATHERS, search=SETTING, label="{value}-ZeRO-3",
        source="DeepSpeed 2021 runtime/zero/partition_parameters.py; DeepSpeed issue #1173",
        rules=("zero3_gather_needs_zero3",))
    """ZeRO-3 parameter fetching: prefetch (one flat all-gather per layer / FSDP unit, issued
    ahead and hidden behind compute: FSDP, DeepSpeed since its coalesced gathers) or blocking
    (early DeepSpeed ZeRO-3, 2021: one all-gather per weight tensor, each after a
    torch.cuda.synchronize(), again after a recomputed forward, and one gradient reduce-scatter
    per parameter tensor, all in PyTorch's list form built from per-rank slices and copies;
    nothing overlaps; see costmodel.zero3_blocking) or post (PyTorch FSDP1 with
    BackwardPrefetch.BACKWARD_POST, Composer's default: forward gathers prefetched as with
    prefetch, but in backward each unit's all-gather is issued only after the previous unit's
    gradients are computed, so it overlaps that unit's reduce-scatter and no compute: one
    exposed gather per unit and micro-batch; costmodel.data_parallel.zero3_exposure). Applies
    with zero = 3 only."""
    fp8_recipe: str = option(
        "delayed", "With --precision fp8, the TransformerEngine scaling recipe: delayed (amax history) | current "
        "(tensorwise, amax of the tensor itself) | blockwise (1x128 / 128x128 scales, DeepSeek-V3) | mxfp8 (1x32 "
        "E8M0 block scales; Blackwell) | nvfp4 (4-bit E2M1 GEMMs, 1x16 E4M3 block scales; Blackwell).", kind=CHOICE,
        group=IMPLEMENTATION, choices=FP8_RECIPES, search=SETTING,
        label="fp8-{value}", phrase="FP8 recipe {value}", phrase_when="set", applies_with="fp8",
        source="TransformerEngine transformer_engine/common/recipe (DelayedScaling, Float8CurrentScaling, "
               "Float8BlockScaling, MXFP8BlockScaling, NVFP4BlockScaling); DeepSeek-V3 report Sec. 3.3.2; OCP MX "
               "spec v1.0", rules=("block_scaling_needs_blackwell",))
    """How FP8 GEMM inputs are scaled and quantised (costmodel.quantize): delayed (scale from the
    amax history, amax taken in the cast kernel: one pass), current (tensorwise: the tensor's own
    amax first, a second read), blockwise (per-block scales computed in the cast) or mxfp8
    (OCP MX: 1x32 blocks with power-of-two scales, in Blackwell's tensor cores) or nvfp4 (the
    linear layers' GEMMs in 4-bit E2M1 with 1x16 E4M3 block scales and a per-tensor FP32 scale,
    wgrad inputs through a random Hadamard transform: costmodel.compute.NVFP4_GEMM_SPEEDUP and
    costmodel.quantize; attention, the LM head and the router stay BF16 as under FP8). Applies
    with precision fp8."""
    fp8_param_gather: bool = option(
        False, "With --precision fp8, keep the linear layers' weights as FP8 parameters (Megatron --fp8-param-gather, "
        "TransformerEngine quantized_model_init; the NeMo 2 / Megatron-Bridge FP8 presets): no BF16 copy and no "
        "per-step FP8 weight cache. Needs a sharded optimizer (zero >= 1). Default: off (BF16 parameters).",
        kind=FLAG, group=IMPLEMENTATION, search=SETTING, label="fp8-params", phrase="FP8 parameters {value}",
        phrase_when="set", applies_with="fp8",
        source="Megatron-LM arguments.py --fp8-param-gather (use_distributed_optimizer or FSDP); TransformerEngine "
               "module/base.py get_weight_workspace (a quantized parameter is used as is)",
        rules=("fp8_param_gather_needs_sharded_optimizer",))
    """FP8 primary weights: TransformerEngine quantises each linear weight once after the
    optimizer step into the parameter itself (the FP32 master stays in the optimizer), so
    ``get_weight_workspace`` keeps no separate copy (costmodel.memory.fp8_weight_copy_bytes).
    Off: BF16 parameters, whose FP8 copies TransformerEngine caches for the step. Applies with
    precision fp8."""
    cuda_graphs: bool = option(
        False, "Capture the step in CUDA graphs (Megatron --enable-cuda-graph / --cuda-graph-impl, TE "
        "make_graphed_callables, torch.compile mode=reduce-overhead): no per-kernel launch. Default: off.",
        kind=FLAG, group=IMPLEMENTATION, search=SETTING, label="CUDA-graphs", phrase="CUDA graphs {value}",
        phrase_when="set", source="NVIDIA Developer Blog, 'Getting Started with CUDA Graphs' (2019); "
        "Megatron-Core MoE README ('CPU overhead bottleneck', CUDA graphs)")
    """Replay the layers' kernels from CUDA graphs: the host launches a graph instead of each
    kernel, and dependent kernels start sooner (costmodel.compute prices the per-kernel gap; the
    MoE host timeline reads this setting too). Off by default."""
    cpu_offload_layers: Optional[int] = option(
        None, "Offload the activations of this many layers to host memory during forward and bring them back for "
        "backward (Megatron --cpu-offloading --cpu-offloading-num-layers; pp = 1). Default: none.",
        kind=OPTIONAL_INT, group=MEMORY, minimum=1, maximum=MAX_LAYERS, unit="layers", search=SETTING,
        label="offload-{value}", phrase="CPU activation offload {value} layers", phrase_when="set",
        source="Megatron-Core TransformerConfig.cpu_offloading_num_layers; TransformerEngine get_cpu_offload_context",
        rules=("cpu_offload_layers_valid",))
    """Layers whose saved activations go to host memory in forward (copied out behind the next
    layer's compute) and come back in backward (prefetched behind the previous layer's):
    costmodel.offload. Megatron-Core allows it without pipeline parallelism only."""
    fsdp: str = option(
        "flat", "ZeRO-3 implementation: flat (FSDP1 / DeepSpeed flat parameter buffers) | fsdp2 (PyTorch per-parameter "
        "DTensor sharding: copy-out after each all-gather) | megatron (Megatron-FSDP persistent buffers). Applies "
        "with zero = 3, and with zero = 2 under a pipeline (fsdp2: gradients kept whole until the last micro-batch, "
        "as torch.distributed.pipelining runs FSDP2).", kind=CHOICE, group=IMPLEMENTATION, choices=FSDP_IMPLS,
        search=SETTING, label="{value}-FSDP", phrase="FSDP {value}", phrase_when="set", applies_with="fsdp",
        source="PyTorch torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py (foreach_all_gather_copy_out, "
               "foreach_reduce copy-in); Megatron-Core megatron/core/distributed/fsdp (Megatron-FSDP)")
    """How ZeRO-3 lays out its shards (costmodel.data_parallel): flat (FSDP1 FlatParameter,
    DeepSpeed: gathered straight into the unsharded buffer the layer reads), fsdp2 (FSDP2 shards
    each parameter on dim 0: the gathered flat buffer is copied out to the parameters on the
    compute stream, and gradients copied into the flat reduce-scatter input) or megatron
    (Megatron-FSDP: gathers into persistent per-bucket buffers the parameters view, as flat).
    Prefetching (one unit ahead, forward and backward) is the same in all three."""
    dp_comm_overlap: bool = option(
        True, "Overlap data-parallel gradient reductions and parameter all-gathers with compute (Megatron "
        "--overlap-grad-reduce --overlap-param-gather, DeepSpeed overlap_comm, FSDP prefetch). Default: on.",
        kind=FLAG, group=IMPLEMENTATION, search=SETTING, label="no-DP-overlap",
        source="Megatron-Core DistributedDataParallel (overlap_grad_reduce, overlap_param_gather); Li et al. 2020 "
        "(PyTorch DDP bucketed overlap)")
    """Hide the data-parallel gradient reduction behind the last micro-batch's backward and the
    all-gather of updated weights behind the next step's first forward (ZeRO-3: each layer's
    gathers behind the previous layer's compute). On by default, as planner's Megatron export
    sets it; off prices what runs without those flags (Megatron before they existed, or with
    them left at their default): every data-parallel collective exposed."""
    nccl_ub: bool = option(
        False, "Data-parallel / FSDP buffers registered as NCCL user buffers (Megatron --use-nccl-ub, Megatron-Bridge "
        "ddp.nccl_ub): inside one NVLink domain the all-gathers and reduce-scatters run on 4-5 SMs instead of 16 "
        "channels, so hidden DP traffic slows compute less. Default: off.",
        kind=FLAG, group=IMPLEMENTATION, search=SETTING, label="nccl-ub",
        source="Megatron-Core distributed/distributed_data_parallel_config.py nccl_ub (SM usage of AG/RS: NVL 4 / 5, "
               "NVL+IB without SHARP 16 / 16)")
    """NCCL user-buffer registration of the parameter and gradient buffers (Megatron-Core
    DistributedDataParallelConfig.nccl_ub): NCCL's zero-copy, SM-light algorithms for the
    data-parallel collectives. Megatron-Core's table of SM usage: 4 (all-gather) / 5
    (reduce-scatter) SMs inside an NVLink domain, 16 / 16 over NVLink + InfiniBand without SHARP,
    so only a data-parallel group within one scale-up domain gains (costmodel.data_parallel:
    its hidden traffic slows compute by 5/16 of ``comm_sm_fraction``). Off by default; the
    Megatron-Bridge presets that run Megatron-FSDP on one H100 node set it."""

    p2p_scatter_gather: bool = option(
        False, "Pipeline sends split over the TP ranks: each sends 1/t of the activation to the next stage and the "
        "receiver all-gathers it over NVLink (Megatron-LM before Megatron-Core, without SP; DeepSpeed's pipeline "
        "engine). Default: off (Megatron-Core sends the whole tensor, or the SP shard).", kind=FLAG,
        group=IMPLEMENTATION, search=SETTING, label="p2p-scatter",
        source="Megatron-LM megatron/p2p_communication.py (--no-scatter-gather-tensors-in-pipeline, on by default); "
        "DeepSpeed runtime/pipe/engine.py (is_pipe_partitioned = is_model_parallel, PartitionedTensor)")
    """Split each pipeline send over the tensor-parallel ranks: every TP rank sends its 1/t
    slice of the activation (or its gradient) to its peer on the next stage, and the receiving
    stage all-gathers the slices over the scale-up domain. Megatron-LM's
    scatter_gather_tensors_in_pipeline (on unless --no-scatter-gather-tensors-in-pipeline, and
    only without sequence parallelism, whose shard is already 1/t) and DeepSpeed's pipeline
    engine (is_pipe_partitioned whenever model parallelism is on) run this way; Megatron-Core
    sends the whole tensor from every rank. Off by default; framework profiles set it."""

    p2p_comm_overlap: bool = option(
        True, "Overlap the interleaved schedule's steady-state pipeline sends with compute (Megatron "
        "overlap_p2p_comm; off: --no-overlap-p2p-communication, or Megatron-LM before it existed). Default: on.",
        kind=FLAG, group=IMPLEMENTATION, search=SETTING, label="no-PP-overlap",
        source="Megatron-Core pipeline_parallel/schedules.py (forward_backward_pipelining_with_interleaving, "
        "config.overlap_p2p_comm); Megatron-LM PR #331 (May 2023) ported it from Apex PR #1616")
    """Overlap the interleaved (virtual-stage) schedule's steady-state sends and receives with the
    next chunk's compute; warm-up and flush stay blocking either way. On by default, as
    Megatron-Core runs it (and Megatron-Bridge's CommOverlapConfig sets it whenever vpp > 1); off
    prices every chunk step blocking on its send/recv, as Megatron-LM did before May 2023 and as
    ``--no-overlap-p2p-communication`` runs. The non-interleaved 1F1B schedule blocks in any case."""

    launch_blocking: bool = option(
        False, "Every kernel launch blocks the host until the kernel ends (CUDA_LAUNCH_BLOCKING=1, as BigScience ran "
        "BLOOM on Jean Zay to avoid hangs): the GPU idles while the host issues each next operator. Default: off.",
        kind=FLAG, group=IMPLEMENTATION, search=SETTING, label="launch-blocking",
        source="CUDA Programming Guide, CUDA_LAUNCH_BLOCKING; bigscience train/tr11-176B-ml/tr11-176B-ml.slurm "
        "(export CUDA_LAUNCH_BLOCKING=1) and chronicles-prequel.md ('dealing with JZ hanging on the large model')")
    """Run with CUDA_LAUNCH_BLOCKING=1: each launch returns only when its kernel has finished, so
    the host no longer runs ahead and the GPU waits, between every two kernels, for the host to
    issue the next operator (costmodel.compute.LAUNCH_BLOCKING_US per kernel, on top of the
    launch gap every kernel pays). A debugging switch; BigScience kept it on for BLOOM because it
    stopped the Jean Zay hangs. Off by default; a framework profile sets it for those runs."""

    # ---------------------------------------------------------------- pipeline split
    pp_first_layers: Optional[int] = option(
        None, "Layers on the first pipeline stage (uneven pipelines). Default: planner's split.", kind=OPTIONAL_INT,
        group=PIPELINE, minimum=1, maximum=MAX_LAYERS, unit="layers", source="Megatron-LM --decoder-first-pipeline-num-layers; "
        "Llama 3 paper Sec. 3.3.2", rules=("pp_stage_split",))
    """Layers on the first pipeline stage; None = planner's split (see costmodel.pipeline)."""
    pp_last_layers: Optional[int] = option(
        None, "Layers on the last pipeline stage. Default: planner's split.", kind=OPTIONAL_INT, group=PIPELINE,
        minimum=1, maximum=MAX_LAYERS, unit="layers", source="Megatron-LM --decoder-last-pipeline-num-layers", rules=("pp_stage_split",))
    """Layers on the last pipeline stage; None = planner's split."""

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def sp(self) -> bool:
        """Sequence parallelism as it runs: on where requested or automatic, and tp > 1."""
        return self.tp > 1 if self.sequence_parallel is None else bool(self.sequence_parallel and self.tp > 1)

    @property
    def grad_accum(self) -> int:
        """Micro-batches per step per pipeline (m): gbs / (dp * mbs)."""
        return self.gbs // (self.dp * self.mbs)

    def to_dict(self) -> dict:
        """The recorded options (not ``recompute_share``, which records resolve) and what they
        derive: SP as it runs, grad_accum, gpus."""
        d = asdict(self)
        for name in UNRECORDED:
            del d[name]
        d["sequence_parallel"] = self.sp
        d["grad_accum"] = self.grad_accum
        d["gpus"] = self.gpus
        return d

    @classmethod
    def from_values(cls, values: dict, where: str = "") -> "Layout":
        """A Layout from option values as typed or read from JSON (missing: defaults; None:
        "default"), each checked by ``Option.parse``; errors name ``where + name`` (e.g.
        ``layout.tp``) or the CLI flag. Unknown keys are ignored."""
        kw = {}
        for opt in OPTIONS:
            if opt.name in values and values[opt.name] is not None:
                kw[opt.name] = opt.parse(values[opt.name], f"{where}{opt.name}" if where else "")
        return cls(**kw)


@dataclass(frozen=True)
class Batch:
    """A job's batch: global batch in sequences and sequence length, and where the global batch
    came from when the user did not type it (for errors about it)."""

    gbs: int
    seq_len: int
    origin: str = ""
    """E.g. "gbs = --tokens-per-batch 1,000,000 / --seq-len 8,192"; empty when --gbs gave it."""


def resolve_batch(model, seq_len=None, gbs=None, tokens_per_batch=None) -> Batch:
    """The batch from --gbs or --tokens-per-batch and --seq-len (each checked against its
    declared range), or the model preset's defaults. A --tokens-per-batch must hold a whole
    number of sequences; the model's default batch is rounded down to whole sequences."""
    from hardware_catalog.errors import PlannerInputError

    if gbs is not None and tokens_per_batch is not None:
        raise PlannerInputError("give --gbs or --tokens-per-batch, not both")
    seq_opt, gbs_opt = OPTIONS_BY_NAME["seq_len"], OPTIONS_BY_NAME["gbs"]
    seq = seq_opt.parse(seq_len) if seq_len is not None else model.default_seq_len
    if gbs is not None:
        batch = Batch(gbs_opt.parse(gbs), seq)
    elif tokens_per_batch is not None:
        tokens = TOKENS_PER_BATCH.parse(tokens_per_batch)
        if tokens % seq:
            below = tokens // seq * seq
            hint = f"{below:,} or {below + seq:,}" if below else f"{seq:,}"
            raise PlannerInputError(f"--tokens-per-batch={tokens:,} is not a whole number of {seq:,}-token sequences "
                                    f"(--seq-len): give a multiple of {seq:,}, e.g. {hint}, or --gbs")
        batch = Batch(tokens // seq, seq, f"gbs = --tokens-per-batch {tokens:,} / seq-len {seq:,}")
    else:
        tokens = model.default_tokens_per_batch
        if tokens < seq:
            raise PlannerInputError(f"--seq-len={seq:,} is longer than {model.name}'s default batch of {tokens:,} "
                                    f"tokens: give --gbs (sequences) or --tokens-per-batch")
        batch = Batch(tokens // seq, seq, f"gbs = {model.name}'s default batch of {tokens:,} tokens / seq-len {seq:,}; "
                      "give --gbs or --tokens-per-batch to choose it")
    gbs_opt.parse(batch.gbs, where=f"gbs (from {batch.origin})" if batch.origin else "")
    if batch.gbs * batch.seq_len > MAX_TOKENS_PER_BATCH:
        raise PlannerInputError(f"gbs {batch.gbs:,} x seq-len {batch.seq_len:,} = {batch.gbs * batch.seq_len:,} tokens "
                                f"per batch: must be at most {MAX_TOKENS_PER_BATCH:,}")
    return batch


def _collect_options() -> tuple[Option, ...]:
    out = []
    for f in fields(Layout):
        meta = dict(f.metadata["option"])
        if f.default is MISSING:  # pragma: no cover - every option has a default
            raise TypeError(f"Layout.{f.name} has no default")
        out.append(Option(name=f.name, **meta))
    return tuple(out)


OPTIONS: tuple[Option, ...] = _collect_options()
"""Every layout option, in ``Layout`` field order."""
OPTIONS_BY_NAME = {o.name: o for o in OPTIONS}
RECORDED_OPTIONS: tuple[Option, ...] = tuple(o for o in OPTIONS if o.recorded)
"""The options a record (JSON, CSV) states."""
UNRECORDED = tuple(o.name for o in OPTIONS if not o.recorded)
IMPLEMENTATION_OPTIONS = tuple(o.name for o in OPTIONS if o.group == IMPLEMENTATION)
"""How the framework runs the layout: the settings a framework profile fixes."""
IMPLEMENTATION_DEFAULTS = {name: OPTIONS_BY_NAME[name].default for name in IMPLEMENTATION_OPTIONS}
"""Implementation settings and their defaults (``Layout`` values)."""


def options_for(command: str) -> tuple[Option, ...]:
    """The options ``command`` (evaluate, export, search) takes as flags."""
    return tuple(o for o in OPTIONS if command in o.commands)


def setting_labels(values: dict) -> list[str]:
    """Labels of the implementation settings in ``values`` (option name -> ``Layout`` value)
    that differ from their defaults, in declaration order (``Option.label``)."""
    out = []
    for name in IMPLEMENTATION_OPTIONS:
        opt = OPTIONS_BY_NAME[name]
        value = values.get(name, opt.default)
        if opt.label and value is not None and value != opt.default and opt.applies(values):
            out.append(opt.label.format(value=value))
    return out


def check_implementation(impl: dict) -> dict:
    """Implementation settings checked (None values dropped); one-line errors that name the
    option, the value and what is allowed."""
    from hardware_catalog.errors import PlannerInputError

    out = {}
    for key, value in (impl or {}).items():
        if value is None:
            continue
        if key not in IMPLEMENTATION_DEFAULTS:
            raise PlannerInputError(f"unknown implementation setting {key!r} (allowed: {', '.join(IMPLEMENTATION_OPTIONS)})")
        out[key] = OPTIONS_BY_NAME[key].parse(value)
    return out


def parse_recompute_modules(value):
    """--recompute-modules as given (comma-separated text, or names) -> a tuple of known module
    names, or None when not given; one-line errors naming the bad value."""
    if value is None:
        return None
    return OPTIONS_BY_NAME["recompute_modules"].parse(value)
