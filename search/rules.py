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

Layouts are given as "columns": a mapping field -> array (or scalar), with the ``LayoutBatch``
field names (``tp pp dp cp ep etp vpp zero mbs gbs seq_len recompute precision sp
pp_first_layers pp_last_layers``; enums as codes). :func:`columns_of` builds it from a
``Layout``, a ``LayoutBatch`` or a dict. For a ``Layout`` the ``sp`` column is what the user
*asked for* (so ``sequence_parallel=True`` with ``tp=1`` breaks ``sequence_parallel_needs_tp``);
a ``LayoutBatch`` has already forced it off where ``tp == 1``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields as dc_fields
from typing import Any, Callable, Mapping, Optional

import numpy as np

from costmodel.layout import PRECISIONS, RECOMPUTE, Layout, LayoutBatch
from costmodel.pipeline import stage_layer_split, vpp_divides_stages

COLUMNS = (
    "tp", "pp", "dp", "cp", "ep", "etp", "vpp", "zero", "mbs", "gbs", "seq_len",
    "recompute", "precision", "sp", "pp_first_layers", "pp_last_layers",
)
"""Column names the rules read (the ``LayoutBatch`` fields)."""


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

    @classmethod
    def build(cls, model, gpus: int, cluster=None, gpu=None, allow_cross_node_tp: bool = False) -> "RuleContext":
        domain = cluster.scaleup_domain_size if cluster is not None else 8
        has_fp8 = True if gpu is None else gpu.fp8_tflops is not None
        return cls(model=model, gpus=int(gpus), scaleup_domain=int(domain), has_fp8=has_fp8,
                   allow_cross_node_tp=bool(allow_cross_node_tp))

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
    """``cpsat(ctx, model, V, domains)`` adds CP-SAT constraints over vars ``V``; None = table or
    broadcast rule (see module doc)."""

    def __call__(self, ctx: RuleContext, cols: Cols) -> np.ndarray:
        return np.asarray(self.check(ctx, cols), dtype=bool)


def _a(cols: Cols, name: str, default=0) -> np.ndarray:
    v = cols.get(name, default) if hasattr(cols, "get") else getattr(cols, name, default)
    if v is None:
        v = default
    return np.asarray(v, dtype=np.int64)


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
    return valid & (pp <= ctx.num_layers) & (first >= 0) & (last >= 0)


def _vpp_layers(ctx, c):
    f, m, l, _ = _split(ctx, c)
    vpp = _pos(_a(c, "vpp", 1))
    # A stage with <= 0 layers (invalid split) is reported by pp_stage_split, not here.
    return vpp_divides_stages(np.maximum(f, 0), np.maximum(m, 0), np.maximum(l, 0), vpp) | (vpp == 1)


def _vpp_needs_pp(ctx, c):
    return (_a(c, "vpp", 1) <= 1) | (_a(c, "pp", 1) > 1)


def _cp_seq(ctx, c):
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
    sp = np.asarray(c.get("sp", False)).astype(bool)  # None (auto) -> False
    return ~sp | (_a(c, "tp", 1) > 1)


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


def _x_product(ctx, v):
    g = v["tp"] * v["cp"] * v["pp"] * v["dp"]
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
    f, m, l, _ = stage_layer_split(ctx.num_layers, pp, v.get("pp_first_layers", 0), v.get("pp_last_layers", 0))
    return (f"pp={pp} with first/last stage layers {v.get('pp_first_layers', 0) or 'auto'}/"
            f"{v.get('pp_last_layers', 0) or 'auto'} gives no valid split of {ctx.num_layers} layers "
            f"(stages {int(f)}/{int(m)}/{int(l)})")


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
    return (f"gbs={v['gbs']} must be divisible by dp*mbs = {v['dp']}*{v['mbs']} = {v['dp'] * v['mbs']}")


def _x_interleave(ctx, v):
    m = v["gbs"] // max(v["dp"] * v["mbs"], 1)
    return (f"interleaved schedule (vpp={v['vpp']}): micro-batches gbs/(dp*mbs) = {m} must be "
            f"divisible by pp={v['pp']}")


def _x_zero(ctx, v):
    return f"zero={v['zero']} must be 0, 1, 2 or 3"


def _x_sp(ctx, v):
    return f"sequence parallel needs tp > 1 (tp={v['tp']})"


def _partial_recompute(ctx, c):
    share = _a(c, "recompute_share", 4)
    return (share >= 4) | (_a(c, "recompute", 1) == RECOMPUTE.index("full"))


def _x_partial_recompute(ctx, v):
    return "a partial recompute share applies only to recompute=full"


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


def _mul(m, V, name, a, b, ub):
    if name not in V:
        v = m.new_int_var(0, ub, name)
        m.add_multiplication_equality(v, [V[a] if isinstance(a, str) else a, V[b] if isinstance(b, str) else b])
        V[name] = v
    return V[name]


def _cp_positive(ctx, m, V, domains):
    for k in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp"):
        if k in V:
            m.add(V[k] >= 1)


