"""The hard rules a parallel layout must meet, each named with a one-line description.

Every rule is usable two ways:

* a vectorized numpy check over a batch of layouts (``Rule.check`` / :func:`check_rules`), which
  returns a bool array (True = the layout obeys the rule). ``planner evaluate`` uses
  :func:`first_violation` to reject a user layout with one line naming the rule and the value,
  and the search uses :func:`removed_by_rule` to tell users which rule removed how many layouts;
* CP-SAT constraints (``Rule.add_cpsat``), used by :mod:`search.space` to enumerate every
  integer assignment that obeys the rules. Rules over one or two knobs become allowed-assignment
  tables computed *from the numpy check itself* (one source of truth); rules that couple several
  knobs through products (``tp*cp*pp*dp == gpus``, ``ep | dp*cp``, ``gbs % (dp*mbs)``...) are
  written as CP-SAT arithmetic. Rules over knobs that CP-SAT does not enumerate (ZeRO stage,
  recompute, precision, sequence parallel) have no CP-SAT form: the space filters their domains
  with the numpy check before broadcasting them.

Layouts are given as "columns": a mapping option name -> array (or scalar) of codes, as in a
``LayoutBatch`` (``costmodel.options``: choices as indices, flags as bools). A column a rule
reads but the mapping lacks takes the option's default. :func:`columns_of` builds the mapping
from a ``Layout``, a ``LayoutBatch`` or a dict. For a ``Layout`` the ``sequence_parallel``
column is what the user *asked for* (so ``sequence_parallel=True`` with ``tp=1`` breaks
``sequence_parallel_needs_tp``); a ``LayoutBatch`` has already forced it off where ``tp == 1``.

Every rule names its source. ``planner evaluate``, ``planner export``, ``planner validate`` and
the search all use this one rule set (``check_layout`` for one layout). Some rules depend on the
model alone (which recompute modules exist, whether MoE settings apply): ``check_settings``
rejects a search's fixed settings with them before anything is enumerated. Implementation
settings that apply only to some layouts (``tp_comm_overlap`` needs TP with SP,
``ep_comm_overlap`` an interleaved pipeline) are rules for a layout a user gives; the search
switches them on where they apply (``search.space``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

import numpy as np

from costmodel.layout import LayoutBatch
from costmodel.options import (
    DISPATCHERS, FP8_RECIPES, OPTIMIZER_STATES, OPTIONS, OPTIONS_BY_NAME, PRECISIONS, RECOMPUTE, RECOMPUTE_MODULES, TP_OVERLAP_KINDS, CP_COMM_TYPES, ZERO3_GATHERS,
    GRAD_ACCUMS, GRAD_REDUCES, FSDP_IMPLS,
    Layout,
)
from costmodel.pipeline import stage_layer_split, vpp_divides_stages
from costmodel.placement import cp_a2a_ranks
from hardware_catalog.hardware import is_whole_nodes, nearest_multiples


@dataclass(frozen=True)
class RuleContext:
    """What the rules need to know besides the layout: model shape, GPU count, hardware."""

    model: Any
    """``ModelSpec``."""
    gpus: int
    """GPUs in the job (tp*cp*pp*dp must equal it)."""
    scaleup_domain: int = 8
    """GPUs sharing the scale-up fabric (NVLink domain)."""
    has_fp8: bool = True
    """The GPU has FP8 tensor cores (``gpu.fp8_tflops is not None``)."""
    allow_cross_node_tp: bool = False
    """Allow tp larger than the scale-up domain."""
    has_mx: bool = True
    """The GPU's tensor cores take OCP MX block-scaled formats (Blackwell: those with FP4, ``gpu.fp4_tflops``)."""
    gpus_per_node: int = 8
    """GPUs per node: a job takes whole nodes (or part of one), what the rules' messages suggest keeps to."""

    @classmethod
    def build(cls, model, gpus: int, cluster=None, gpu=None, allow_cross_node_tp: bool = False) -> "RuleContext":
        domain = cluster.scaleup_domain_size if cluster is not None else 8
        has_fp8 = True if gpu is None else gpu.fp8_tflops is not None
        has_mx = True if gpu is None else getattr(gpu, "fp4_tflops", None) is not None
        node = cluster.gpus_per_node if cluster is not None else 8
        return cls(model=model, gpus=int(gpus), scaleup_domain=int(domain), has_fp8=has_fp8,
                   allow_cross_node_tp=bool(allow_cross_node_tp), has_mx=has_mx, gpus_per_node=int(node))

    @property
    def heads(self) -> int:
        return self.model.num_attention_heads

    @property
    def kv_heads(self) -> int:
        return self.model.kv_heads

    @property
    def num_layers(self) -> int:
        return self.model.num_layers

    @property
    def num_experts(self) -> int:
        """Routed experts (0 for a dense model)."""
        return self.model.moe.num_experts if self.model.moe is not None else 0

    @property
    def expert_ffn(self) -> int:
        return self.model.moe.expert_ffn_hidden_size if self.model.moe is not None else 0


Cols = Mapping[str, Any]


@dataclass(frozen=True)
class Rule:
    """One named hard rule."""

    name: str
    description: str
    fields: tuple[str, ...]
    """Columns the check reads."""
    check: Callable[[RuleContext, Cols], np.ndarray]
    """Vectorized check: True where the layout obeys the rule."""
    explain: Callable[[RuleContext, dict], str]
    """One-line reason for one violating layout (given as a dict of ints)."""
    cpsat: Optional[Callable] = None
    """``cpsat(ctx, sat, V, domains)`` adds CP-SAT constraints to the CP-SAT model ``sat`` over
    vars ``V``; None = table or broadcast rule (see module doc)."""
    source: str = ""
    """Where the rule comes from (the framework file that enforces it, or the paper)."""

    def __call__(self, ctx: RuleContext, cols: Cols) -> np.ndarray:
        return np.asarray(self.check(ctx, cols), dtype=bool)


def _a(cols: Cols, name: str, default=0) -> np.ndarray:
    v = cols.get(name, default) if hasattr(cols, "get") else getattr(cols, name, default)
    if v is None:
        v = default
    return np.asarray(v, dtype=np.int64)


def _f(cols: Cols, name: str, default=0.0) -> np.ndarray:
    """A FLOAT option's column (``_a`` for real numbers)."""
    v = cols.get(name, default) if hasattr(cols, "get") else getattr(cols, name, default)
    return np.asarray(default if v is None else v, dtype=np.float64)


def _pos(x: np.ndarray) -> np.ndarray:
    """x with values < 1 replaced by 1 (safe divisor; the positivity rule reports them)."""
    return np.maximum(x, 1)


# ----------------------------------------------------------------------------------------- checks


