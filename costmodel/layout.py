"""A parallel layout: how one training job is split over its GPUs.

``Layout`` is one layout (what a user types); ``LayoutBatch`` is many layouts as a struct of
numpy arrays, which is what the cost model evaluates in one vectorized call.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Optional

import numpy as np

RECOMPUTE = ("none", "selective", "full")
"""Activation recomputation modes; codes 0, 1, 2 in ``LayoutBatch.recompute``."""
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act", "shared_experts", "moe")
"""Megatron-Core submodules selective recompute can cover (TransformerConfig.recompute_modules;
--recompute-modules). Bit i of ``LayoutBatch.recompute_modules`` is module i."""
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)
"""Megatron-Core's default for --recompute-granularity selective."""
ATTENTION = ("flash", "unfused", "flash3")
"""Attention kernels; codes 0, 1, 2 in ``LayoutBatch.attention``."""
KERNELS = ("fused", "eager")
"""How the elementwise work between GEMMs runs; codes 0, 1 in ``LayoutBatch.kernels``: fused
(TransformerEngine / Megatron fused kernels, or torch.compile) or eager (one PyTorch kernel per
operator, fp32 upcasts in the norms, rotary and loss: plain PyTorch, FSDP scripts without
torch.compile)."""
LOSSES = ("unfused", "fused", "eager")
"""Cross-entropy implementations; codes 0, 1, 2 in ``LayoutBatch.loss``."""
DISPATCHERS = ("alltoall", "deepep")
"""MoE token dispatchers; codes 0, 1 in ``LayoutBatch.dispatcher``."""
GRAD_DTYPES = ("fp32", "bf16")
"""Gradient buffer / data-parallel reduction dtypes; codes 0, 1 in ``LayoutBatch.grad_dtype``."""
ZERO3_GATHERS = ("prefetch", "blocking")
"""How ZeRO-3 fetches parameters; codes 0, 1 in ``LayoutBatch.zero3_gather``."""
PRECISIONS = ("bf16", "fp8")
"""Compute precisions; codes 0, 1 in ``LayoutBatch.precision``. FP8 is TransformerEngine-style
(linear-layer GEMMs in FP8, attention and the rest in BF16)."""


