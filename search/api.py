"""``search(request)``: the fastest layouts that fit, as a typed result (``search.request`` says
what a request holds).

GPU counts (``gpus``): an int, a list of ints, or a string:

* ``"16384"``: one count;
* ``"4096,8192,16384"``: a comma list;
* ``"4096..16384"``: doubling from A while <= B (4096, 8192, 16384; ``"3072..12288"`` gives
  3072, 6144, 12288) -- layouts come in powers of two, so doubling is the useful sweep;
* ``"4096..16384:2048"``: A to B in steps of S (4096, 6144, ..., 16384);
  parts can be mixed: ``"1024,4096..16384"``. At most ``MAX_GPU_COUNTS`` counts.

GPU types (``gpu``): a name, a ``GPUSpec``, a comma list ``"h100,b200"`` or a list; each runs
on its default cluster (``hardware_catalog.default_cluster_for_gpu``). ``cluster`` (a name, a
file or a ``ClusterSpec``) fixes the cluster and so the GPU type.

``method``: ``exhaustive`` enumerates everything (CP-SAT + numpy, see ``search.space``),
``optuna`` samples (``search.optuna_search``), ``auto`` enumerates when enumerating and pricing
the real space (the valid layouts, counted by building it) is predicted to take at most
``search.exhaustive.AUTO_SECONDS``, else uses optuna (``search.exhaustive.choose_method``);
``stats["method"]`` says which ran, ``stats["auto"]`` why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

import numpy as np

from costmodel.goodput import TRAIN_TOKENS, parse_prices  # declared with the run model
from costmodel.layout import RECOMPUTE, check_implementation, parse_recompute_modules, recompute_modules_mask
from costmodel.options import GPUS, OPTIONS_BY_NAME, Bound, resolve_batch
from hardware_catalog.errors import PlannerInputError
from search.exhaustive import Candidate, Objectives, run_exhaustive
from search.request import SearchRequest
from search.space import Problem, normalize_pins, raw_size

MAX_GPU_COUNTS = 64
"""Most GPU counts one search may sweep."""
METHODS = ("auto", "exhaustive", "optuna")
TOP = Bound("--top", minimum=1, maximum=1000)
"""Layouts a search reports."""
TRIALS = Bound("--trials", minimum=1, maximum=1_000_000_000)
"""Optuna trials (a run samples at most the space's distinct degree cores, ``search.optuna_search``)."""
SEED = Bound("--seed", minimum=0, maximum=2**32 - 1)
"""Optuna seed (numpy's random state takes 32 bits)."""
MEMORY_HEADROOM = Bound("--memory-headroom", integer=False, minimum=0, below=1)
"""Fraction of HBM kept free."""


def _err(msg: str):
    from hardware_catalog.errors import PlannerInputError

    return PlannerInputError(msg)


@dataclass
class SearchResult:
    """What a search found."""

    results: list[dict]
    """Best layouts (evaluate-shaped records, best first; with ``pareto``: the Pareto front by
    time). Each has ``rank`` and ``memory_limit_gib`` / ``headroom_gib`` added."""
    stats: dict
    """enumerated, feasible, evaluated, fits, seconds, method (+ engine or sampler/trials/seed),
    removed_by_rule (exhaustive), memory_headroom, problems."""
    closest: list[dict] = field(default_factory=list)
    """When nothing fits: the layouts needing the least memory, each with ``exceeds_gib`` and
    ``stopped_by`` (the resource or rule that stops it)."""
    message: str = ""
    """One line on what happened when nothing fits (else empty)."""
    headline: str = "nothing fits"
    """What the answer is when no layout is shown: "nothing fits" (memory or the rules), or
    "nothing to launch" (layouts fit, but the ``--framework`` release launches none of them)."""
    specs: list = field(default_factory=list, repr=False)
    """(ModelSpec, ClusterSpec, GPUSpec) of each entry of ``results`` (for exporting)."""
    objectives: Optional[Objectives] = field(default=None, repr=False)
    fitting_keys: Optional[np.ndarray] = field(default=None, repr=False)
    """Ranked quantity of every layout that fits, sorted (``rank_of``)."""
    calib: Any = field(default=None, repr=False)
    """The constants every layout was priced with (None: the shipped ones); a layout priced
    elsewhere for comparison (a published recipe) must use the same."""

    def rank_of(self, record: dict) -> Optional[int]:
        """Where a layout priced elsewhere (an evaluate-shaped record) would rank among the
        layouts this search found fitting (1 = ahead of all of them)."""
        if self.fitting_keys is None or self.objectives is None:
            return None
        key = self.objectives.rank_value(record["step_time_s"], record["tokens_per_s"], record["gpus"],
                                         record.get("gpu"))
        return int(np.searchsorted(self.fitting_keys, key * (1 - 1e-9))) + 1

    @property
    def best(self) -> Optional[dict]:
        return self.results[0] if self.results else None

    def to_dict(self) -> dict:
        d = {"results": self.results, "stats": self.stats}
        if not self.results:
            d["closest"] = self.closest
            d["message"] = self.message
            d["headline"] = self.headline
        return d


# --------------------------------------------------------------------------------------- parsing


def parse_gpu_counts(gpus: Union[int, str, Sequence[int]]) -> list[int]:
    """GPU counts from an int, a list or the string syntax in the module doc (sorted, unique),
    each within ``costmodel.options.GPUS``."""
    if isinstance(gpus, str):
        counts = []
        for part in gpus.replace(" ", "").split(","):
            counts += _gpu_count_part(gpus, part)
    elif isinstance(gpus, (list, tuple)):
        counts = [GPUS.parse(x) for x in gpus]
    else:
        counts = [GPUS.parse(gpus)]
    if not counts:
        raise _err(f"--gpus {gpus!r}: no GPU count given")
    counts = sorted(set(counts))
    if len(counts) > MAX_GPU_COUNTS:
        raise _err(f"--gpus {gpus!r} gives {len(counts)} GPU counts (at most {MAX_GPU_COUNTS})")
    return counts


_GPUS_SYNTAX = (f"allowed: N, a comma list N1,N2, A..B doubling from A to B, or A..B:S in steps of S; "
                f"counts {GPUS.allowed()}")


def _gpu_count_part(text: str, part: str) -> list[int]:
    """The counts one comma-separated part of --gpus names."""
    try:
        if ".." not in part:
            return [GPUS.parse(int(part))]
        rng, _, step = part.partition(":")
        a_s, _, b_s = rng.partition("..")
        a, b = GPUS.parse(int(a_s)), GPUS.parse(int(b_s))
        if b < a:
            raise ValueError
        if step:
            s = int(step)
            if s <= 0:
                raise ValueError
            if (b - a) // s + 1 > MAX_GPU_COUNTS:
                raise _err(f"--gpus {text!r} gives more than {MAX_GPU_COUNTS} GPU counts")
            return list(range(a, b + 1, s))
        out = []
        while a <= b:
            out.append(a)
            a *= 2
        return out
    except PlannerInputError:
        raise
    except ValueError:
        raise _err(f"--gpus {text!r} is not understood ({_GPUS_SYNTAX})") from None


def _resolve_model(model):
    if isinstance(model, str):
        from hardware_catalog import get_model

        return get_model(model)
    return model


def _resolve_hardware(gpu, cluster) -> list[tuple[Any, Any]]:
    """[(GPUSpec, ClusterSpec)] for the GPU type(s) / cluster given."""
    from hardware_catalog.schema import ClusterSpec, GPUSpec

    def get_gpu(x):
        if isinstance(x, GPUSpec):
            return x
        from hardware_catalog import get_gpu as _g

        return _g(x)

    if cluster is not None:
        if isinstance(cluster, ClusterSpec):
            cspec = cluster
        else:
            from hardware_catalog import get_cluster

            cspec = get_cluster(cluster)
        if gpu is None:
            return [(get_gpu(cspec.gpu), cspec)]
        gl = _gpu_list(gpu)
        if len(gl) != 1:
            raise _err("--cluster fixes the GPU type; give one --gpu (or none) with --cluster")
        gspec = get_gpu(gl[0])
        if cspec.gpu == gspec.name or cspec.gpu in gspec.aliases:
            return [(gspec, cspec)]
        cgpu = get_gpu(cspec.gpu)
        if gspec.name != cgpu.name:
            raise _err(f"--gpu {gspec.name} disagrees with cluster '{cspec.name}', which has {cgpu.name}")
        return [(gspec, cspec)]
    if gpu is None:
        raise _err("give --gpu NAME (e.g. h100, or a list h100,b200) or --cluster NAME|FILE")
    from hardware_catalog import default_cluster_for_gpu

    out = []
    seen = set()
    for g in _gpu_list(gpu):
        gspec = get_gpu(g)
        if gspec.name in seen:
            continue
        seen.add(gspec.name)
        out.append((gspec, default_cluster_for_gpu(gspec.name)))
    return out


def _gpu_list(gpu) -> list:
    if isinstance(gpu, str):
        items = [x for x in gpu.replace(" ", "").split(",") if x]
        if not items:
            raise _err(f"--gpu {gpu!r}: no GPU type given")
        return items
    if isinstance(gpu, (list, tuple)):
        return list(gpu)
    return [gpu]


def _resolve_batch(model, seq_len, gbs, tokens_per_batch) -> tuple[int, int]:
    batch = resolve_batch(model, seq_len, gbs, tokens_per_batch)
    return batch.gbs, batch.seq_len


# ---------------------------------------------------------------------------------------- records


def _record(c: Candidate, objectives: Objectives, rank: int) -> dict:
    from costmodel.record import result_record

    p = c.problem
    rec = result_record(p.model, p.cluster, p.gpu, c.result, 0)
    rec["rank"] = rank
    rec["memory_limit_gib"] = c.limit
    rec["headroom_gib"] = c.limit - c.peak
    rec.update(objectives.extras(rec["step_time_s"], rec["tokens_per_s"], rec["gpus"], rec["gpu"]))
    return rec


def _stopped_by(rec: dict, limit: float) -> str:
    from costmodel.result import MEMORY_TERMS

    mem = rec["memory_gib"]
    top = max(MEMORY_TERMS, key=lambda k: mem[k])
    peak, cap = mem["peak"], mem["capacity"]
    if peak <= cap:
        return (f"memory headroom: needs {peak:.1f} GiB, fits the {cap:.1f} GiB HBM but not the "
                f"{limit:.1f} GiB limit (--memory-headroom); largest part: {top} {mem[top]:.1f} GiB")
    return (f"memory: needs {peak:.1f} GiB per GPU > {limit:.1f} GiB usable of {cap:.1f} GiB; "
            f"largest part: {top} {mem[top]:.1f} GiB")


def _spread(cands: list, k: int) -> list:
    """k points spread evenly along a Pareto front (both ends kept)."""
    if len(cands) <= k:
        return cands
    idx = np.unique(np.round(np.linspace(0, len(cands) - 1, k)).astype(int))
    return [cands[i] for i in idx]


# ------------------------------------------------------------------------------------------ search


def search(request: SearchRequest) -> SearchResult:
    """Find the fastest layouts that fit in memory, for ``request`` (``search.request``: the
    problem, the search's options, the ranking, the constants).

    The problem's ``gpus`` takes an int, a list or a string, ``gpu`` a name or a list (see module
    doc). Options: ``pins`` fix searched knobs; ``implementation`` settings and
    ``recompute_modules`` apply to every candidate where their rules allow; ``storage`` /
    ``study_name`` run the optuna search in a shared study other processes may join
    (``search.storage``; ``method`` auto then means optuna, and ``trials`` counts the study's
    trials). Ranking: ``pareto`` gives the time vs memory front (vs cost when
    ``price_per_gpu_hour``; whole-run time and cost when ``train_tokens``); ``objective`` and
    ``rank_by`` order the top list (``search.ranking``); ``within_envelope`` keeps only layouts
    inside the validated envelope (``search.envelope``). Every result carries an 80% interval,
    its envelope flags and ``ties_best``. ``ranking.run``: a ``costmodel.goodput.RunInputs`` (failures,
    checkpoints, restarts, power): whole-run time, cost and energy count the wall time with goodput
    (default: its defaults when ranking by time-to-train, cost or energy). ``options.domain`` (a
    ``--framework`` release's, ``planner.export.domain``): only layouts a format launching that
    release writes are ranked; ``stats["domain"]`` counts what it left out, a typed value every
    layout's refusal reads is bad input. Raises ``PlannerInputError`` on bad input.
    """
    job, opts, ranking, calib = request.problem, request.options, request.ranking, request.calib
    model, gpus, gpu, cluster = job.model, job.gpus, job.gpu, job.cluster
    pins, method, trials, seed, sampler = opts.pins, opts.method, opts.trials, opts.seed, opts.sampler
    storage, study_name, progress, engine = opts.storage, opts.study_name, opts.progress, opts.engine
    top, pareto, objective, rank_by = ranking.top, ranking.pareto, ranking.objective, ranking.rank_by
    within_envelope, stage_splits, allow_cross_node_tp = ranking.within_envelope, opts.stage_splits, job.allow_cross_node_tp
    run = ranking.run
    t0 = time.perf_counter()
    top, trials, seed, memory_headroom, price_per_gpu_hour, train_tokens = _check_settings(
        method, sampler, top, trials, seed, opts.memory_headroom, ranking.price_per_gpu_hour, ranking.train_tokens)
    _check_ranking(rank_by, objective, pareto)
    model_spec = _resolve_model(model)
    hardware = _resolve_hardware(gpu, cluster)
    # a price for every GPU type of the search, or per type (each row at its own GPU's price)
    prices = parse_prices(price_per_gpu_hour, tuple(g.name for g, _ in hardware), "this search") or None
    counts = parse_gpu_counts(gpus)
    batch = resolve_batch(model_spec, job.seq_len, job.gbs, job.tokens_per_batch)
    gbs_v, seq_v = batch.gbs, batch.seq_len
    pins_n = normalize_pins(pins)
    impl = check_implementation(opts.implementation or {})
    recompute_modules = parse_recompute_modules(opts.recompute_modules)
    modules_mask = recompute_modules_mask(recompute_modules)
    from search.rules import check_settings

    settings = {**impl, "recompute_modules": recompute_modules}
    if "recompute" in pins_n:
        settings["recompute"] = RECOMPUTE[pins_n["recompute"]]
    check_settings(model_spec, settings, {k: OPTIONS_BY_NAME[k].decode(c) for k, c in pins_n.items()})
    from hardware_catalog.hardware import check_whole_nodes

    for _, c in hardware:
        for n in counts:
            check_whole_nodes(c, n)
    from search.rules import RuleContext, broken_rule_message, fixed_value_violations, unreachable_pins

    unreachable = unreachable_pins(counts, {k: OPTIONS_BY_NAME[k].decode(c) for k, c in pins_n.items()}, gbs_v)
    if unreachable:  # no layout can hold these pins: bad input, as evaluate says of the same layout
        raise PlannerInputError(unreachable)

    # A setting no GPU of the search can run (--fp8-recipe mxfp8 on Hopper) would be priced as the
    # option's default where it does not apply (where_settings_apply), and a pin that breaks a rule
    # on every GPU type and count of the search (--precision fp8 on an A100, --tp 16 past an
    # 8-GPU domain) leaves nothing to search: bad input, as in evaluate (exit 2, nothing written).
    # Stage splits the search does not enumerate are fixed at 0 (auto, search.space.domains), so a
    # pinned pp is checked against the layers as evaluate checks it (--pp 64 on 32 layers).
    splits_fixed = {k: 0 for k in ("pp_first_layers", "pp_last_layers") if k not in pins_n
                    and not (stage_splits and not {"pp_first_layers", "pp_last_layers"} & set(pins_n))}
    pin_violations = fixed_value_violations(
        [RuleContext.build(model_spec, n, c, g, allow_cross_node_tp) for g, c in hardware for n in counts],
        settings, {k: OPTIONS_BY_NAME[k].decode(c) for k, c in pins_n.items()},
        {"gbs": gbs_v, "seq_len": seq_v, **splits_fixed})
    if pin_violations:
        name, reason, _ = pin_violations[0]
        raise PlannerInputError(broken_rule_message(name, reason))
    problems = [
        Problem(model=model_spec, cluster=c, gpu=g, gpus=n, gbs=gbs_v, seq_len=seq_v, pins=pins_n,
                allow_cross_node_tp=allow_cross_node_tp, stage_splits=stage_splits, implementation=impl,
                recompute_modules=modules_mask, within_envelope=bool(within_envelope), domain=opts.domain)
        for g, c in hardware for n in counts
    ]
    objectives = Objectives(pareto=bool(pareto), prices=prices, train_tokens=train_tokens,
                            rank=objective, run=_run_model(run, objective, train_tokens, model_spec, hardware))
    from search.ranking import pool_size

    pool = pool_size(top, rank_by)
    size = sum(raw_size(p) for p in problems)
    chosen = method
    if storage is not None:
        if method == "exhaustive":
            raise _err("--storage shares an optuna study: use it with --method optuna (or auto)")
        from search.storage import check_study_name

        if study_name is not None:
            check_study_name(study_name)  # before the storage file is created or opened
        chosen = "optuna"
    elif study_name is not None:
        raise _err(f"--study-name {study_name!r} needs --storage (the study lives there)")
    auto = None
    if method == "auto" and storage is None:
        # From the real candidate count (the spaces built, rules applied), not the upper bound:
        # enumerate whenever that takes seconds, so the default answer is the optimum.
        from search.exhaustive import AUTO_SECONDS, choose_method

        auto = choose_method(problems, engine)
        chosen = auto.method
    if chosen == "exhaustive":
        pools, stats = run_exhaustive(problems, top=pool, memory_headroom=memory_headroom,
                                      objectives=objectives, progress=progress, engine=engine, calib=calib,
                                      spaces=auto.spaces if auto is not None else None)
    else:
        from search.optuna_search import run_optuna

        pools, stats = run_optuna(problems, trials=trials, seed=seed, top=pool,
                                  memory_headroom=memory_headroom, objectives=objectives,
                                  sampler=sampler, progress=progress, storage=storage, study_name=study_name,
                                  calib=calib)
    if auto is not None:
        stats["auto"] = {"layouts": auto.layouts, "predicted_seconds": auto.predicted_s, "limit_seconds": AUTO_SECONDS}
    if opts.domain is not None and pools.evaluated and not pools.launchable:
        _refuse_pinned(opts.domain, pools, {**{k: OPTIONS_BY_NAME[k].decode(c) for k, c in pins_n.items()},
                                            **{k: v for k, v in settings.items() if k in opts.domain.typed}})
    dropped: dict = {}
    results, chosen_c = _top_records(pools, objectives, top, rank_by, opts.domain, dropped)
    specs = [(c.problem.model, c.problem.cluster, c.problem.gpu) for c in chosen_c]
    stats.update({
        "method_requested": method,
        "space_upper_bound": size,
        "memory_headroom": float(memory_headroom),
        "model": model_spec.name,
        "gpu_types": [g.name for g, _ in hardware],
        "clusters": [c.name for _, c in hardware],
        "gpu_counts": counts,
        "gbs": gbs_v,
        "seq_len": seq_v,
        "pins": {k: v for k, v in (pins or {}).items() if v is not None},
        "stage_splits": bool(stage_splits),
        "implementation": impl,
        "recompute_modules": list(recompute_modules) if recompute_modules is not None else None,
        "objective": objective,
        "rank_by": rank_by,
        "rerank_pool": pool if rank_by == "p10" else None,
        "within_envelope": bool(within_envelope),
        "outside_envelope": pools.outside_envelope,
        "prices": prices or {},
        "interval": _interval_provenance(),
    })
    if opts.domain is not None:
        stats["domain"] = {"release": opts.domain.release, "formats": list(opts.domain.formats),
                           "left_out": pools.outside_domain, "rules": dict(pools.domain_rules),
                           "rows_dropped": dropped, "launchable": pools.launchable,
                           "rules_all": dict(pools.domain_rules_all)}
    if pareto:
        stats["objectives"] = list(objectives.names)
        # the points shown are drawn from: with a domain, those a launch format writes (the rest
        # counted in rows_dropped, as only the front's rows are checked with --pareto)
        stats["pareto_front_size"] = len(pools.front) - sum(dropped.values())
    closest, message, headline = [], "", "nothing fits"
    if not results:
        message = _outside_domain(pools, stats)
        if message:
            headline = "nothing to launch"
        else:
            closest, message = _explain_nothing_fits(pools, stats, objectives, batch.origin,
                                                     problems if opts.look_around else (), calib)
    stats["seconds"] = time.perf_counter() - t0
    keys = np.sort(np.concatenate(pools.keys)) if pools.keys else np.zeros(0)
    return SearchResult(results=results, stats=stats, closest=closest, message=message, specs=specs,
                        objectives=objectives, fitting_keys=keys, calib=calib, headline=headline)


def _run_model(run, objective: str, train_tokens, model_spec, hardware):
    """The goodput model the ranking and the run fields use (``costmodel.goodput.RunModel``):
    given ``run`` inputs, or their defaults when the objective or a token budget asks for
    whole-run figures; None otherwise."""
    from costmodel.goodput import RunInputs, RunModel

    if run is None and objective not in ("time-to-train", "cost", "energy") and not train_tokens:
        return None
    return RunModel(model_spec, {g.name: (c, g) for g, c in hardware}, run or RunInputs())


def _check_ranking(rank_by: str, objective: str, pareto: bool) -> None:
    from search.exhaustive import RANK_OBJECTIVES
    from search.ranking import RANK_BY

    if rank_by not in RANK_BY:
        raise _err(f"--rank-by {rank_by!r} is not allowed (allowed: {', '.join(RANK_BY)})")
    if objective not in RANK_OBJECTIVES:
        raise _err(f"--objective {objective!r} is not allowed (allowed: {', '.join(RANK_OBJECTIVES)})")
    if pareto and (rank_by != "median" or objective != "step-time"):
        raise _err("--pareto shows a front, not a ranking: give it without --rank-by / --objective")


def _top_records(pools, objectives: Objectives, top: int, rank_by: str, domain=None,
                 dropped: Optional[dict] = None) -> tuple[list[dict], list]:
    """The result records (ranked, folded, with intervals and envelope flags) and their candidates;
    with a ``domain``, rows no launch format of the release writes are dropped for the next
    (``_launchable_rows``), counted by rule in ``dropped``."""
    from search.ranking import Ranked, annotate, intervals, rank

    if objectives.pareto:
        front = pools.front if domain is None else _shown_by(pools.front, domain, objectives,
                                                             {} if dropped is None else dropped)
        chosen = _spread(sorted(front, key=lambda c: c.obj), top)
        q = intervals(chosen)
        rows = [Ranked(c, q[:, i], c.key) for i, c in enumerate(chosen)]
    elif domain is not None:
        rows = _launchable_rows(pools.best, top, rank_by, domain, objectives, {} if dropped is None else dropped)
    else:
        rows = rank(pools.best, top, rank_by)
    records = []
    for i, row in enumerate(rows):
        rec = _record(row.cand, objectives, i + 1)
        annotate(rec, row, rows[0])
        records.append(rec)
    return records, [r.cand for r in rows]


def _refused_rule(c, domain, objectives: Objectives, checked: dict):
    """The rule by which every launch format of the release refuses candidate ``c`` (None: one
    writes it), asked once per candidate (``checked``: id -> the exporters' answer)."""
    if id(c) not in checked:
        p = c.problem
        checked[id(c)] = domain.refused(_record(c, objectives, 0), p.model, p.cluster)
    return checked[id(c)][0] if checked[id(c)] else None


def _shown_by(cands: list, domain, objectives: Objectives, dropped: dict) -> list:
    """The candidates of a Pareto front that a launch format of the release writes; each refused one
    is counted by its rule in ``dropped`` (the same check ``_launchable_rows`` makes on ranked rows)."""
    kept, checked = [], {}
    for c in cands:
        rule = _refused_rule(c, domain, objectives, checked)
        if rule is None:
            kept.append(c)
        else:
            dropped[rule] = dropped.get(rule, 0) + 1
    return kept


def _launchable_rows(cands: list, top: int, rank_by: str, domain, objectives: Objectives, dropped: dict) -> list:
    """The ``top`` rows of ``cands`` that a launch format of the release writes. The pools left out
    what the formats' tables refuse (vectorized); the checks the exporters make beside their tables
    (pipeline split, micro-batches, shapes) run here, on the rows about to be shown only, and a
    refused row gives its place to the next (``dropped``: rule -> rows dropped)."""
    from search.ranking import rank

    cands, checked = list(cands), {}
    while True:
        rows = rank(cands, top, rank_by)
        bad = []
        for row in rows:
            c = row.cand
            rule = _refused_rule(c, domain, objectives, checked)
            if rule is not None:  # removed from cands below, so counted once
                dropped[rule] = dropped.get(rule, 0) + 1
                bad.append(id(c))
        if not bad:
            return rows
        cands = [c for c in cands if id(c) not in bad]


def _refuse_pinned(domain, pools, given: dict) -> None:
    """Every layout the search priced is one the release cannot launch: when the rules that left
    them out read values the user typed (``given``: option -> value, of which those named in
    ``domain.typed`` count), those values are bad input (one line, exit 2)."""
    typed = {k: v for k, v in given.items() if k in domain.typed}
    rules = sorted(pools.domain_rules_all, key=lambda r: -pools.domain_rules_all[r])
    named = list(dict.fromkeys(k for r in rules for k in pools.domain_reads.get(r, ()) if k in typed))
    if not named:
        return
    said = " ".join(f"{OPTIONS_BY_NAME[k].flag} {_shown(typed[k])}" for k in named)
    top = next(r for r in rules if set(pools.domain_reads.get(r, ())) & set(named))
    also = [r for r in rules if r != top]
    others = f" (and {', '.join(also[:3])}{', ...' if len(also) > 3 else ''} for the rest)" if also else ""
    raise PlannerInputError(f"{said}: {domain.release} cannot launch it: every format that launches it "
                            f"({', '.join(domain.formats)}) refuses it{others}, {pools.domain_reasons[top]}")


def _shown(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _interval_provenance() -> dict:
    from search.uncertainty import QUANTILES, load

    prov = load().provenance
    return {"quantiles": list(QUANTILES), "generated": prov.get("generated"), "command": prov.get("command")}


def _check_settings(method, sampler, top, trials, seed, memory_headroom, price, train_tokens) -> tuple:
    """The search's own settings checked against their declared ranges (one line naming the flag)."""
    if method not in METHODS:
        raise _err(f"--method {method!r} is not allowed (allowed: {', '.join(METHODS)})")
    if sampler is not None:
        from search.optuna_search import SAMPLERS

        if sampler not in SAMPLERS:
            raise _err(f"--sampler {sampler!r} is not allowed (allowed: {', '.join(SAMPLERS)})")
    return (TOP.parse(top), TRIALS.parse(trials), SEED.parse(seed), MEMORY_HEADROOM.parse(memory_headroom),
            price,  # read with the search's GPU types (costmodel.goodput.parse_prices)
            None if train_tokens is None else TRAIN_TOKENS.parse(train_tokens))


def _formats_and_rules(domain: dict, counts: str, verb: str) -> str:
    """"(megatron, torchrun, slurm; rule_a left out 12; rule_b left out 3)": the release's formats
    and the three rules of ``domain[counts]`` that refused most."""
    rules = sorted(domain[counts].items(), key=lambda kv: -kv[1])[:3]
    return f"({', '.join(domain['formats'])}; " + "; ".join(f"{k} {verb}{v:,}" for k, v in rules) + ")"


def _outside_domain(pools, stats) -> str:
    """One line when layouts fit (or obey the rules) but the ``--framework`` release launches none
    of them ("" otherwise): the search answers "nothing to launch", not "nothing fits"."""
    domain = stats.get("domain")
    if not domain:
        return ""
    if pools.outside_domain and not pools.best:
        return (f"{pools.outside_domain:,} layouts fit in memory, but {domain['release']} can launch none of them: "
                f"every format that launches it refuses them {_formats_and_rules(domain, 'rules', 'left out ')}; "
                "search without --framework to see them")
    if domain["rows_dropped"] and pools.best:
        return (f"layouts fit in memory, but none of the {len(pools.best):,} best of them is one {domain['release']} "
                f"can launch: every format that launches it refuses them {_formats_and_rules(domain, 'rows_dropped', '')}; "
                "search without --framework to see them")
    if not domain["launchable"] and stats.get("feasible", 0) and domain["rules_all"]:
        return (f"no layout {domain['release']} can launch: every layout the rules leave is refused "
                f"by every format that launches it {_formats_and_rules(domain, 'rules_all', 'left out ')}")
    return ""


def _explain_nothing_fits(pools, stats, objectives, batch_origin: str = "",
                          problems: Sequence[Problem] = (), calib=None) -> tuple[list[dict], str]:
    """(the closest layouts, one line on why nothing fits). A value the user fixed that breaks a
    rule on its own was refused before the search (``search.rules.fixed_value_violations``). Where
    the rules leave no layout for a single job (one GPU type and count), the line ends with the
    nearest batch sizes and GPU counts that have layouts; where layouts exist but none fits in
    memory, with the fewest GPUs at which one does (``search.nearest``). Layouts outside the
    ``--framework`` release's domain are ``_outside_domain``'s."""
    domain = stats.get("domain")
    if pools.outside_envelope:
        launched = f" and {domain['release']} launches" if domain else ""  # the envelope filters what the domain kept
        return [], (f"no layout inside the validated envelope fits: all {pools.outside_envelope:,} layouts that fit"
                    f"{launched} lie outside it (drop --within-envelope to see them, flagged)")
    closest = []
    for i, c in enumerate(pools.closest):
        rec = _record(c, objectives, i + 1)
        rec["exceeds_gib"] = c.peak - c.limit
        rec["stopped_by"] = _stopped_by(rec, c.limit)
        closest.append(rec)
    if stats.get("feasible", 0) == 0:
        removed = stats.get("removed_by_rule", {})
        if removed:
            from search.rules import RULES_BY_NAME

            worst = sorted(removed.items(), key=lambda kv: -kv[1])
            parts = [f"{k} removed {v:,}" for k, v in worst[:4]]
            name = worst[0][0]
            msg = (f"no layout obeys the rules: {'; '.join(parts)} of {stats.get('enumerated', 0):,} "
                   f"candidates (top rule: {RULES_BY_NAME[name].description})")
            if batch_origin and "gbs" in RULES_BY_NAME[name].fields:
                msg += f"; {batch_origin}"
            if len(problems) == 1:
                from search.nearest import format_nearest, nearest_jobs

                job = problems[0]
                nearest = format_nearest(nearest_jobs(job), job.gpus, job.gbs)
                if nearest:
                    msg += f"; {nearest}"
        else:
            msg = "no layout obeys the rules (every sampled layout broke one; try --method exhaustive or fewer pins)"
        return closest, msg
    if closest:
        best = closest[0]
        msg = (f"no layout fits in memory: the smallest needs {best['memory_gib']['peak']:.1f} GiB per GPU, "
               f"{best['exceeds_gib']:.1f} GiB over the {best['memory_limit_gib']:.1f} GiB limit "
               f"({stats['memory_headroom'] * 100:g}% of {best['memory_gib']['capacity']:.1f} GiB kept free)")
    else:
        msg = "no layout fits in memory"
    if len(problems) == 1 and stats.get("method") == "exhaustive":
        from search.nearest import fewest_fitting_gpus, format_fewest

        fewest = format_fewest(*fewest_fitting_gpus(problems[0], stats["memory_headroom"], calib),
                               problems[0].cluster.gpus_per_node)
        if fewest:
            msg += f"; {fewest}"
    return closest, msg