def _cp_product(ctx, m, V, domains):
    g = ctx.gpus
    tc = _mul(m, V, "_tc", "tp", "cp", g * g)
    tcp = _mul(m, V, "_tcp", tc, "pp", g * g)
    m.add_multiplication_equality(g, [tcp, V["dp"]])


def _cp_ep_dp(ctx, m, V, domains):
    g = ctx.gpus
    dc = _mul(m, V, "_dc", "dp", "cp", g * g)
    tdc = m.new_int_var(1, g * g * 8, "_tdc")
    m.add_multiplication_equality(tdc, [dc, V["tp"]])
    ee = m.new_int_var(1, g * g, "_ep_etp")
    m.add_multiplication_equality(ee, [V["ep"], V["etp"]] if "etp" in V else [V["ep"], 1])
    k = m.new_int_var(1, max(g, 1) * 8, "_tdc_over_ep")
    m.add_multiplication_equality(tdc, [ee, k])


def _gbs_value(domains) -> int:
    (gbs,) = domains["gbs"]
    return int(gbs)


def _cp_gbs(ctx, m, V, domains):
    gbs = _gbs_value(domains)
    dm = _mul(m, V, "_dm", "dp", "mbs", max(gbs, 1) * 64)
    mvar = m.new_int_var(1, max(gbs, 1), "_m")
    m.add_multiplication_equality(gbs, [dm, mvar])
    V["_m"] = mvar


def _cp_interleave(ctx, m, V, domains):
    gbs = _gbs_value(domains)
    if "_m" not in V:
        _cp_gbs(ctx, m, V, domains)
    b = m.new_bool_var("_interleaved")
    m.add(V["vpp"] >= 2).only_enforce_if(b)
    m.add(V["vpp"] <= 1).only_enforce_if(~b)
    q = m.new_int_var(0, max(gbs, 1), "_m_over_pp")
    pq = m.new_int_var(0, max(gbs, 1) * max(ctx.num_layers, 1), "_pp_q")
    m.add_multiplication_equality(pq, [V["pp"], q])
    m.add(pq == V["_m"]).only_enforce_if(b)
    m.add(q == 0).only_enforce_if(~b)


# ------------------------------------------------------------------------------------- rule table

RULES: tuple[Rule, ...] = (
    Rule("degrees_positive", "every parallel degree (tp pp dp cp ep etp vpp) is >= 1",
         ("tp", "pp", "dp", "cp", "ep", "etp", "vpp"), _degrees_positive, _x_positive, _cp_positive),
    Rule("degrees_multiply_to_gpus", "tp * cp * pp * dp equals the GPU count",
         ("tp", "cp", "pp", "dp"), _product, _x_product, _cp_product),
    Rule("tp_divides_heads", "tp divides the attention heads, and divides the kv heads or is a multiple "
         "of them (KV-head replication)", ("tp",), _tp_heads, _x_tp_heads),
    Rule("tp_within_scaleup_domain", "tp fits in the scale-up (NVLink) domain unless cross-node TP is "
         "allowed, and divides or is a multiple of the domain size", ("tp",), _tp_domain, _x_tp_domain),
    Rule("pp_stage_split", "pp <= layers and the layers split validly over the stages "
         "(costmodel.pipeline.stage_layer_split)", ("pp", "pp_first_layers", "pp_last_layers"), _pp_split, _x_pp),
    Rule("vpp_divides_stage_layers", "vpp splits every pipeline stage into equal model chunks "
         "(costmodel.pipeline.vpp_divides_stages)",
         ("pp", "vpp", "pp_first_layers", "pp_last_layers"), _vpp_layers, _x_vpp_layers),
    Rule("vpp_needs_pipeline", "an interleaved schedule (vpp > 1) needs pp > 1", ("pp", "vpp"), _vpp_needs_pp, _x_vpp_pp),
    Rule("cp_divides_seq", "seq_len is divisible by 2*cp when cp > 1 (load-balanced ring attention)",
         ("cp", "seq_len"), _cp_seq, _x_cp),
    Rule("ep_divides_experts", "ep divides the number of experts (ep = 1 for a dense model)", ("ep",), _ep_experts, _x_ep),
    Rule("ep_divides_dp_cp", "ep * etp divides tp * cp * dp (MoE parallel folding re-splits a stage's ranks)",
         ("ep", "etp", "tp", "dp", "cp"), _ep_dp_cp, _x_ep_dp, _cp_ep_dp),
    Rule("etp_divides_expert_ffn", "etp divides the expert ffn hidden size (etp = 1 for a dense model)",
         ("etp",), _etp_ffn, _x_etp),
    Rule("mbs_positive", "the micro-batch size is >= 1", ("mbs",), _mbs_positive, _x_mbs),
    Rule("gbs_divisible_by_dp_mbs", "the global batch is divisible by dp * mbs",
         ("gbs", "dp", "mbs"), _gbs_dp_mbs, _x_gbs, _cp_gbs),
    Rule("interleaved_microbatches_divisible_by_pp", "with vpp > 1 the micro-batch count gbs/(dp*mbs) is "
         "divisible by pp (Megatron interleaved 1F1B)", ("gbs", "dp", "mbs", "vpp", "pp"), _interleave_m,
         _x_interleave, _cp_interleave),
    Rule("zero_stage_valid", "the ZeRO stage is 0, 1, 2 or 3", ("zero",), _zero, _x_zero),
    Rule("sequence_parallel_needs_tp", "sequence parallelism needs tp > 1", ("sp", "tp"), _sp, _x_sp),
    Rule("recompute_valid", "recompute is one of none, selective, full", ("recompute",), _recompute, _x_recompute),
    Rule("partial_recompute_needs_full", "recomputing only some layers is a form of full recompute",
         ("recompute_share", "recompute"), _partial_recompute, _x_partial_recompute),
    Rule("precision_supported", "precision is bf16 or fp8, and fp8 needs a GPU with FP8 tensor cores",
         ("precision",), _precision, _x_precision),
)
"""All rules, in the order used to attribute a removed layout to the first rule it breaks."""

