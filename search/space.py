"""The search space of parallel layouts for one (model, cluster, GPU count, batch) problem.

What is enumerated where:

* **CP-SAT enumerates the degree core** ``(tp, cp, pp, dp, ep)``: every assignment obeying the
  rules of :mod:`search.rules` over those knobs (``tp*cp*pp*dp == gpus`` as a chain of
  multiplication equalities, ``ep | dp*cp``, dp | gbs, and the one-knob rules on tp, pp, cp, ep
  as allowed-assignment tables computed from the numpy checks), via ``enumerate_all_solutions``
  with a solution callback over divisor-shaped domains.
* **numpy expands the core** over etp, vpp, mbs and (when searched) the first/last stage layer
  counts and applies every rule again, vectorized (that is where the vpp, interleaving and
  ``gbs % (dp*mbs)`` rules bite); measured: CP-SAT took 1-10 s to enumerate the whole skeleton
  one solution at a time, the core takes ~30-150 ms.
* **numpy broadcasts the knobs that touch no integer rule**: ZeRO stage, recompute, precision
  and sequence parallelism. Their domains are filtered by their own rules, then every skeleton
  row is repeated for every combination (``Space.take`` -> ``LayoutBatch.from_arrays``).

Phase 1 can also run as a plain numpy filter of the Cartesian product (``engine="numpy"``);
the tests check both engines agree. That numpy pass also counts how many candidates each rule
removed (``Space.removed_by_rule``): a candidate is charged to the first rule it breaks, phase-1
rules (over the core) first, then the others in ``RULES`` order; the counts add up to
``raw_size - len(space)``.

Default domains (every knob can be pinned to one value, which then bypasses these defaults and
is judged by the rules alone):

* tp: powers of two up to the scale-up domain (up to the head count with
  ``allow_cross_node_tp``) that divide the GPU count;
* cp: powers of two with ``seq_len % (2*cp) == 0`` that divide the GPU count;
* pp: every value <= layers that divides the GPU count (uneven stage splits allowed);
* dp: whatever ``gpus / (tp*cp*pp)`` leaves (a CP-SAT var over the divisors of the GPU count);
* vpp: 1..8 (``VPP_MAX``; larger interleaving rarely pays: more P2P and less compute per chunk),
  kept only where it splits every stage into model chunks (``costmodel.pipeline.vpp_divides_stages``);
* ep: divisors of the expert count (MoE; 1 for dense) that divide ``dp*cp``;
* etp: 1 or tp (MoE, Megatron's two usual choices; 1 for dense);
* mbs: 1, 2, 4, 8, 16 (with ``gbs % (dp*mbs) == 0``, so mbs <= gbs/dp);
* zero: 0..3; recompute: none, selective, full; precision: bf16 unless pinned;
  sequence parallel: on wherever tp > 1 unless pinned (it cuts activation memory at no extra
  communication volume);
* first/last stage layers: the planner's split (0) unless pinned, or, with
  ``stage_splits=True``, also every split whose first and last stages hold up to
  ``SPLIT_MAX_DELTA`` fewer layers than a middle stage.
"""

from __future__ import annotations

import itertools
import math
import signal
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from costmodel.layout import LayoutBatch, implementation_columns
from costmodel.options import OPTIONS_BY_NAME, RECOMPUTE, SEARCHED
from costmodel.pipeline import stage_layer_split
from hardware_catalog.errors import mark_interrupted
from search.rules import RULES, RuleContext, add_cpsat_constraints, removed_by_rule, where_settings_apply

VPP_MAX = 8
"""Largest virtual-pipeline degree searched by default."""
MBS_CHOICES = (1, 2, 4, 8, 16)
"""Micro-batch sizes searched by default."""
SPLIT_MAX_DELTA = 4
"""With stage_splits, first/last stages may hold up to this many fewer layers than a middle one."""