@dataclass(frozen=True)
class Layout:
    """One parallel layout. Degrees multiply: tp * cp * pp * dp = GPUs (ep lives inside dp*cp)."""

    tp: int = 1
    """Tensor-parallel degree (Megatron column/row split), inside the scale-up domain by default."""
    pp: int = 1
    """Pipeline-parallel stages."""
    dp: int = 1
    """Data-parallel replicas (with ZeRO, the sharding group too)."""
    cp: int = 1
    """Context-parallel degree: the sequence is split over cp ranks (ring attention)."""
    ep: int = 1
    """Expert-parallel degree for MoE layers, carved out of dp * cp."""
    etp: int = 1
    """Expert tensor-parallel degree (MoE expert weights split over etp ranks)."""
    vpp: int = 1
    """Virtual pipeline stages per GPU (interleaved 1F1B); 1 = plain 1F1B."""
    zero: int = 1
    """ZeRO stage 0-3: 0 plain DDP, 1 optimizer states sharded (Megatron distributed optimizer),
    2 + gradients, 3 + parameters (FSDP). With pipeline parallelism only FSDP2 runs stages 2-3,
    and under torch.distributed.pipelining it keeps gradients unsharded for the whole step:
    priced with ZeRO-1's footprint (ZeRO-3 re-gathers weights for each backward)."""
    mbs: int = 1
    """Micro-batch size, sequences."""
    gbs: int = 1
    """Global batch size, sequences per optimizer step."""
    seq_len: int = 4096
    """Tokens per sequence."""
    recompute: str = "selective"
    """Activation recomputation: none, selective (core attention), full (whole layer)."""
    sequence_parallel: Optional[bool] = None
    """Megatron sequence parallelism for the non-TP regions; None = on whenever tp > 1."""
    precision: str = "bf16"
    """bf16, or fp8 (TransformerEngine: GEMMs in FP8)."""
    attention: str = "flash"
    """Attention kernel: flash (FlashAttention-2 class: scores never stored, causal blocks
    skipped; PyTorch SDPA, flash-attn 2), flash3 (the Hopper/Blackwell-native kernels:
    FlashAttention-3, cuDNN fused attention as TransformerEngine runs it; same as flash on older
    GPUs) or unfused (scores materialised in HBM, softmax as a separate kernel: Megatron before
    FlashAttention, Dao et al. 2022; kept to price older runs)."""
    recompute_layers: Optional[int] = None
    """With recompute=full: layers per pipeline stage whose activations are recomputed, the
    rest keep theirs (Megatron --recompute-method block; --recompute-num-layers is this divided
    by vpp). None = every layer. A negative value -q means q quarters of every stage's layers
    (what the search explores: 1/4, 1/2, 3/4)."""
    recompute_modules: Optional[tuple] = None
    """With recompute=selective: the submodules recomputed in every layer (Megatron-Core
    --recompute-modules, names in ``RECOMPUTE_MODULES``); None = ("core_attn",), Megatron's
    default. core_attn, mlp, moe and shared_experts keep only their input; layernorm,
    mla_up_proj and moe_act drop their output (the next GEMM's saved input) and run again
    before backward needs it."""
    kernels: str = "fused"
    """Elementwise kernels: fused (Megatron/TransformerEngine, torch.compile) or eager (plain
    PyTorch operators, e.g. torchtitan or llm-foundry without compile)."""
    loss: str = "unfused"
    """Cross-entropy kernel: unfused (Megatron's default vocab-parallel cross entropy: FP32
    passes over the logits, in place), fused (one kernel: Megatron --cross-entropy-loss-fusion,
    TransformerEngine or flash-attn cross entropy) or eager (torch.nn.functional.cross_entropy
    on FP32 logits, e.g. torchtitan, which does not compile its loss)."""
    tp_comm_overlap: bool = False
    """Overlap the tensor-parallel all-gathers / reduce-scatters with the GEMMs they feed
    (Megatron --tp-comm-overlap: TransformerEngine userbuffers, needs sequence parallelism).
    Off by default, as in Megatron."""
    moe_dispatcher: str = "alltoall"
    """MoE token dispatcher: alltoall (Megatron-Core's all-to-all, one copy per routed expert)
    or deepep (DeepEP via --moe-token-dispatcher-type flex: one network copy per destination
    node, forwarded over NVLink)."""
    ep_comm_overlap: bool = False
    """Hide the expert-parallel all-to-alls of one micro-batch behind the computation of
    another (Megatron-Core --overlap-moe-expert-parallel-comm --delay-wgrad-compute, MoE
    "batch-level overlapping"; needs an interleaved pipeline or pp = 1). Off by default."""
    grad_dtype: str = "fp32"
    """Dtype the gradients are accumulated, kept and reduced across data parallel in: fp32
    (Megatron's main_grad buffers, which --bf16 forces; FSDP reduce_dtype float32) or bf16
    (Megatron-Core DDP grad_reduce_in_fp32=False, NeMo optim.grad_sync_dtype=bf16, FSDP
    reduce_dtype bfloat16): half the gradient memory and half the reduce-scatter /
    all-reduce bytes."""
    zero3_gather: str = "prefetch"
    """ZeRO-3 parameter fetching: prefetch (one flat all-gather per layer / FSDP unit, issued
    ahead and hidden behind compute: FSDP, DeepSpeed since its coalesced gathers) or blocking
    (early DeepSpeed ZeRO-3, 2021: one all-gather per weight tensor, each after a
    torch.cuda.synchronize(), again after a recomputed forward, and one gradient reduce-scatter
    per parameter tensor, all in PyTorch's list form built from per-rank slices and copies;
    nothing overlaps; see costmodel.zero3_blocking)."""
    pp_first_layers: Optional[int] = None
    """Layers on the first pipeline stage; None = planner's split (see costmodel.pipeline)."""
    pp_last_layers: Optional[int] = None
    """Layers on the last pipeline stage; None = planner's split."""

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def sp(self) -> bool:
        return self.tp > 1 if self.sequence_parallel is None else bool(self.sequence_parallel and self.tp > 1)

    @property
    def grad_accum(self) -> int:
        """Micro-batches per step per pipeline (m): gbs / (dp * mbs)."""
        return self.gbs // (self.dp * self.mbs)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["sequence_parallel"] = self.sp
        d["grad_accum"] = self.grad_accum
        d["gpus"] = self.gpus
        return d