RULES_BY_NAME = {r.name: r for r in RULES}


# ----------------------------------------------------------------------------------------- helpers


def columns_of(layouts) -> dict:
    """Columns (field -> np array) from a ``Layout``, a ``LayoutBatch`` or a mapping.

    For a ``Layout`` the enums become codes (an unknown name becomes -1, which the enum rules
    reject) and ``sp`` is the user's request (None = auto = off where tp == 1).
    """
    if isinstance(layouts, LayoutBatch):
        return {f.name: getattr(layouts, f.name) for f in dc_fields(layouts)}
    if isinstance(layouts, Layout):
        d = {k: np.asarray([getattr(layouts, k)], dtype=np.int64) for k in
             ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "zero", "mbs", "gbs", "seq_len")}
        d["recompute"] = np.asarray([RECOMPUTE.index(layouts.recompute) if layouts.recompute in RECOMPUTE else -1])
        d["precision"] = np.asarray([PRECISIONS.index(layouts.precision) if layouts.precision in PRECISIONS else -1])
        d["sp"] = np.asarray([bool(layouts.sequence_parallel)])
        d["pp_first_layers"] = np.asarray([layouts.pp_first_layers or 0])
        d["pp_last_layers"] = np.asarray([layouts.pp_last_layers or 0])
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
    v = {k: int(np.asarray(x).reshape(-1)[0]) for k, x in cols.items() if k != "sp"}
    v["sp"] = bool(np.asarray(cols.get("sp", False)).reshape(-1)[0])
    out = []
    for r in RULES:
        if not bool(np.asarray(r(ctx, cols)).reshape(-1)[0]):
            out.append((r.name, r.explain(ctx, v)))
    return out


def first_violation(ctx: RuleContext, layout) -> Optional[tuple[str, str]]:
    """(rule name, one-line reason) of the first rule ``layout`` breaks, or None if it is valid."""
    v = violations(ctx, layout)
    return v[0] if v else None


def add_cpsat_constraints(ctx: RuleContext, model, V: dict, domains: dict[str, tuple[int, ...]],
                          rules=RULES) -> list[str]:
    """Add every integer rule to the CP-SAT ``model`` over vars ``V`` (field -> IntVar).

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
            r.cpsat(ctx, model, V, domains)
            continue
        var_fields = [f for f in r.fields if f in V and len(domains[f]) > 1]
        const = {f: domains[f][0] for f in r.fields if f not in var_fields}
        if not var_fields:
            if not bool(np.all(r(ctx, const))):
                model.add_bool_or([])  # infeasible: the constants break the rule
            continue
        grids = np.meshgrid(*[np.asarray(domains[f], dtype=np.int64) for f in var_fields], indexing="ij")
        cols = {f: g.reshape(-1) for f, g in zip(var_fields, grids)}
        cols.update(const)
        ok = np.broadcast_to(r(ctx, cols), cols[var_fields[0]].shape)
        tuples = np.stack([cols[f] for f in var_fields], axis=1)[ok]
        model.add_allowed_assignments([V[f] for f in var_fields], tuples.tolist())
    return skipped


def describe_rules() -> list[tuple[str, str]]:
    """[(name, description)] of every rule, for help texts."""
    return [(r.name, r.description) for r in RULES]


def check_layout(model, cluster, gpu, layout: Layout, *, gpus: Optional[int] = None,
                 allow_cross_node_tp: bool = False) -> None:
    """Reject a user layout that breaks a rule: raises ``PlannerInputError`` with one line naming
    the rule and the value (the first broken rule; others are appended by name)."""
    from hardware_catalog.errors import PlannerInputError

    ctx = RuleContext.build(model, gpus if gpus is not None else layout.gpus, cluster, gpu, allow_cross_node_tp)
    broken = violations(ctx, layout)
    if broken:
        name, reason = broken[0]
        more = f" (also breaks: {', '.join(n for n, _ in broken[1:])})" if len(broken) > 1 else ""
        raise PlannerInputError(f"layout breaks rule {name}: {reason}{more}")