SKELETON = ("tp", "cp", "pp", "dp", "ep", "etp", "vpp", "mbs", "pp_first_layers", "pp_last_layers")
"""Knobs CP-SAT enumerates."""
BROADCAST = ("zero", "recompute", "precision", "sequence_parallel", "recompute_share")
"""Knobs numpy broadcasts over the skeleton."""
RECOMPUTE_SHARES = (0, 3, 2, 1)
"""Partial full recompute as ``recompute_share`` codes: every layer (0), then 3, 2 and 1
quarters of a stage's layers (q): Megatron's --recompute-method block recomputes only the
first layers of each chunk, trading recompute time for activation memory in steps a layout
can use to just fit."""
PIN_KEYS = tuple(name for name, o in OPTIONS_BY_NAME.items() if o.search == SEARCHED)
"""Knobs a user can pin (the options the search searches)."""


def _input_error(msg: str) -> Exception:
    from hardware_catalog.errors import PlannerInputError

    return PlannerInputError(msg)


def divisors(n: int) -> list[int]:
    n = int(n)
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def powers_of_two(limit: int) -> list[int]:
    out, p = [], 1
    while p <= limit:
        out.append(p)
        p *= 2
    return out


def normalize_pins(pins: Optional[dict]) -> dict[str, int]:
    """Pins (option name -> value as typed) as column codes; raises PlannerInputError for an
    unknown knob or a bad value (``Option.parse``)."""
    out: dict[str, int] = {}
    for k, v in (pins or {}).items():
        if v is None:
            continue
        if k not in PIN_KEYS:
            raise _input_error(f"unknown layout knob '{k}' (allowed: {', '.join(PIN_KEYS)})")
        opt = OPTIONS_BY_NAME[k]
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and opt.kind == "choice":
            v = opt.choices[int(v)] if 0 <= int(v) < len(opt.choices) else v  # a code
        out[k] = opt.encode(opt.parse(v))
    return out


@dataclass
class Problem:
    """One model on one cluster with one GPU count and batch."""

    model: Any
    cluster: Any
    gpu: Any
    gpus: int
    gbs: int
    seq_len: int
    pins: dict = field(default_factory=dict)
    """Normalized pins (see ``normalize_pins``)."""
    allow_cross_node_tp: bool = False
    stage_splits: bool = False
    implementation: dict = field(default_factory=dict)
    """Implementation settings (``costmodel.options.IMPLEMENTATION_OPTIONS`` names, ``Layout``
    values), the same for every candidate where they apply."""
    recompute_modules: int = 1
    """Bit mask of the submodules selective candidates recompute (costmodel.layout
    RECOMPUTE_MODULES; 1 = core_attn, Megatron's default)."""
    within_envelope: bool = False
    """Keep only layouts inside the validated envelope (``search.envelope``)."""
    domain: Any = field(default=None, compare=False, repr=False)
    """What the ``--framework`` release can launch (``planner.export.domain.LaunchDomain``: its
    ``outside(batch, model, cluster)`` and ``refused(record, model, cluster)``); None: every layout."""

    @property
    def ctx(self) -> RuleContext:
        return RuleContext.build(self.model, self.gpus, self.cluster, self.gpu, self.allow_cross_node_tp)

    @property
    def label(self) -> str:
        return f"{self.gpu.name} x {self.gpus}"