_BOOL_FIELDS = ("sp", "tp_overlap", "ep_overlap")

IMPLEMENTATION_DEFAULTS = {"attention": "flash", "kernels": "fused", "loss": "unfused", "tp_comm_overlap": False,
                           "ep_comm_overlap": False, "moe_dispatcher": "alltoall", "grad_dtype": "fp32",
                           "zero3_gather": "prefetch"}
"""How the framework runs the layout (``Layout`` fields that are not parallel degrees): the
search keeps them fixed at what the user states, and prices every candidate with them."""


def check_implementation(impl: dict) -> dict:
    """Validated implementation settings (None values dropped); one-line errors that name the
    option, the value and what is allowed."""
    from hardware_catalog.errors import PlannerInputError

    out = {}
    for key, value in (impl or {}).items():
        if value is None:
            continue
        if key not in IMPLEMENTATION_DEFAULTS:
            raise PlannerInputError(f"unknown implementation setting {key!r} (allowed: {', '.join(IMPLEMENTATION_DEFAULTS)})")
        allowed = {"attention": ATTENTION, "kernels": KERNELS, "loss": LOSSES, "moe_dispatcher": DISPATCHERS,
                   "grad_dtype": GRAD_DTYPES, "zero3_gather": ZERO3_GATHERS}.get(key)
        if allowed is not None and value not in allowed:
            raise PlannerInputError(f"--{key.replace('_', '-')}={value}: allowed {', '.join(allowed)}")
        if allowed is None and not isinstance(value, (bool, np.bool_)):
            raise PlannerInputError(f"--{key.replace('_', '-')}={value!r}: must be true or false")
        out[key] = value if allowed is not None else bool(value)
    return out


def implementation_columns(impl: dict) -> dict:
    """``LayoutBatch`` columns (codes) for implementation settings given as ``Layout`` values."""
    full = {**IMPLEMENTATION_DEFAULTS, **{k: v for k, v in (impl or {}).items() if v is not None}}
    return {
        "attention": ATTENTION.index(full["attention"]),
        "kernels": KERNELS.index(full["kernels"]),
        "loss": LOSSES.index(full["loss"]),
        "tp_overlap": bool(full["tp_comm_overlap"]),
        "ep_overlap": bool(full["ep_comm_overlap"]),
        "dispatcher": DISPATCHERS.index(full["moe_dispatcher"]),
        "grad_dtype": GRAD_DTYPES.index(full["grad_dtype"]),
        "zero3_gather": ZERO3_GATHERS.index(full["zero3_gather"]),
    }


def recompute_modules_mask(modules) -> int:
    """Bit mask of recompute module names (None: Megatron's default, core_attn)."""
    from hardware_catalog.errors import PlannerInputError

    names = DEFAULT_RECOMPUTE_MODULES if modules is None else tuple(modules)
    mask = 0
    for name in names:
        if name not in RECOMPUTE_MODULES:
            raise PlannerInputError(f"--recompute-modules: unknown module {name!r} (allowed: {', '.join(RECOMPUTE_MODULES)})")
        mask |= 1 << RECOMPUTE_MODULES.index(name)
    return mask


def recompute_module_bit(masks, name: str) -> np.ndarray:
    """1 where the bit mask(s) include module ``name``, else 0 (vectorized over masks)."""
    return (np.asarray(masks, dtype=np.int64) >> RECOMPUTE_MODULES.index(name)) & 1