def _degrees_positive(ctx, c):
    ok = np.ones(np.broadcast(*[_a(c, k, 1) for k in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp")]).shape, bool)
    for k in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp"):
        ok = ok & (_a(c, k, 1) >= 1)
    return ok


def _product(ctx, c):
    return _a(c, "tp", 1) * _a(c, "cp", 1) * _a(c, "pp", 1) * _a(c, "dp", 1) == ctx.gpus


def _tp_heads(ctx, c):
    tp = _pos(_a(c, "tp", 1))
    return (ctx.heads % tp == 0) & ((ctx.kv_heads % tp == 0) | (tp % ctx.kv_heads == 0))


def _tp_domain(ctx, c):
    tp = _pos(_a(c, "tp", 1))
    d = ctx.scaleup_domain
    size_ok = np.ones(tp.shape, bool) if ctx.allow_cross_node_tp else tp <= d
    return size_ok & ((d % tp == 0) | (tp % d == 0))


def _split(ctx, c):
    pp = _pos(_a(c, "pp", 1))
    return stage_layer_split(ctx.num_layers, pp, _a(c, "pp_first_layers"), _a(c, "pp_last_layers"))


def _pp_split(ctx, c):
    pp = _a(c, "pp", 1)
    first, last = _a(c, "pp_first_layers"), _a(c, "pp_last_layers")
    *_, valid = _split(ctx, c)
    # One stage has no first and last to size: a stated split needs pp > 1.
    return valid & (pp <= ctx.num_layers) & (first >= 0) & (last >= 0) & ((pp > 1) | ((first <= 0) & (last <= 0)))


def _vpp_layers(ctx, c):
    f, m, l, _ = _split(ctx, c)
    vpp = _pos(_a(c, "vpp", 1))
    # A stage with <= 0 layers (invalid split) is reported by pp_stage_split, not here.
    return vpp_divides_stages(np.maximum(f, 0), np.maximum(m, 0), np.maximum(l, 0), vpp) | (vpp == 1)


def _vpp_needs_pp(ctx, c):
    return (_a(c, "vpp", 1) <= 1) | (_a(c, "pp", 1) > 1)


def _cp_divides_seq(ctx, c):
    cp = _pos(_a(c, "cp", 1))
    seq = _a(c, "seq_len", 4096)
    return (cp == 1) | (seq % (2 * cp) == 0)


def _ep_experts(ctx, c):
    ep = _pos(_a(c, "ep", 1))
    if ctx.num_experts == 0:
        return ep == 1
    return ctx.num_experts % ep == 0


def _ep_dp_cp(ctx, c):
    # Megatron-Core MoE parallel folding: the expert layers re-split the tp*cp*dp ranks of a
    # stage as etp x ep x expert-dp, so ep*etp must divide tp*cp*dp.
    ep = _pos(_a(c, "ep", 1)) * _pos(_a(c, "etp", 1))
    return (_a(c, "tp", 1) * _a(c, "dp", 1) * _a(c, "cp", 1)) % ep == 0


def _etp_ffn(ctx, c):
    etp = _pos(_a(c, "etp", 1))
    if ctx.num_experts == 0:
        return etp == 1
    return ctx.expert_ffn % etp == 0


def _mbs_positive(ctx, c):
    return _a(c, "mbs", 1) >= 1


def _gbs_dp_mbs(ctx, c):
    gbs = _a(c, "gbs", 1)
    dm = _pos(_a(c, "dp", 1)) * _pos(_a(c, "mbs", 1))
    return (gbs >= 1) & (gbs % dm == 0)


def _interleave_m(ctx, c):
    vpp = _a(c, "vpp", 1)
    pp = _pos(_a(c, "pp", 1))
    m = _a(c, "gbs", 1) // (_pos(_a(c, "dp", 1)) * _pos(_a(c, "mbs", 1)))
    return (vpp <= 1) | (m % pp == 0)


def _zero(ctx, c):
    z = _a(c, "zero", 1)
    return (z >= 0) & (z <= 3)


def _sp(ctx, c):
    sp = np.asarray(c.get("sequence_parallel", False)).astype(bool)  # None (auto) -> False
    return ~sp | (_a(c, "tp", 1) > 1)


def _moe_tp_sp(ctx, c):
    tp = _a(c, "tp", 1)
    if getattr(ctx.model, "moe", None) is None:
        return np.ones(np.shape(tp), dtype=bool)
    sp = c.get("sequence_parallel", None)
    on = np.ones(np.shape(tp), dtype=bool) if sp is None else np.asarray(sp).astype(bool)  # None: on where tp > 1
    return (tp == 1) | on


def _x_moe_tp_sp(ctx, v):
    return (f"an MoE model at tp={v.get('tp', 1)} needs sequence parallelism (got sequence_parallel off): "
            "Megatron-Core refuses to train MoE layers under TP without it")


def _recompute(ctx, c):
    r = _a(c, "recompute", 1)
    return (r >= 0) & (r < len(RECOMPUTE))


def _precision(ctx, c):
    p = _a(c, "precision", 0)
    ok = (p >= 0) & (p < len(PRECISIONS))
    if not ctx.has_fp8:
        ok = ok & (p != PRECISIONS.index("fp8"))
    return ok


# ------------------------------------------------------------------------------------ explanations


def _x_positive(ctx, v):
    bad = [f"{k}={v.get(k, 1)}" for k in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp") if v.get(k, 1) < 1]
    return f"parallel degrees must be >= 1 ({', '.join(bad)})"


def _nearest_multiples(value: int, step: int) -> str:
    """'96 or 128': the multiples of ``step`` either side of ``value`` (the one above alone when
    none is below)."""
    below, above = nearest_multiples(value, step)
    return f"{below} or {above}" if below else f"{above}"


def _nearest_gpu_counts(gpus: int, step: int, node: int) -> str:
    """'80 or 120': the multiples of ``step`` either side of ``gpus`` that are whole nodes (or at
    most one node), as ``hardware_catalog.check_whole_nodes`` asks of a job."""
    step, node = max(int(step), 1), max(int(node), 1)
    below = next((n for n in range((gpus // step) * step, 0, -step) if is_whole_nodes(n, node)), None)
    first_above = nearest_multiples(gpus, step)[1]
    above = next(n for n in range(first_above, first_above + step * node + 1, step) if is_whole_nodes(n, node))
    return f"{below} or {above}" if below else f"{above}"


def _x_product(ctx, v):
    model_parallel = v["tp"] * v["cp"] * v["pp"]
    if model_parallel and ctx.gpus % model_parallel:
        return (f"tp*cp*pp = {v['tp']}*{v['cp']}*{v['pp']} = {model_parallel} does not divide the GPU count "
                f"(--gpus={ctx.gpus}); dp = gpus / (tp*cp*pp) must be a whole number "
                f"(nearest: --gpus {_nearest_gpu_counts(ctx.gpus, model_parallel, ctx.gpus_per_node)})")
    g = model_parallel * v["dp"]
    return f"tp*cp*pp*dp = {v['tp']}*{v['cp']}*{v['pp']}*{v['dp']} = {g} must equal the GPU count {ctx.gpus}"


def _x_tp_heads(ctx, v):
    return (f"tp={v['tp']} must divide the {ctx.heads} attention heads and divide or be a multiple of "
            f"the {ctx.kv_heads} kv heads")


def _x_tp_domain(ctx, v):
    d = ctx.scaleup_domain
    if v["tp"] > d and not ctx.allow_cross_node_tp:
        return f"tp={v['tp']} exceeds the scale-up domain of {d} GPUs (allowed: tp <= {d}, or --allow-cross-node-tp)"
    return f"tp={v['tp']} must divide or be a multiple of the scale-up domain size {d}"


def _x_pp(ctx, v):
    pp = v["pp"]
    if pp > ctx.num_layers:
        return f"pp={pp} exceeds the {ctx.num_layers} layers"
    if pp == 1 and (v.get("pp_first_layers", 0) or v.get("pp_last_layers", 0)):
        return (f"pp=1 has one stage, so first/last stage layers {v.get('pp_first_layers', 0) or 'auto'}/"
                f"{v.get('pp_last_layers', 0) or 'auto'} split nothing (they need pp > 1)")
    f, m, l, _ = stage_layer_split(ctx.num_layers, pp, v.get("pp_first_layers", 0), v.get("pp_last_layers", 0))
    stages = f"{int(f)}/{int(l)}, first/last" if pp == 2 else f"{int(f)}/{int(m)}/{int(l)}, first/middle/last"
    return (f"pp={pp} with first/last stage layers {v.get('pp_first_layers', 0) or 'auto'}/"
            f"{v.get('pp_last_layers', 0) or 'auto'} gives no valid split of {ctx.num_layers} layers "
            f"(stages {stages})")


def _x_vpp_layers(ctx, v):
    f, m, l, _ = stage_layer_split(ctx.num_layers, v["pp"], v.get("pp_first_layers", 0), v.get("pp_last_layers", 0))
    return (f"vpp={v['vpp']} does not split the pipeline stages into model chunks (first/middle/last "
            f"layers = {int(f)}/{int(m)}/{int(l)} at pp={v['pp']}; see costmodel.pipeline.vpp_divides_stages)")


def _x_vpp_pp(ctx, v):
    return f"vpp={v['vpp']} (interleaved schedule) needs pp > 1 (pp={v['pp']})"


def _x_cp(ctx, v):
    return (f"cp={v['cp']}: seq_len={v['seq_len']} must be divisible by 2*cp={2 * v['cp']} "
            f"(load-balanced ring attention)")


def _x_ep(ctx, v):
    if ctx.num_experts == 0:
        return f"ep={v['ep']} but the model is dense (ep must be 1)"
    return f"ep={v['ep']} must divide the {ctx.num_experts} experts"


def _x_ep_dp(ctx, v):
    etp = v.get("etp", 1)
    return (f"ep*etp={v['ep']}*{etp} must divide tp*cp*dp = {v['tp']}*{v['cp']}*{v['dp']} = "
            f"{v['tp'] * v['cp'] * v['dp']} (MoE parallel folding)")


def _x_etp(ctx, v):
    if ctx.num_experts == 0:
        return f"etp={v['etp']} but the model is dense (etp must be 1)"
    return f"etp={v['etp']} must divide the expert ffn hidden size {ctx.expert_ffn}"


def _x_mbs(ctx, v):
    return f"mbs={v['mbs']} must be >= 1"


def _x_gbs(ctx, v):
    step = v["dp"] * v["mbs"]
    return (f"gbs={v['gbs']} must be divisible by dp*mbs = {v['dp']}*{v['mbs']} = {step} "
            f"(nearest: --gbs {_nearest_multiples(v['gbs'], step)})")


def _x_interleave(ctx, v):
    m = v["gbs"] // max(v["dp"] * v["mbs"], 1)
    step = v["dp"] * v["mbs"] * v["pp"]
    return (f"interleaved schedule (vpp={v['vpp']}): micro-batches gbs/(dp*mbs) = {m} must be "
            f"divisible by pp={v['pp']} (nearest: --gbs {_nearest_multiples(v['gbs'], step)})")


def _x_zero(ctx, v):
    return f"zero={v['zero']} must be 0, 1, 2 or 3"


def _x_sp(ctx, v):
    return f"sequence parallel needs tp > 1 (tp={v['tp']})"


def _partial_recompute(ctx, c):
    some = (_a(c, "recompute_layers", 0) != 0) | (_a(c, "recompute_share", 0) != 0)
    return ~some | (_a(c, "recompute", 1) == RECOMPUTE.index("full"))


def _x_partial_recompute(ctx, v):
    what = (f"recompute_layers={v.get('recompute_layers')}" if v.get("recompute_layers")
            else f"recompute_share={v.get('recompute_share')}/4")
    return (f"{what}: recomputing only some layers applies only with "
            f"--recompute full (got {_name(RECOMPUTE, v.get('recompute', 1))})")


def _recompute_layers_fit(ctx, c):
    rl = _a(c, "recompute_layers", 0)
    vpp = _pos(_a(c, "vpp", 1))
    f, m, l, _ = _split(ctx, c)
    most = np.maximum(np.maximum(f, m), l)
    return (rl == 0) | ((rl % vpp == 0) & (rl <= most))  # 0: every layer


def _x_recompute_layers_fit(ctx, v):
    rl, vpp = v.get("recompute_layers", 0), max(v.get("vpp", 1), 1)
    f, m, l, _ = stage_layer_split(ctx.num_layers, v.get("pp", 1), v.get("pp_first_layers", 0), v.get("pp_last_layers", 0))
    most = int(max(f, m, l))
    if rl > most:
        return f"recompute_layers={rl} (layers per pipeline stage) exceeds the {most} layers of the largest stage"
    if rl % vpp:
        below = rl // vpp * vpp
        hint = f"{below} or {below + vpp}" if below else f"{vpp}"
        return (f"recompute_layers={rl} (layers per pipeline stage) must be a multiple of vpp={vpp}: Megatron "
                f"recomputes --recompute-num-layers layers of each of the stage's {vpp} model chunks (e.g. {hint})")
    return f"recompute_layers={rl} (layers per pipeline stage) is allowed"  # not reached: the rule holds


def _name(choices, code) -> str:
    return choices[code] if 0 <= code < len(choices) else str(code)


def _tp_overlap(ctx, c):
    on = np.asarray(c.get("tp_comm_overlap", False)).astype(bool)
    sp = np.asarray(c.get("sequence_parallel", False)).astype(bool)
    return ~on | (sp & (_a(c, "tp", 1) > 1))


def _x_tp_overlap(ctx, v):
    return (f"tp_comm_overlap needs tp > 1 and sequence parallelism (got tp={v['tp']}, "
            f"sequence_parallel={'on' if v.get('sequence_parallel') else 'off'})")


def _ep_overlap_interleaved(ctx, c):
    on = np.asarray(c.get("ep_comm_overlap", False)).astype(bool)
    return ~on | (_a(c, "vpp", 1) > 1) | (_a(c, "pp", 1) == 1)


def _x_ep_overlap_interleaved(ctx, v):
    return (f"ep_comm_overlap needs an interleaved pipeline (vpp > 1) or pp = 1: the batch-level overlap pairs "
            f"chunks of the interleaved schedule (got pp={v['pp']}, vpp={v['vpp']})")


def _ep_overlap_moe(ctx, c):
    on = np.asarray(c.get("ep_comm_overlap", False)).astype(bool)
    return ~on | (ctx.num_experts > 0)


def _x_ep_overlap_moe(ctx, v):
    return f"ep_comm_overlap hides MoE all-to-alls, and {ctx.model.name} is dense"


def _dispatcher_moe(ctx, c):
    return (_a(c, "moe_dispatcher", 0) == DISPATCHERS.index("alltoall")) | (ctx.num_experts > 0)


def _x_dispatcher_moe(ctx, v):
    return (f"moe_dispatcher={_name(DISPATCHERS, v.get('moe_dispatcher', 0))} routes MoE tokens, and "
            f"{ctx.model.name} is dense (only alltoall, the default, applies)")


def _imbalance_moe(ctx, c):
    return (_f(c, "moe_imbalance", 1.0) == 1.0) | (ctx.num_experts > 0)


def _x_imbalance_moe(ctx, v):
    return (f"moe_imbalance={float(v.get('moe_imbalance', 1.0)):g} is the routers' load imbalance, and "
            f"{ctx.model.name} is dense (only 1, the default, applies)")


def _capacity_moe(ctx, c):
    return (_f(c, "moe_capacity_factor", 0.0) == 0.0) | (ctx.num_experts > 0)


def _x_capacity_moe(ctx, v):
    return (f"moe_capacity_factor={float(v.get('moe_capacity_factor', 0.0)):g} caps what each expert takes, and "
            f"{ctx.model.name} is dense (only 0, dropless, applies)")


def _pad_capacity(ctx, c):
    on = np.asarray(c.get("moe_pad_to_capacity", False)).astype(bool)
    return ~on | ((_f(c, "moe_capacity_factor", 0.0) > 0.0) & (_a(c, "moe_dispatcher", 0) != DISPATCHERS.index("deepep")))


def _x_pad_capacity(ctx, v):
    if _name(DISPATCHERS, v.get("moe_dispatcher", 0)) == "deepep":
        return ("moe_pad_to_capacity with moe_dispatcher=deepep: the flex dispatcher's DeepEP backend does not pad "
                "to capacity (use alltoall or hybridep)")
    return ("moe_pad_to_capacity pads each expert's input to its capacity, and there is none: set "
            f"moe_capacity_factor > 0 (got {float(v.get('moe_capacity_factor', 0.0)):g}, dropless)")


def _modules_selective(ctx, c):
    default = OPTIONS_BY_NAME["recompute_modules"].default_code
    return (_a(c, "recompute_modules", default) == default) | (_a(c, "recompute", 1) == RECOMPUTE.index("selective"))


def _x_modules_selective(ctx, v):
    return (f"recompute_modules={','.join(_module_names(v.get('recompute_modules', 1)))} applies only with --recompute "
            f"selective (it applies only to selective recompute; got {_name(RECOMPUTE, v.get('recompute', 1))})")


def _dp_shard(ctx, c):
    shard = _a(c, "dp_shard", 0)
    dp = _a(c, "dp", 1)
    return (shard == 0) | ((_a(c, "zero", 1) >= 1) & (dp % np.maximum(shard, 1) == 0))


def _x_dp_shard(ctx, v):
    # Name the half that fails: "needs zero >= 1 (got zero=3)" read as if ZeRO-3 were the fault.
    shard, dp, zero = v.get("dp_shard"), v["dp"], v["zero"]
    why = []
    if shard and dp % shard:
        why.append(f"dp_shard={shard} must divide dp={dp}")
    if zero < 1:
        why.append(f"dp_shard={shard} needs zero >= 1 to shard anything (got zero={zero})")
    return "; ".join(why) or f"dp_shard={shard} must divide dp={dp} and needs zero >= 1"


def _cp_comm_type_cp(ctx, c):
    return (_a(c, "cp_comm_type", 0) == 0) | (_a(c, "cp", 1) > 1)


def _x_cp_comm_type_cp(ctx, v):
    return (f"cp_comm_type={_name(CP_COMM_TYPES, v.get('cp_comm_type', 0))} says how context parallelism "
            f"communicates: it needs cp > 1 (got cp={v.get('cp', 1)})")


def _cp_a2a_heads(ctx, c):
    tp = np.maximum(_a(c, "tp", 1), 1)
    a2a = cp_a2a_ranks(_a(c, "cp_comm_type", 0), _a(c, "cp", 1), tp, ctx.scaleup_domain)
    heads_per_tp = ctx.heads // tp
    kv_per_tp = np.maximum(ctx.kv_heads // tp, 1)
    return (heads_per_tp % a2a == 0) & (kv_per_tp % a2a == 0)


def _x_cp_a2a_heads(ctx, v):
    tp = max(int(v.get("tp", 1)), 1)
    kind = v.get("cp_comm_type", 0)
    a2a = int(np.asarray(cp_a2a_ranks(kind, v.get("cp", 1), tp, ctx.scaleup_domain)).reshape(-1)[0])
    return (f"cp_comm_type={_name(CP_COMM_TYPES, kind)} splits the heads over its {a2a} all-to-all ranks: the "
            f"{ctx.heads // tp} query and {max(ctx.kv_heads // tp, 1)} KV heads of each tp={tp} rank ({ctx.heads} and "
            f"{ctx.kv_heads} in all) must divide by {a2a} (cp={v.get('cp', 1)})")


def _window_cp_comm_type(ctx, c):
    if getattr(ctx.model, "sliding_window", None) is None:
        return np.ones(np.shape(_a(c, "cp", 1)), dtype=bool)
    kind = _a(c, "cp_comm_type", 0)
    return (_a(c, "cp", 1) == 1) | (kind == CP_COMM_TYPES.index("a2a")) | (kind == CP_COMM_TYPES.index("allgather"))


def _x_window_cp_comm_type(ctx, v):
    return (f"cp_comm_type={_name(CP_COMM_TYPES, v.get('cp_comm_type', 0))} with cp={v.get('cp', 1)}: "
            f"TransformerEngine runs sliding-window attention (window {ctx.model.sliding_window}) under context "
            "parallelism only as a2a or allgather (--cp-comm-type a2a | allgather)")


def _tp_overlap_kind(ctx, c):
    on = np.asarray(c.get("tp_comm_overlap", False)).astype(bool)
    return (_a(c, "tp_overlap_kind", 0) == 0) | on


def _x_tp_overlap_kind(ctx, v):
    return (f"tp_overlap_kind={_name(TP_OVERLAP_KINDS, v.get('tp_overlap_kind', 0))} says how TP overlap runs: "
            "it needs tp_comm_overlap on")


def _tp_overlap_rs_ring(ctx, c):
    ring = np.asarray(c.get("tp_overlap_rs_ring", False)).astype(bool)
    on = np.asarray(c.get("tp_comm_overlap", False)).astype(bool)
    return ~ring | (on & (_a(c, "tp_overlap_kind", 0) == TP_OVERLAP_KINDS.index("userbuffers")))


def _x_tp_overlap_rs_ring(ctx, v):
    return ("tp_overlap_rs_ring says how TransformerEngine's userbuffers run the TP reduce-scatters: it needs "
            "tp_comm_overlap on with tp_overlap_kind userbuffers")


def _block_scaling(ctx, c):
    recipe = _a(c, "fp8_recipe", 0)
    block = (recipe == FP8_RECIPES.index("mxfp8")) | (recipe == FP8_RECIPES.index("nvfp4"))
    return ~(block & (_a(c, "precision", 0) == PRECISIONS.index("fp8"))) | ctx.has_mx


def _x_block_scaling(ctx, v):
    name = _name(FP8_RECIPES, v.get("fp8_recipe", 0))
    return (f"fp8_recipe={name} needs tensor cores that apply block scales (MXFP8, NVFP4: Blackwell); "
            "use delayed, current or blockwise")


def _cpu_offload(ctx, c):
    n = _a(c, "cpu_offload_layers", 0)
    return (n == 0) | ((_a(c, "pp", 1) == 1) & (n < ctx.num_layers))


def _x_cpu_offload(ctx, v):
    return (f"cpu_offload_layers={v.get('cpu_offload_layers')} needs pp = 1 (got pp={v.get('pp', 1)}) and fewer "
            f"layers than the model's {ctx.num_layers}")


def _grad_reduce(ctx, c):
    return (_a(c, "grad_reduce", 0) == 0) | (_a(c, "zero", 1) == 1)


def _x_grad_reduce(ctx, v):
    return (f"grad_reduce={_name(GRAD_REDUCES, v.get('grad_reduce', 0))} sets how ZeRO-1 reduces gradients "
            f"(got zero={v['zero']}; ZeRO-0 all-reduces anyway, ZeRO-2/3 reduce-scatter into their shard)")


def _zero3_gather(ctx, c):
    return (_a(c, "zero3_gather", 0) == 0) | (_a(c, "zero", 1) == 3)


def _x_zero3_gather(ctx, v):
    return f"zero3_gather={_name(ZERO3_GATHERS, v.get('zero3_gather', 0))} sets how ZeRO-3 fetches weights (got zero={v['zero']})"


def _fp8_param_gather(ctx, c):
    return (_a(c, "fp8_param_gather", 0) == 0) | (_a(c, "precision", 0) != PRECISIONS.index("fp8")) | (_a(c, "zero", 1) >= 1)


def _x_fp8_param_gather(ctx, v):
    return f"fp8_param_gather needs a sharded optimizer or FSDP, zero >= 1 (got zero={v.get('zero', 1)})"


def _optimizer_states(ctx, c):
    fp8_params = (_a(c, "fp8_param_gather", 0) != 0) & (_a(c, "precision", 0) == PRECISIONS.index("fp8"))
    return (_a(c, "optimizer_states", 0) == OPTIMIZER_STATES.index("fp32")) | ~fp8_params


def _x_optimizer_states(ctx, v):
    return (f"optimizer_states={_name(OPTIMIZER_STATES, v.get('optimizer_states', 0))} needs BF16 parameters: with "
            "FP8 parameters (fp8_param_gather) the optimizer keeps an FP32 master (use optimizer_states fp32)")


def model_recompute_modules(model) -> tuple[str, ...]:
    """The recompute modules ``model`` has (Megatron-Core TransformerConfig: mla_up_proj needs
    multi-latent attention, moe_act / moe an MoE layer, shared_experts shared experts; mlp is
    the dense MLP, so only where dense layers exist), in ``RECOMPUTE_MODULES`` order."""
    moe = model.moe
    present = {"core_attn", "layernorm"}
    if moe is None or moe.num_dense_layers > 0 or moe.moe_layer_frequency > 1:
        present.add("mlp")
    if model.mla is not None:
        present.add("mla_up_proj")
    if moe is not None:
        present |= {"moe_act", "moe"}
        if moe.num_shared_experts > 0:
            present.add("shared_experts")
    return tuple(name for name in RECOMPUTE_MODULES if name in present)


def _module_names(mask) -> list[str]:
    return [name for i, name in enumerate(RECOMPUTE_MODULES) if int(mask) >> i & 1]


def _modules_exist(ctx, c):
    allowed = 0
    for name in model_recompute_modules(ctx.model):
        allowed |= 1 << RECOMPUTE_MODULES.index(name)
    mask = _a(c, "recompute_modules", OPTIONS_BY_NAME["recompute_modules"].default_code)
    return (mask & ~allowed) == 0


def _x_modules_exist(ctx, v):
    have = model_recompute_modules(ctx.model)
    missing = [n for n in _module_names(v.get("recompute_modules", 1)) if n not in have]
    return (f"recompute_modules: {ctx.model.name} has no {', '.join(missing)} module "
            f"(its modules: {', '.join(have)})")


def _x_recompute(ctx, v):
    return f"recompute code {v['recompute']} is not one of {', '.join(RECOMPUTE)}"


def _x_precision(ctx, v):
    p = v.get("precision", 0)
    if 0 <= p < len(PRECISIONS):
        return f"precision={PRECISIONS[p]} needs a GPU with FP8 tensor cores (this GPU has none; use bf16)"
    return f"precision code {p} is not one of {', '.join(PRECISIONS)}"


# ---------------------------------------------------------------------------- CP-SAT (coupled rules)
# V: dict of CP-SAT IntVars (or ints) for tp cp pp dp ep etp vpp mbs (+ aux created here); the
# constants gbs / seq_len arrive in ``domains`` as one-value tuples. Aux vars are functionally
# determined, so an enumeration of all solutions yields each assignment exactly once.


def _mul(sat, V, name, a, b, ub):
    if name not in V:
        v = sat.new_int_var(0, ub, name)
        sat.add_multiplication_equality(v, [V[a] if isinstance(a, str) else a, V[b] if isinstance(b, str) else b])
        V[name] = v
    return V[name]


def _sat_positive(ctx, sat, V, domains):
    for k in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp"):
        if k in V:
            sat.add(V[k] >= 1)


def _sat_product(ctx, sat, V, domains):
    g = ctx.gpus
    tc = _mul(sat, V, "_tc", "tp", "cp", g * g)
    tcp = _mul(sat, V, "_tcp", tc, "pp", g * g)
    sat.add_multiplication_equality(g, [tcp, V["dp"]])


def _sat_ep_dp(ctx, sat, V, domains):
    g = ctx.gpus
    dc = _mul(sat, V, "_dc", "dp", "cp", g * g)
    tdc = sat.new_int_var(1, g * g * 8, "_tdc")
    sat.add_multiplication_equality(tdc, [dc, V["tp"]])
    ee = sat.new_int_var(1, g * g, "_ep_etp")
    sat.add_multiplication_equality(ee, [V["ep"], V["etp"]] if "etp" in V else [V["ep"], 1])
    k = sat.new_int_var(1, max(g, 1) * 8, "_tdc_over_ep")
    sat.add_multiplication_equality(tdc, [ee, k])


def _gbs_value(domains) -> int:
    (gbs,) = domains["gbs"]
    return int(gbs)


def _sat_gbs(ctx, sat, V, domains):
    gbs = _gbs_value(domains)
    dm = _mul(sat, V, "_dm", "dp", "mbs", max(gbs, 1) * 64)
    mvar = sat.new_int_var(1, max(gbs, 1), "_m")
    sat.add_multiplication_equality(gbs, [dm, mvar])
    V["_m"] = mvar


def _sat_interleave(ctx, sat, V, domains):
    gbs = _gbs_value(domains)
    if "_m" not in V:
        _sat_gbs(ctx, sat, V, domains)
    b = sat.new_bool_var("_interleaved")
    sat.add(V["vpp"] >= 2).only_enforce_if(b)
    sat.add(V["vpp"] <= 1).only_enforce_if(~b)
    q = sat.new_int_var(0, max(gbs, 1), "_m_over_pp")
    pq = sat.new_int_var(0, max(gbs, 1) * max(ctx.num_layers, 1), "_pp_q")
    sat.add_multiplication_equality(pq, [V["pp"], q])
    sat.add(pq == V["_m"]).only_enforce_if(b)
    sat.add(q == 0).only_enforce_if(~b)


# ------------------------------------------------------------------------------------- rule table

_MEGATRON_ARGS = "Megatron-LM megatron/training/arguments.py (validate_args)"
_MCORE_TCFG = "Megatron-LM megatron/core/transformer/transformer_config.py"
_MCORE_MOE = "Megatron-Core MoE README (parallel folding, batch-level overlapping)"

RULES: tuple[Rule, ...] = (
    Rule("degrees_positive", "every parallel degree (tp pp dp cp ep etp vpp) is >= 1",
         ("tp", "pp", "dp", "cp", "ep", "etp", "vpp"), _degrees_positive, _x_positive, _sat_positive,
         source="a degree counts GPUs or stages"),
    Rule("degrees_multiply_to_gpus", "tp * cp * pp * dp equals the GPU count",
         ("tp", "cp", "pp", "dp"), _product, _x_product, _sat_product,
         source="Megatron-Core parallel_state.initialize_model_parallel (world size = tp*cp*pp*dp)"),
    Rule("tp_divides_heads", "tp divides the attention heads, and divides the kv heads or is a multiple "
         "of them (KV-head replication)", ("tp",), _tp_heads, _x_tp_heads,
         source="Megatron-LM megatron/core/transformer/attention.py (heads split over TP)"),
    Rule("tp_within_scaleup_domain", "tp fits in the scale-up (NVLink) domain unless cross-node TP is "
         "allowed, and divides or is a multiple of the domain size", ("tp",), _tp_domain, _x_tp_domain,
         source="Narayanan et al. 2021, Sec. 3.2 (TP across nodes is communication-bound)"),
    Rule("pp_stage_split", "pp <= layers and the layers split validly over the stages "
         "(costmodel.pipeline.stage_layer_split)", ("pp", "pp_first_layers", "pp_last_layers"), _pp_split, _x_pp,
         source=_MCORE_TCFG + " (uneven pipeline checks)"),
    Rule("vpp_divides_stage_layers", "vpp splits every pipeline stage into equal model chunks "
         "(costmodel.pipeline.vpp_divides_stages)",
         ("pp", "vpp", "pp_first_layers", "pp_last_layers"), _vpp_layers, _x_vpp_layers, source=_MCORE_TCFG),
    Rule("vpp_needs_pipeline", "an interleaved schedule (vpp > 1) needs pp > 1", ("pp", "vpp"), _vpp_needs_pp, _x_vpp_pp,
         source=_MEGATRON_ARGS),
    Rule("cp_divides_seq", "seq_len is divisible by 2*cp when cp > 1 (load-balanced ring attention)",
         ("cp", "seq_len"), _cp_divides_seq, _x_cp, source="Megatron-Core context parallel docs (2*cp chunks)"),
    Rule("ep_divides_experts", "ep divides the number of experts (ep = 1 for a dense model)", ("ep",), _ep_experts, _x_ep,
         source=_MEGATRON_ARGS),
    Rule("ep_divides_dp_cp", "ep * etp divides tp * cp * dp (MoE parallel folding re-splits a stage's ranks)",
         ("ep", "etp", "tp", "dp", "cp"), _ep_dp_cp, _x_ep_dp, _sat_ep_dp,
         source="Megatron-LM megatron/core/parallel_state.py (expert rank grid)"),
    Rule("etp_divides_expert_ffn", "etp divides the expert ffn hidden size (etp = 1 for a dense model)",
         ("etp",), _etp_ffn, _x_etp, source="Megatron-LM megatron/core/tensor_parallel/layers.py"),
    Rule("mbs_positive", "the micro-batch size is >= 1", ("mbs",), _mbs_positive, _x_mbs,
         source="a micro-batch holds whole sequences"),
    Rule("gbs_divisible_by_dp_mbs", "the global batch is divisible by dp * mbs",
         ("gbs", "dp", "mbs"), _gbs_dp_mbs, _x_gbs, _sat_gbs,
         source="Megatron-LM megatron/core/num_microbatches_calculator.py"),
    Rule("interleaved_microbatches_divisible_by_pp", "with vpp > 1 the micro-batch count gbs/(dp*mbs) is "
         "divisible by pp (Megatron interleaved 1F1B)", ("gbs", "dp", "mbs", "vpp", "pp"), _interleave_m,
         _x_interleave, _sat_interleave, source="Megatron-LM megatron/core/pipeline_parallel/schedules.py"),
    Rule("zero_stage_valid", "the ZeRO stage is 0, 1, 2 or 3", ("zero",), _zero, _x_zero,
         source="Rajbhandari et al. 2020, Sec. 5"),
    Rule("sequence_parallel_needs_tp", "sequence parallelism needs tp > 1", ("sequence_parallel", "tp"), _sp, _x_sp,
         source="Korthikanti et al. 2022, Sec. 4.2.2 (SP splits along the TP group)"),
    Rule("moe_tp_needs_sequence_parallel", "an MoE model under tp > 1 runs with sequence parallelism",
         ("sequence_parallel", "tp"), _moe_tp_sp, _x_moe_tp_sp,
         source="Megatron-Core transformer/moe/moe_layer.py MoELayer.forward (core_r0.9.0 to d98e8a64): 'performance "
                "may degrade if MoE and tensor parallelism are enabled without also enabling sequence parallelism' "
                "(ValueError in training)"),
    Rule("recompute_valid", "recompute is one of none, selective, full", ("recompute",), _recompute, _x_recompute,
         source="Korthikanti et al. 2022, Sec. 5"),
    Rule("partial_recompute_needs_full", "recomputing only some layers is a form of full recompute",
         ("recompute_layers", "recompute_share", "recompute"), _partial_recompute, _x_partial_recompute,
         source="Megatron-LM --recompute-method block (with --recompute-granularity full)"),
    Rule("recompute_layers_fit_stage", "partial recompute's layers per pipeline stage are a multiple of vpp and at "
         "most the layers of the largest stage", ("recompute_layers", "vpp", "pp", "pp_first_layers", "pp_last_layers"),
         _recompute_layers_fit, _x_recompute_layers_fit,
         source="Megatron-LM megatron/core/transformer/transformer_block.py (_checkpointed_forward, block method: "
         "the first --recompute-num-layers layers of each model chunk)"),
    Rule("recompute_modules_need_selective", "recompute modules apply only to selective recompute",
         ("recompute_modules", "recompute"), _modules_selective, _x_modules_selective,
         source=_MCORE_TCFG + " (recompute_modules with recompute_granularity selective)"),
    Rule("recompute_modules_exist", "every recompute module names a part the model has (mla_up_proj: MLA; "
         "moe_act, moe: MoE; shared_experts: shared experts; mlp: dense layers)",
         ("recompute_modules",), _modules_exist, _x_modules_exist, source=_MCORE_TCFG),
    Rule("precision_supported", "precision is bf16 or fp8, and fp8 needs a GPU with FP8 tensor cores",
         ("precision",), _precision, _x_precision, source="NVIDIA datasheets (FP8 tensor cores: Hopper and later)"),
    Rule("tp_comm_overlap_needs_sequence_parallel", "TP communication overlap needs tp > 1 with sequence parallelism",
         ("tp_comm_overlap", "tp", "sequence_parallel"), _tp_overlap, _x_tp_overlap, source=_MEGATRON_ARGS),
    Rule("ep_comm_overlap_needs_moe", "expert-parallel all-to-all overlap needs an MoE model",
         ("ep_comm_overlap",), _ep_overlap_moe, _x_ep_overlap_moe, source=_MCORE_MOE),
    Rule("ep_comm_overlap_needs_interleaving", "expert-parallel all-to-all overlap needs vpp > 1 or pp = 1",
         ("ep_comm_overlap", "vpp", "pp"), _ep_overlap_interleaved, _x_ep_overlap_interleaved, source=_MCORE_MOE),
    Rule("moe_dispatcher_needs_moe", "a MoE token dispatcher other than alltoall needs an MoE model",
         ("moe_dispatcher",), _dispatcher_moe, _x_dispatcher_moe,
         source="Megatron-LM --moe-token-dispatcher-type (MoE layers only)"),
    Rule("moe_imbalance_needs_moe", "an MoE load imbalance other than 1 needs an MoE model",
         ("moe_imbalance",), _imbalance_moe, _x_imbalance_moe,
         source="Megatron-Core MoE router (--moe-router-force-load-balancing); dense layers route nothing"),
    Rule("moe_capacity_needs_moe", "an expert capacity factor needs an MoE model",
         ("moe_capacity_factor",), _capacity_moe, _x_capacity_moe,
         source="Megatron-LM --moe-expert-capacity-factor (MoE layers only)"),
    Rule("moe_pad_needs_capacity", "padding experts to capacity needs a capacity factor, and not DeepEP",
         ("moe_pad_to_capacity", "moe_capacity_factor", "moe_dispatcher"), _pad_capacity, _x_pad_capacity,
         source="Megatron-Core transformer_config.py __post_init__ (moe_pad_expert_input_to_capacity requires "
                "moe_expert_capacity_factor; 'Flex token dispatcher does not support "
                "--moe-pad-expert-input-to-capacity', v0.16: the DeepEP backend)"),
    Rule("dp_shard_divides_dp", "the ZeRO sharding group (dp_shard) divides dp, with zero >= 1",
         ("dp_shard", "dp", "zero"), _dp_shard, _x_dp_shard,
         source="PyTorch FSDP2 HSDP mesh [replicate, shard]; Megatron-Core parallel_state.py (dp divisible by "
                "num_distributed_optimizer_instances)"),
    Rule("cp_comm_type_needs_cp", "a CP communication type other than p2p needs cp > 1",
         ("cp_comm_type", "cp"), _cp_comm_type_cp, _x_cp_comm_type_cp,
         source="Megatron-LM --cp-comm-type (applies to context-parallel attention only)"),
    Rule("cp_a2a_divides_heads", "all-to-all CP (a2a, a2a+p2p) splits each TP rank's query and KV heads over its ranks",
         ("cp_comm_type", "cp", "tp"), _cp_a2a_heads, _x_cp_a2a_heads,
         source="TransformerEngine context_parallel.py AttnFuncWithCPAndQKVOA2A (heads divisible by the CP size)"),
    Rule("sliding_window_cp_comm_type", "a sliding-window model's context parallelism is a2a or allgather",
         ("cp_comm_type", "cp"), _window_cp_comm_type, _x_window_cp_comm_type,
         source="TransformerEngine attention/dot_product_attention/context_parallel.py attn_forward_func_with_cp: "
                "'Context parallelism does not support sliding window attention with cp_comm_type' other than "
                "a2a / all_gather; Megatron-Bridge models/mistral/mistral_bridge.py sets cp_comm_type 'a2a' "
                "with a window"),
    Rule("tp_overlap_kind_needs_tp_comm_overlap", "a TP overlap kind other than userbuffers needs TP comm overlap",
         ("tp_overlap_kind", "tp_comm_overlap"), _tp_overlap_kind, _x_tp_overlap_kind,
         source="torchtitan parallelism.enable_async_tensor_parallel (with compile and TP > 1)"),
    Rule("tp_overlap_rs_ring_needs_userbuffers", "ring-exchange reduce-scatters are a mode of userbuffers TP overlap",
         ("tp_overlap_rs_ring", "tp_comm_overlap", "tp_overlap_kind"), _tp_overlap_rs_ring, _x_tp_overlap_rs_ring,
         source="TransformerEngine pytorch/module/base.py initialize_ub (method 'ring_exchange' among the "
                "userbuffers methods); Megatron-Bridge comm_overlap.py RingExchangeOverlapCfg"),
    Rule("block_scaling_needs_blackwell", "the mxfp8 and nvfp4 recipes need a GPU whose tensor cores take block scales",
         ("fp8_recipe", "precision"), _block_scaling, _x_block_scaling,
         source="OCP Microscaling (MX) spec v1.0; TransformerEngine MXFP8BlockScaling and NVFP4BlockScaling "
                "(Blackwell only)"),
    Rule("cpu_offload_layers_valid", "CPU activation offload runs without pipeline parallelism, on fewer layers "
         "than the model has", ("cpu_offload_layers", "pp"), _cpu_offload, _x_cpu_offload,
         source="Megatron-Core TransformerConfig.__post_init__ (cpu_offloading with pipeline parallelism refused; "
                "cpu_offloading_num_layers < num_layers)"),
    Rule("grad_reduce_needs_zero1", "a gradient all-reduce under ZeRO sharding needs zero = 1",
         ("grad_reduce", "zero"), _grad_reduce, _x_grad_reduce,
         source="DeepSpeed runtime/pipe/engine.py _exec_reduce_grads: the BF16_Optimizer path only below ZeRO stage 2"),
    Rule("zero3_gather_needs_zero3", "a ZeRO-3 gather mode other than prefetch needs zero = 3",
         ("zero3_gather", "zero"), _zero3_gather, _x_zero3_gather, source="Rajbhandari et al. 2020, Sec. 5.3 (stage 3)"),
    Rule("fp8_param_gather_needs_sharded_optimizer", "FP8 parameters need the distributed optimizer or FSDP (zero >= 1)",
         ("fp8_param_gather", "precision", "zero"), _fp8_param_gather, _x_fp8_param_gather,
         source="Megatron-LM megatron/training/arguments.py validate_args: '--fp8-param-gather only supported with "
                "distributed optimizer, torch fsdp2, megatron fsdp, or inference mode'"),
    Rule("optimizer_remainders_need_bf16_weights", "BF16-weight optimizer states (remainders, bf16) need BF16 parameters",
         ("optimizer_states", "fp8_param_gather", "precision"), _optimizer_states, _x_optimizer_states,
         source="NeMo 1 megatron_base_model.py setup_optimization: fp8_params sets store_params (a master copy) before "
                "the optimizer dtype is looked at; Apex distributed_fused_adam.py: store_param_remainders needs "
                "param_sync_dtype bfloat16"),
)
"""All rules, in the order used to attribute a removed layout to the first rule it breaks."""

RULES_BY_NAME = {r.name: r for r in RULES}


# ----------------------------------------------------------------------------------------- helpers


def columns_of(layouts) -> dict:
    """Columns (option name -> np array of codes) from a ``Layout``, a ``LayoutBatch`` or a
    mapping.

    For a ``Layout`` each option is encoded as in a LayoutBatch (``Option.encode``: an unknown
    choice becomes -1, which the rules reject), except ``sequence_parallel``, which is the
    user's request where explicit (so True with tp == 1 breaks its rule) and what runs where
    automatic.
    """
    if isinstance(layouts, LayoutBatch):
        return layouts.columns()
    if isinstance(layouts, Layout):
        d = {o.name: np.asarray([o.encode(getattr(layouts, o.name))]) for o in OPTIONS}
        requested = layouts.sequence_parallel
        d["sequence_parallel"] = np.asarray([layouts.sp if requested is None else bool(requested)])
        return d
    return dict(layouts)


def check_rules(ctx: RuleContext, layouts, rules=RULES) -> dict[str, np.ndarray]:
    """Rule name -> bool array (True = obeys) for every rule, over ``layouts``."""
    cols = columns_of(layouts)
    shape = np.broadcast(*[np.asarray(v) for v in cols.values()]).shape if cols else ()
    return {r.name: np.broadcast_to(r(ctx, cols), shape) for r in rules}


def valid_mask(ctx: RuleContext, layouts, rules=RULES) -> np.ndarray:
    """True where a layout obeys every rule."""
    cols = columns_of(layouts)
    shape = np.broadcast(*[np.asarray(v) for v in cols.values()]).shape if cols else ()
    ok = np.ones(shape, bool)
    for r in rules:
        ok = ok & r(ctx, cols)
    return ok


def removed_by_rule(ctx: RuleContext, layouts, rules=RULES) -> tuple[dict[str, int], np.ndarray]:
    """How many layouts each rule removes, attributing a layout to the FIRST rule it breaks
    (in ``RULES`` order), so the counts add up to the layouts removed. Also returns the
    valid mask."""
    cols = columns_of(layouts)
    shape = np.broadcast(*[np.asarray(v) for v in cols.values()]).shape if cols else ()
    alive = np.ones(shape, bool)
    counts: dict[str, int] = {}
    for r in rules:
        ok = r(ctx, cols)
        removed = alive & ~ok
        counts[r.name] = int(removed.sum())
        alive = alive & ok
    return counts, alive


def violations(ctx: RuleContext, layout) -> list[tuple[str, str]]:
    """Every rule one layout breaks: [(rule name, one-line reason)]."""
    cols = columns_of(layout)
    v = {k: np.asarray(x).reshape(-1)[0].item() for k, x in cols.items()}
    out = []
    for r in RULES:
        if not bool(np.asarray(r(ctx, cols)).reshape(-1)[0]):
            out.append((r.name, r.explain(ctx, v)))
    return out


def first_violation(ctx: RuleContext, layout) -> Optional[tuple[str, str]]:
    """(rule name, one-line reason) of the first rule ``layout`` breaks, or None if it is valid."""
    v = violations(ctx, layout)
    return v[0] if v else None


def add_cpsat_constraints(ctx: RuleContext, sat, V: dict, domains: dict[str, tuple[int, ...]],
                          rules=RULES) -> list[str]:
    """Add every integer rule to the CP-SAT model ``sat`` over vars ``V`` (field -> IntVar).

    ``domains`` gives each field's candidate values (one-value tuples for constants such as
    ``gbs`` and ``seq_len``). A rule reading a field absent from ``domains`` is skipped (and
    returned, so the caller applies it in numpy); otherwise a rule with its own CP-SAT form adds
    it, and any other rule becomes an allowed-assignment table computed with the numpy check
    over the product of its fields' domains. Returns the skipped rule names.
    """
    skipped = []
    for r in rules:
        if not all(f in domains for f in r.fields):
            skipped.append(r.name)
            continue
        if r.cpsat is not None:
            r.cpsat(ctx, sat, V, domains)
            continue
        var_fields = [f for f in r.fields if f in V and len(domains[f]) > 1]
        const = {f: domains[f][0] for f in r.fields if f not in var_fields}
        if not var_fields:
            if not bool(np.all(r(ctx, const))):
                sat.add_bool_or([])  # infeasible: the constants break the rule
            continue
        grids = np.meshgrid(*[np.asarray(domains[f], dtype=np.int64) for f in var_fields], indexing="ij")
        cols = {f: g.reshape(-1) for f, g in zip(var_fields, grids)}
        cols.update(const)
        ok = np.broadcast_to(r(ctx, cols), cols[var_fields[0]].shape)
        tuples = np.stack([cols[f] for f in var_fields], axis=1)[ok]
        sat.add_allowed_assignments([V[f] for f in var_fields], tuples.tolist())
    return skipped


def describe_rules() -> list[tuple[str, str]]:
    """[(name, description)] of every rule, for help texts."""
    return [(r.name, r.description) for r in RULES]


def broken_rule_message(name: str, reason: str, others=()) -> str:
    """One line: the rule, why, its source, and the other rules also broken."""
    source = RULES_BY_NAME[name].source
    more = f" (also breaks: {', '.join(others)})" if others else ""
    return f"layout breaks rule {name}: {reason}" + (f" [{source}]" if source else "") + more


def check_layout(model, cluster, gpu, layout: Layout, *, gpus: Optional[int] = None,
                 allow_cross_node_tp: bool = False, batch_origin: str = "") -> None:
    """Reject a user layout that breaks a rule: raises ``PlannerInputError`` with one line naming
    the rule, the value and the rule's source (the first broken rule; others are appended by
    name). evaluate, export and validate all call this. ``batch_origin``: where gbs came from
    when the user did not type it (``costmodel.options.Batch.origin``), added to a gbs rule's
    message."""
    from hardware_catalog.errors import PlannerInputError

    ctx = RuleContext.build(model, gpus if gpus is not None else layout.gpus, cluster, gpu, allow_cross_node_tp)
    broken = violations(ctx, layout)
    if broken:
        name, reason = broken[0]
        if batch_origin and "gbs" in RULES_BY_NAME[name].fields:
            reason += f" ({batch_origin})"
        raise PlannerInputError(broken_rule_message(name, reason, [n for n, _ in broken[1:]]))


def where_settings_apply(ctx: RuleContext, settings: dict, cols: dict) -> dict:
    """Setting columns (option name -> code) over the layouts ``cols``, switched back to the
    option's default on the layouts where a rule of the option (``Option.rules``, those that
    read more of the layout than the option itself) says it does not apply. The search prices every candidate with its fixed
    settings this way, so a record says what was priced. A rule that reads another setting (padding
    to capacity reads the capacity factor) sees it as given, or as already switched back."""
    out = {}
    for name, code in settings.items():
        opt = OPTIONS_BY_NAME[name]
        rules = [RULES_BY_NAME[r] for r in opt.rules if set(RULES_BY_NAME[r].fields) != {name}]
        if not rules or code == opt.default_code:
            out[name] = code
            continue
        with_setting = {**cols, **settings, **out, name: code}
        ok = np.ones(np.broadcast(*[np.asarray(v) for v in with_setting.values()]).shape, bool)
        for rule in rules:
            ok = ok & rule(ctx, with_setting)
        out[name] = np.where(ok, code, opt.default_code)
    if "cp_comm_type" in out:
        out["cp_comm_type"] = windowed_cp_comm_type(ctx, {**cols, **settings, **out})
    if "grad_accum_pass" in out:
        out["grad_accum_pass"] = sharded_grad_accum_pass({**cols, **settings, **out})
    return out


def sharded_grad_accum_pass(cols: dict) -> np.ndarray:
    """grad_accum_pass codes over ``cols`` as the engines that run ZeRO-2/3 accumulate: where the
    code is fused (the GEMM's own accumulation, which planner's Megatron export turns off there)
    and zero >= 2, main_grad_copy for Megatron-FSDP (megatron_fsdp.py _grad_acc copies every
    micro-batch's gradient into the reduce-scatter bucket), autograd for FSDP2 at ZeRO-3 (its
    sharded add) and for flat-parameter ZeRO-3, which Megatron does not run (rule
    megatron_fsdp_flat): DeepSpeed's ZeRO-3 and FSDP1 add each micro-batch's reduced gradient into
    their shard (the DeepSpeed and Composer profiles' autograd). The one place this choice is made;
    the Megatron table (planner.frameworks.megatron) refuses any other pass on those rows."""
    code = np.asarray(cols.get("grad_accum_pass", 0))
    zero, fsdp = _a(cols, "zero", 0), _a(cols, "fsdp", 0)
    fused = code == GRAD_ACCUMS.index("fused")
    fsdp2 = (zero == 3) & ((fsdp == FSDP_IMPLS.index("fsdp2")) | (fsdp == FSDP_IMPLS.index("flat")))
    copy = (zero == 2) | ((zero == 3) & (fsdp == FSDP_IMPLS.index("megatron")))
    return np.where(fused & fsdp2, GRAD_ACCUMS.index("autograd"),
                    np.where(fused & copy, GRAD_ACCUMS.index("main_grad_copy"), code))


def sharded_grad_accum_pass_name(zero: int, fsdp: str, grad_accum_pass: str) -> str:
    """``sharded_grad_accum_pass`` for one layout, by name (``Layout`` values)."""
    code = sharded_grad_accum_pass({"zero": zero, "fsdp": FSDP_IMPLS.index(fsdp),
                                    "grad_accum_pass": GRAD_ACCUMS.index(grad_accum_pass)})
    return GRAD_ACCUMS[int(code)]


def windowed_cp_comm_type(ctx: RuleContext, cols: dict) -> np.ndarray:
    """A sliding-window model's cp_comm_type codes over ``cols``: where cp > 1 and the code is
    p2p, which TransformerEngine refuses with a window (rule ``sliding_window_cp_comm_type``),
    a2a where its head split fits (rule ``cp_a2a_divides_heads``), else allgather, as
    Megatron-Bridge's Mistral provider picks a2a for a windowed model (models/mistral/mistral_bridge.py).
    The one place this choice is made: a model without a window keeps its codes."""
    code = np.asarray(cols.get("cp_comm_type", 0))
    if getattr(ctx.model, "sliding_window", None) is None:
        return code
    a2a, allgather = CP_COMM_TYPES.index("a2a"), CP_COMM_TYPES.index("allgather")
    with_a2a = {**cols, "cp_comm_type": a2a}
    heads_fit = _cp_a2a_heads(ctx, with_a2a)
    moved = (_a(cols, "cp", 1) > 1) & (code == CP_COMM_TYPES.index("p2p"))
    return np.where(moved, np.where(heads_fit, a2a, allgather), code)


def windowed_cp_comm_type_name(ctx: RuleContext, tp: int, cp: int, cp_comm_type: str) -> str:
    """``windowed_cp_comm_type`` for one layout, by name (``Layout`` values)."""
    code = windowed_cp_comm_type(ctx, {"tp": tp, "cp": cp, "cp_comm_type": CP_COMM_TYPES.index(cp_comm_type)})
    return CP_COMM_TYPES[int(code)]


def check_settings(model, settings: dict, pins: dict | None = None) -> None:
    """Reject fixed settings (option name -> ``Layout`` value) that no layout of ``model`` can
    use: every rule that reads a setting and otherwise only settings, pinned knobs (``pins``,
    ``Layout`` values) and the model, before a search enumerates anything; e.g. recompute
    modules the model lacks, a MoE dispatcher for a dense model, or TP overlap with sequence
    parallelism pinned off."""
    from hardware_catalog.errors import PlannerInputError

    for name, reason, reads_setting in fixed_value_violations([RuleContext(model=model, gpus=1)], settings,
                                                              pins or {}, {}):
        if reads_setting:
            raise PlannerInputError(broken_rule_message(name, reason))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def unreachable_pins(gpu_counts, pins: dict, gbs: Optional[int] = None) -> Optional[str]:
    """One line when pinned degrees no layout can hold at any of the search's GPU counts, else None.
    ``fixed_value_violations`` tests a rule only when every field it reads is fixed; these two hold
    whatever the free degrees are: degrees_multiply_to_gpus (tp * cp * pp * dp = GPUs, so the pinned
    ones multiply to a divisor of the GPU count) and ep_divides_dp_cp (ep * etp divides tp * cp * dp =
    GPUs / pp, so ep * etp times a pinned pp divides the GPU count). E.g. --ep 128 on 64 GPUs.
    With ``gbs``, also gbs_divisible_by_dp_mbs: a pinned mbs divides the global batch whatever dp is."""
    counts = sorted(set(int(n) for n in gpu_counts))
    fixed = {k: int(pins[k]) for k in ("tp", "cp", "pp", "dp", "ep", "etp") if pins.get(k) is not None}
    shown = ", ".join(str(n) for n in counts)
    allowed = "; ".join(f"{n}: {', '.join(map(str, _divisors(n)))}" for n in counts)
    grid = [k for k in ("tp", "cp", "pp", "dp") if k in fixed]
    product = int(np.prod([fixed[k] for k in grid])) if grid else 1
    if grid and not any(n % product == 0 for n in counts):
        typed = " ".join(f"--{k} {fixed[k]}" for k in grid)
        what = f"{' * '.join(grid)} = {product}" if len(grid) > 1 else f"{grid[0]} = {product}"
        return (f"{typed}: {what} must divide the GPU count ({shown}), as tp * cp * pp * dp equals it "
                f"(rule degrees_multiply_to_gpus); allowed: a divisor of {allowed}")
    mbs = pins.get("mbs")
    if gbs is not None and mbs is not None and int(mbs) >= 1 and int(gbs) % int(mbs):
        return (f"--mbs {int(mbs)}: the global batch {int(gbs)} is not divisible by it, as gbs is divisible by "
                f"dp * mbs (rule gbs_divisible_by_dp_mbs); allowed: a divisor of {int(gbs)}: "
                f"{', '.join(map(str, _divisors(int(gbs))))}")
    expert = [k for k in ("ep", "etp") if k in fixed]
    folded = fixed.get("ep", 1) * fixed.get("etp", 1) * fixed.get("pp", 1)
    if expert and not any(n % folded == 0 for n in counts):
        typed = " ".join(f"--{k} {fixed[k]}" for k in expert + (["pp"] if "pp" in fixed else []))
        what = "ep * etp * pp" if "pp" in fixed else "ep * etp"
        return (f"{typed}: {what} = {folded} must divide the GPU count ({shown}), as ep * etp divides tp * cp * dp "
                f"= GPUs / pp (rule ep_divides_dp_cp, MoE parallel folding); allowed: {what} a divisor of {allowed}")
    return None


def fixed_value_violations(contexts: list, settings: dict, pins: dict, batch: dict) -> list[tuple[str, str, bool]]:
    """What the user fixed (pinned knobs, settings, the batch ``gbs``/``seq_len``; ``Layout``
    values) that breaks a rule reading only fixed values on every one of a search's problems
    (``contexts``: a ``RuleContext`` per GPU type and count), before anything is enumerated:
    [(rule name, one-line reason, whether the rule reads a setting)]. E.g. FP8 on an A100,
    ``--tp 16`` past an 8-GPU NVLink domain, MXFP8 on Hopper."""
    fixed_settings = {k for k, v in settings.items() if v is not None}
    typed = fixed_settings | {k for k, v in pins.items() if v is not None}
    values = {**{k: v for k, v in batch.items() if v is not None}, **{k: v for k, v in pins.items() if v is not None},
              **{k: v for k, v in settings.items() if v is not None}}
    if not contexts or not typed:
        return []
    kind = windowed_cp_comm_type_name(contexts[0], values.get("tp", 1), values.get("cp", 1),
                                      values.get("cp_comm_type", "p2p"))
    if kind != values.get("cp_comm_type", "p2p"):  # the search prices it as where_settings_apply does
        values["cp_comm_type"] = kind
    cols = columns_of(Layout(**values))
    v = {k: np.asarray(x).reshape(-1)[0].item() for k, x in cols.items()}
    out = []
    for rule in RULES:
        if not (set(rule.fields) & typed and set(rule.fields) <= set(values)):
            continue
        if all(not bool(np.asarray(rule(ctx, cols)).reshape(-1)[0]) for ctx in contexts):
            out.append((rule.name, rule.explain(contexts[0], v), bool(set(rule.fields) & fixed_settings)))
    return out