@dataclass
class Space:
    """Enumerated space of one problem: skeleton rows x broadcast combinations."""

    problem: Problem
    skeleton: dict[str, np.ndarray]
    """Feasible integer skeletons, field -> array (length S)."""
    broadcast: dict[str, np.ndarray]
    """Feasible broadcast combinations, field -> array (length B)."""
    raw_size: int
    """Candidates before the rules (product of the domains, dp derived, etp in {1, tp})."""
    removed_by_rule: dict[str, int]
    """Candidates each rule removed (first broken rule), summing to raw_size - feasible."""
    engine: str
    seconds: float

    @property
    def n_skeleton(self) -> int:
        return len(self.skeleton["tp"])

    @property
    def n_broadcast(self) -> int:
        return len(self.broadcast["zero"])

    def __len__(self) -> int:
        return self.n_skeleton * self.n_broadcast

    def batch(self, start: int = 0, stop: Optional[int] = None) -> LayoutBatch:
        """Layouts [start, stop) as a LayoutBatch (skeleton-major, broadcast-minor)."""
        n = len(self)
        stop = n if stop is None else min(stop, n)
        idx = np.arange(start, stop, dtype=np.int64)
        return self.take(idx)

    def take(self, idx: np.ndarray) -> LayoutBatch:
        b = max(self.n_broadcast, 1)
        s_idx, b_idx = idx // b, idx % b
        arrays = {k: v[s_idx] for k, v in self.skeleton.items()}
        arrays.update({k: v[b_idx] for k, v in self.broadcast.items()})
        arrays["gbs"] = self.problem.gbs
        arrays["seq_len"] = self.problem.seq_len
        settings = implementation_columns(self.problem.implementation)
        settings["recompute_modules"] = self.problem.recompute_modules
        arrays.update(where_settings_apply(self.problem.ctx, settings, arrays))
        return LayoutBatch.from_arrays(**arrays)



# ------------------------------------------------------------------------------------------ domains