def recompute_modules_names(mask: int) -> tuple:
    """Module names of a bit mask, in ``RECOMPUTE_MODULES`` order."""
    return tuple(name for i, name in enumerate(RECOMPUTE_MODULES) if int(mask) >> i & 1)


def parse_recompute_modules(value):
    """--recompute-modules as given (comma-separated text, or names) -> a tuple of known module
    names, or None when not given; one-line errors naming the bad value."""
    from hardware_catalog.errors import PlannerInputError

    if value is None:
        return None
    names = tuple(m.strip() for m in value.split(",") if m.strip()) if isinstance(value, str) else tuple(value)
    if not names:
        raise PlannerInputError(f"--recompute-modules={value!r}: name at least one of {', '.join(RECOMPUTE_MODULES)}")
    recompute_modules_mask(names)  # names an unknown module
    return names


_INT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "zero", "mbs", "gbs", "seq_len")

_OPTIONAL_CODES = {"recompute_layers": 0, "recompute_modules": recompute_modules_mask(None), "attention": 0,
                   "kernels": 0, "loss": 0, "dispatcher": 0, "ep_overlap": False, "tp_overlap": False,
                   "grad_dtype": 0, "zero3_gather": 0}
"""``LayoutBatch`` columns that may be left out, and the code they then take (the ``Layout``
default: every layer, core_attn, flash, fused kernels, unfused loss, alltoall, no overlap,
FP32 gradients, prefetching ZeRO-3)."""


@dataclass
class LayoutBatch:
    """N layouts as parallel int64 arrays (same fields as ``Layout``; enums as codes).

    ``pp_first_layers`` / ``pp_last_layers`` use 0 for "planner's split".
    """

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    vpp: np.ndarray
    zero: np.ndarray
    mbs: np.ndarray
    gbs: np.ndarray
    seq_len: np.ndarray
    recompute: np.ndarray
    """0 none, 1 selective, 2 full."""
    sp: np.ndarray
    """Sequence parallel on (bool; forced off where tp == 1)."""
    precision: np.ndarray
    """0 bf16, 1 fp8."""
    pp_first_layers: np.ndarray
    pp_last_layers: np.ndarray
    recompute_layers: np.ndarray = None
    """With full recompute: layers per stage recomputed; 0 = all; -q = q quarters of each stage."""
    recompute_modules: np.ndarray = None
    """With selective recompute: bit mask over ``RECOMPUTE_MODULES`` (1 = core_attn alone)."""
    attention: np.ndarray = None
    """0 flash, 1 unfused, 2 flash3."""
    kernels: np.ndarray = None
    """0 fused, 1 eager."""
    loss: np.ndarray = None
    """0 unfused, 1 fused, 2 eager cross entropy."""
    dispatcher: np.ndarray = None
    """0 alltoall, 1 deepep."""
    ep_overlap: np.ndarray = None
    """EP all-to-all overlapped across micro-batches (bool)."""
    tp_overlap: np.ndarray = None
    """TP communication overlapped with GEMMs (bool; only effective with sequence parallelism)."""
    grad_dtype: np.ndarray = None
    """0 fp32, 1 bf16 gradients."""
    zero3_gather: np.ndarray = None
    """0 prefetch, 1 blocking per-tensor ZeRO-3 gathers (early DeepSpeed)."""

    def __post_init__(self):
        for name, code in _OPTIONAL_CODES.items():
            if getattr(self, name) is None:
                setattr(self, name, np.full(self.tp.shape, code, dtype=bool if name in _BOOL_FIELDS else np.int64))

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    @classmethod
    def from_layouts(cls, layouts: list[Layout]) -> "LayoutBatch":
        cols: dict[str, list] = {f.name: [] for f in fields(cls)}
        for lay in layouts:
            for name in _INT_FIELDS:
                cols[name].append(getattr(lay, name))
            cols["recompute"].append(RECOMPUTE.index(lay.recompute))
            cols["precision"].append(PRECISIONS.index(lay.precision))
            cols["sp"].append(lay.sp)
            cols["pp_first_layers"].append(lay.pp_first_layers or 0)
            cols["pp_last_layers"].append(lay.pp_last_layers or 0)
            cols["recompute_layers"].append(lay.recompute_layers or 0)
            cols["recompute_modules"].append(recompute_modules_mask(lay.recompute_modules))
            cols["attention"].append(ATTENTION.index(lay.attention))
            cols["tp_overlap"].append(bool(lay.tp_comm_overlap))
            cols["ep_overlap"].append(bool(lay.ep_comm_overlap))
            cols["dispatcher"].append(DISPATCHERS.index(lay.moe_dispatcher))
            cols["kernels"].append(KERNELS.index(lay.kernels))
            cols["loss"].append(LOSSES.index(lay.loss))
            cols["grad_dtype"].append(GRAD_DTYPES.index(lay.grad_dtype))
            cols["zero3_gather"].append(ZERO3_GATHERS.index(lay.zero3_gather))
        arrays = {k: np.asarray(v, dtype=bool if k in _BOOL_FIELDS else np.int64) for k, v in cols.items()}
        return cls(**arrays)

    @classmethod
    def from_arrays(cls, **arrays) -> "LayoutBatch":
        """Build from broadcastable arrays/scalars; missing fields take ``Layout`` defaults."""
        defaults = Layout()
        full = {}
        for f in fields(cls):
            if f.name in arrays:
                full[f.name] = arrays[f.name]
            elif f.name == "recompute":
                full[f.name] = RECOMPUTE.index(defaults.recompute)
            elif f.name == "precision":
                full[f.name] = PRECISIONS.index(defaults.precision)
            elif f.name == "sp":
                full[f.name] = True
            elif f.name in ("pp_first_layers", "pp_last_layers"):
                full[f.name] = 0
            elif f.name in _OPTIONAL_CODES:
                full[f.name] = _OPTIONAL_CODES[f.name]
            else:
                full[f.name] = getattr(defaults, f.name)
        shaped = np.broadcast_arrays(*[np.asarray(v) for v in full.values()])
        out = {}
        for (name, _), arr in zip(full.items(), shaped):
            out[name] = np.ascontiguousarray(arr, dtype=bool if name in _BOOL_FIELDS else np.int64).reshape(-1)
        out["sp"] = out["sp"] & (out["tp"] > 1)
        return cls(**out)

    def take(self, index) -> "LayoutBatch":
        return LayoutBatch(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def layout(self, i: int) -> Layout:
        """The i-th layout as a ``Layout``."""
        kw = {name: int(getattr(self, name)[i]) for name in _INT_FIELDS}
        kw["recompute"] = RECOMPUTE[int(self.recompute[i])]
        kw["precision"] = PRECISIONS[int(self.precision[i])]
        kw["sequence_parallel"] = bool(self.sp[i])
        kw["pp_first_layers"] = int(self.pp_first_layers[i]) or None
        kw["pp_last_layers"] = int(self.pp_last_layers[i]) or None
        kw["recompute_layers"] = (int(self.recompute_layers[i]) or None) if kw["recompute"] == "full" else None
        mask = int(self.recompute_modules[i])
        kw["recompute_modules"] = recompute_modules_names(mask) if kw["recompute"] == "selective" and mask != 1 else None
        kw["attention"] = ATTENTION[int(self.attention[i])]
        kw["tp_comm_overlap"] = bool(self.tp_overlap[i])
        kw["ep_comm_overlap"] = bool(self.ep_overlap[i])
        kw["moe_dispatcher"] = DISPATCHERS[int(self.dispatcher[i])]
        kw["kernels"] = KERNELS[int(self.kernels[i])]
        kw["loss"] = LOSSES[int(self.loss[i])]
        kw["grad_dtype"] = GRAD_DTYPES[int(self.grad_dtype[i])]
        kw["zero3_gather"] = ZERO3_GATHERS[int(self.zero3_gather[i])]
        return Layout(**kw)