def split_candidates(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """Explicit (first, last) stage layer counts within SPLIT_MAX_DELTA of a middle stage, less
    the planner's own split (which (0, 0) already stands for)."""
    if pp < 2:
        return []
    f0, _, l0, _ = (int(x) for x in stage_layer_split(num_layers, pp))
    return [fl for fl in _split_candidates(num_layers, pp) if fl != (f0, l0)]


def _split_candidates(num_layers: int, pp: int) -> list[tuple[int, int]]:
    out = []
    if pp == 2:
        half = num_layers // 2
        for f in range(max(1, half - SPLIT_MAX_DELTA), half + 1):
            out.append((f, num_layers - f))
        return out
    for df in range(SPLIT_MAX_DELTA + 1):
        for dl in range(SPLIT_MAX_DELTA + 1):
            tot = num_layers + df + dl
            if tot % pp:
                continue
            mid = tot // pp
            f, l = mid - df, mid - dl
            if f >= 1 and l >= 1:
                out.append((f, l))
    return out


def domains(problem: Problem) -> dict[str, tuple]:
    """Candidate values per knob (skeleton + broadcast + constants gbs/seq_len), pins applied."""
    pins = problem.pins
    ctx = problem.ctx
    g = problem.gpus
    L = problem.model.num_layers
    divs = set(divisors(g))
    dom: dict[str, tuple] = {}

    def pick(key, default):
        dom[key] = (pins[key],) if key in pins else tuple(sorted(set(default)))

    tp_cap = ctx.heads if problem.allow_cross_node_tp else ctx.scaleup_domain
    pick("tp", [t for t in powers_of_two(tp_cap) if t in divs] or [1])
    pick("cp", [c for c in powers_of_two(problem.seq_len) if c in divs and (c == 1 or problem.seq_len % (2 * c) == 0)])
    pick("pp", [p for p in range(1, L + 1) if p in divs])
    pick("dp", divs)
    if problem.model.moe is not None:
        e = problem.model.moe.num_experts
        pick("ep", [d for d in divisors(e) if d <= g])
        pick("etp", {1} | {t for t in dom["tp"] if problem.model.moe.expert_ffn_hidden_size % t == 0})
    else:
        pick("ep", [1])
        pick("etp", [1])
    pick("vpp", range(1, VPP_MAX + 1))
    pick("mbs", [m for m in MBS_CHOICES if m <= max(problem.gbs, 1)])
    if problem.stage_splits and "pp_first_layers" not in pins and "pp_last_layers" not in pins:
        vals = {0}
        for p in dom["pp"]:
            for f, l in split_candidates(L, p):
                vals |= {f, l}
        dom["pp_first_layers"] = tuple(sorted(vals))
        dom["pp_last_layers"] = tuple(sorted(vals))
    else:
        pick("pp_first_layers", [0])
        pick("pp_last_layers", [0])
    pick("zero", range(4))
    pick("recompute", range(len(RECOMPUTE)))
    full = RECOMPUTE.index("full")
    # Partial full recompute where the search chooses the mode; --recompute full pins every layer.
    dom["recompute_share"] = RECOMPUTE_SHARES if full in dom["recompute"] and "recompute" not in pins else (0,)
    dom["precision"] = (pins.get("precision", 0),)
    dom["sequence_parallel"] = (bool(pins.get("sequence_parallel", True)),)
    dom["gbs"] = (problem.gbs,)
    dom["seq_len"] = (problem.seq_len,)
    return dom


def _split_table(problem: Problem, dom: dict) -> Optional[list[tuple[int, int, int]]]:
    """Allowed (pp, first, last) when stage splits are searched (None = no table needed)."""
    if len(dom["pp_first_layers"]) == 1 and len(dom["pp_last_layers"]) == 1:
        return None
    rows = []
    for p in dom["pp"]:
        rows.append((p, 0, 0))
        for f, l in split_candidates(problem.model.num_layers, p):
            rows.append((p, f, l))
    return rows


def raw_size(problem: Problem, dom: Optional[dict] = None) -> int:
    """Upper bound of the candidates before the rules: product of the domain sizes (dp is derived,
    not counted; the stage-split table and etp in {1, tp} not applied)."""
    dom = dom or domains(problem)
    n = 1
    for k in SKELETON + BROADCAST:
        if k == "dp" and "dp" not in problem.pins:
            continue
        n *= len(dom[k])
    return n


# --------------------------------------------------------------------------------------- engines
# Two phases. Phase 1 enumerates the *degree core* (tp, cp, pp, dp, ep): CP-SAT (or, for the
# cross-check, a numpy filter of the Cartesian product with dp derived) applies every rule that
# reads only those knobs and the constants (gbs, seq_len, the stage split when it is not searched),
# plus the gbs rule at mbs = 1, i.e. dp | gbs, which every mbs needs. Phase 2 (numpy, both engines)
# expands each core row over etp, vpp, mbs and the searched stage splits and applies every rule.
# Why not all of it in CP-SAT: enumerate_all_solutions costs ~0.1-0.5 ms per solution in
# CP-SAT + the Python callback, so the full skeleton (2,790 rows for 405B on 16,384 GPUs, 20k for
# Mixtral on 512) took 1-10 s; the core (290 / 566 rows) takes ~30-150 ms and the expansion is a
# vectorized filter of a few thousand rows.

CORE = ("tp", "cp", "pp", "dp", "ep")
"""Knobs CP-SAT enumerates (phase 1)."""
EXPAND = ("etp", "vpp", "mbs", "pp_first_layers", "pp_last_layers")
"""Skeleton knobs numpy expands the core over (phase 2)."""


def _core_constants(problem: Problem, dom: dict) -> dict[str, tuple]:
    """Constants phase 1 sees: gbs, seq_len, mbs = 1 (so the gbs rule reads dp | gbs), and the
    stage split when it is a single value."""
    const = {"gbs": dom["gbs"], "seq_len": dom["seq_len"], "mbs": (1,)}
    if len(dom["pp_first_layers"]) == 1 and len(dom["pp_last_layers"]) == 1:
        const["pp_first_layers"] = dom["pp_first_layers"]
        const["pp_last_layers"] = dom["pp_last_layers"]
    return const


def _core_rules(const: dict) -> list:
    allowed = set(CORE) | set(const)
    return [r for r in RULES if set(r.fields) <= allowed]


def _skeleton_rules() -> list:
    allowed = set(SKELETON) | {"gbs", "seq_len"}
    return [r for r in RULES if set(r.fields) <= allowed]


def core_numpy(problem: Problem, dom: Optional[dict] = None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """Phase 1 by numpy: (surviving core rows, the whole core grid, per-grid-row first broken
    rule index into ``_core_rules`` or -1)."""
    dom = dom or domains(problem)
    keys = [k for k in CORE if not (k == "dp" and "dp" not in problem.pins)]
    grids = np.meshgrid(*[np.asarray(dom[k], dtype=np.int64) for k in keys], indexing="ij")
    cols = {k: gr.reshape(-1) for k, gr in zip(keys, grids)}
    if "dp" not in cols:
        tcp = np.maximum(cols["tp"] * cols["cp"] * cols["pp"], 1)
        cols["dp"] = np.maximum(np.where(problem.gpus % tcp == 0, problem.gpus // tcp, 1), 1)
    const = _core_constants(problem, dom)
    ctx = problem.ctx
    check = dict(cols)
    check.update({k: np.int64(v[0]) for k, v in const.items()})
    first = np.full(len(cols["tp"]), -1, dtype=np.int64)
    for i, r in enumerate(_core_rules(const)):
        bad = ~np.broadcast_to(r(ctx, check), first.shape) & (first < 0)
        first[bad] = i
    alive = first < 0
    return {k: cols[k][alive] for k in CORE}, {k: cols[k] for k in CORE}, first


class _LazyPandas(types.ModuleType):
    """Stands for pandas in ortools' cp_model: the real one is imported on first use."""

    def __getattr__(self, name):
        import pandas

        return getattr(pandas, name)


def import_cp_model():
    """``ortools.sat.python.cp_model`` without importing pandas up front. cp_model imports pandas
    at module level (ortools 9.8+) for its ``*_series`` helpers and annotations only; pandas costs
    about 0.2 s of CPU, a fifth of the main job's whole process, and planner never uses those
    helpers. While cp_model loads, a stand-in with the two names its annotations read serves;
    afterwards its ``pd`` imports real pandas when first touched. Any surprise (another ortools,
    pandas already loaded) falls back to the plain import."""
    name = "ortools.sat.python.cp_model"
    if name in sys.modules or "pandas" in sys.modules:
        from ortools.sat.python import cp_model

        return cp_model
    stand_in = types.ModuleType("pandas")
    stand_in.Index = type("Index", (), {})
    stand_in.Series = type("Series", (), {})
    sys.modules["pandas"] = stand_in
    try:
        from ortools.sat.python import cp_model
    except Exception:  # noqa: BLE001 - a cp_model needing more of pandas at import: load it for real
        sys.modules.pop(name, None)
        sys.modules.pop("pandas", None)
        from ortools.sat.python import cp_model

        return cp_model
    finally:
        if sys.modules.get("pandas") is stand_in:
            del sys.modules["pandas"]
    if getattr(cp_model, "pd", None) is stand_in:
        cp_model.pd = _LazyPandas("pandas")
    return cp_model


def core_cpsat(problem: Problem, dom: Optional[dict] = None) -> dict[str, np.ndarray]:
    """Phase 1 by OR-tools CP-SAT: every (tp, cp, pp, dp, ep) obeying the rules over them."""
    cp_model = import_cp_model()

    dom = dom or domains(problem)
    const = _core_constants(problem, dom)
    m = cp_model.CpModel()
    V = {k: m.new_int_var_from_domain(cp_model.Domain.from_values([int(x) for x in dom[k]]), k) for k in CORE}
    V["mbs"] = 1
    cdom = {k: tuple(int(x) for x in dom[k]) for k in CORE}
    cdom.update(const)
    add_cpsat_constraints(problem.ctx, m, V, cdom, _core_rules(const))
    order = [V[k] for k in CORE]

    class _Collect(cp_model.CpSolverSolutionCallback):
        def __init__(self):
            super().__init__()
            self.rows: list[list[int]] = []

        def on_solution_callback(self):
            self.rows.append([self.value(v) for v in order])

    solver = cp_model.CpSolver()
    solver.parameters.enumerate_all_solutions = True
    solver.parameters.num_workers = 1
    solver.parameters.search_branching = cp_model.FIXED_SEARCH
    solver.parameters.cp_model_presolve = False
    # planner owns SIGINT: CP-SAT's own handler (catch_sigint_signal, on by default) would stop the
    # enumeration on Ctrl-C and return the solutions so far as FEASIBLE, a partial space.
    solver.parameters.catch_sigint_signal = False
    cb = _Collect()
    status = _solve_interruptibly(solver, m, cb)
    # A complete enumeration ends OPTIMAL (solutions found) or INFEASIBLE (none); FEASIBLE means it
    # stopped early (a limit or a stop) and the rows are a part of the space: never a result.
    if status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        raise RuntimeError(f"CP-SAT enumeration ended with status {solver.status_name(status)} (incomplete)")
    rows = np.asarray(cb.rows, dtype=np.int64).reshape(-1, len(CORE))
    return {k: rows[:, i].copy() for i, k in enumerate(CORE)}


def _solve_interruptibly(solver, model, callback):
    """``solver.solve(model, callback)``; Ctrl-C during it stops the search (from the next
    solution callback, where Python runs) and raises KeyboardInterrupt after the solver returned,
    instead of raising inside OR-tools' C++ callback."""
    if threading.current_thread() is not threading.main_thread():
        return solver.solve(model, callback)
    previous = signal.getsignal(signal.SIGINT)
    stopped = []

    def stop(signum, frame):
        mark_interrupted()
        stopped.append(signum)
        solver.stop_search()

    signal.signal(signal.SIGINT, stop)
    try:
        status = solver.solve(model, callback)
    finally:
        signal.signal(signal.SIGINT, previous)
    if stopped:
        raise KeyboardInterrupt
    return status


def _expansion_counts(problem: Problem, dom: dict, core: dict) -> np.ndarray:
    """How many skeleton candidates (after the space shape) each core row expands into."""
    n = np.full(len(core["tp"]), len(dom["vpp"]) * len(dom["mbs"]), dtype=np.int64)
    etp = np.asarray(dom["etp"])
    if "etp" in problem.pins:
        n *= len(etp)
    else:
        n *= 1 + ((core["tp"] != 1) & np.isin(core["tp"], etp)).astype(np.int64)
    table = _split_table(problem, dom)
    if table is None:
        return n
    t = np.asarray(table, dtype=np.int64)
    per_pp = {int(p): int((t[:, 0] == p).sum()) for p in np.unique(t[:, 0])}
    return n * np.asarray([per_pp.get(int(p), 0) for p in core["pp"]], dtype=np.int64)


def expand(problem: Problem, core: dict, dom: Optional[dict] = None) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Phase 2: core rows x (etp, vpp, mbs, stage split), filtered by every skeleton rule.
    Returns the skeleton rows (sorted) and how many candidates each rule removed here."""
    dom = dom or domains(problem)
    nc = len(core["tp"])
    keys = ["etp", "vpp", "mbs"]
    table = _split_table(problem, dom)
    if table is None:
        keys += ["pp_first_layers", "pp_last_layers"]
    sub = np.meshgrid(np.arange(nc), *[np.asarray(dom[k], dtype=np.int64) for k in keys], indexing="ij")
    ci = sub[0].reshape(-1)
    cols = {k: v[ci] for k, v in core.items()}
    cols.update({k: g.reshape(-1) for k, g in zip(keys, sub[1:])})
    if table is not None:  # join with the allowed (pp, first, last) rows
        t = np.asarray(table, dtype=np.int64)
        order = np.argsort(t[:, 0], kind="stable")
        t = t[order]
        starts = np.searchsorted(t[:, 0], cols["pp"], side="left")
        counts = np.searchsorted(t[:, 0], cols["pp"], side="right") - starts
        rep = np.repeat(np.arange(len(cols["pp"])), counts)
        offs = np.arange(len(rep)) - np.repeat(np.cumsum(counts) - counts, counts)
        cols = {k: v[rep] for k, v in cols.items()}
        cols["pp_first_layers"] = t[starts[rep] + offs, 1]
        cols["pp_last_layers"] = t[starts[rep] + offs, 2]
    if "etp" not in problem.pins:
        keep = (cols["etp"] == 1) | (cols["etp"] == cols["tp"])
        cols = {k: v[keep] for k, v in cols.items()}
    check = dict(cols)
    check["gbs"] = np.int64(problem.gbs)
    check["seq_len"] = np.int64(problem.seq_len)
    counts, alive = removed_by_rule(problem.ctx, check, _skeleton_rules())
    out = {k: cols[k][alive] for k in SKELETON}
    rows = np.stack([out[k] for k in SKELETON], axis=1)
    if len(rows):
        rows = rows[np.lexsort(rows.T[::-1])]
    return {k: rows[:, i].copy() for i, k in enumerate(SKELETON)}, counts


def enumerate_skeleton(problem: Problem, engine: str = "cpsat", dom: Optional[dict] = None):
    """(skeleton rows, per-rule removal counts over the skeleton, skeleton candidates before the
    rules). ``engine``: cpsat (phase 1 by CP-SAT) or numpy (phase 1 by a numpy filter)."""
    dom = dom or domains(problem)
    np_core, grid, first = core_numpy(problem, dom)
    if engine == "cpsat":
        core = core_cpsat(problem, dom)
    elif engine == "numpy":
        core = np_core
    else:
        raise ValueError(f"unknown engine {engine!r} (cpsat or numpy)")
    # Stats: phase-1 removals weighted by how many skeletons each core row stands for.
    weight = _expansion_counts(problem, dom, grid)
    counts = {r.name: 0 for r in RULES}
    for i, r in enumerate(_core_rules(_core_constants(problem, dom))):
        counts[r.name] += int(weight[first == i].sum())
    skel, c2 = expand(problem, core, dom)
    for k, v in c2.items():
        counts[k] += v
    return skel, counts, int(weight.sum())


def build_space(problem: Problem, engine: str = "cpsat") -> Space:
    """Enumerate the space of ``problem`` (``engine``: cpsat or numpy) with per-rule stats."""
    t0 = time.perf_counter()
    dom = domains(problem)
    ctx = problem.ctx
    skel, counts, n_grid = enumerate_skeleton(problem, engine, dom)
    bgrid = _broadcast_grid(dom)
    # The broadcast rules do not depend on the skeleton except sequence_parallel_needs_tp, which
    # the search meets by construction (sp is forced off where tp == 1), hence tp = 2 here.
    b_rules = [r for r in RULES if set(r.fields) & set(BROADCAST)]
    bcols = dict(bgrid)
    bcols["tp"] = np.int64(2)
    b_counts, b_alive = removed_by_rule(ctx, bcols, b_rules)
    broadcast = {k: v[b_alive] for k, v in bgrid.items()}
    n_b_raw = len(bgrid["zero"])
    n_s = len(skel["tp"])
    total = {}
    for r in RULES:
        total[r.name] = counts.get(r.name, 0) * n_b_raw + b_counts.get(r.name, 0) * n_s
    return Space(problem=problem, skeleton=skel, broadcast=broadcast, raw_size=n_grid * n_b_raw,
                 removed_by_rule=total, engine=engine, seconds=time.perf_counter() - t0)


def _broadcast_grid(dom: dict) -> dict[str, np.ndarray]:
    """Cartesian product of the broadcast knobs' domains."""
    grids = np.meshgrid(*[np.asarray(dom[k]) for k in BROADCAST], indexing="ij")
    out = {k: gr.reshape(-1) for k, gr in zip(BROADCAST, grids)}
    out["sequence_parallel"] = out["sequence_parallel"].astype(bool)
    for k in ("zero", "recompute", "precision", "recompute_share"):
        out[k] = out[k].astype(np.int64)
    return out


def feasible_estimate(problem: Problem) -> int:
    """Upper bound of the layouts of ``problem`` without enumerating (for ``--method auto``)."""
    return raw_size(problem)


def all_pin_combinations(values: dict[str, list]) -> list[dict]:
    """Product of knob -> values lists as pin dicts (helper for tests and optuna)."""
    keys = list(values)
    return [dict(zip(keys, combo)) for combo in itertools.product(*[values[k] for k in keys])]
