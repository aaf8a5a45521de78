"""Optuna search, for spaces too big to enumerate (several GPU counts / GPU types, stage splits).

Each trial samples the *degree core*: the problem (GPU type and GPU count, when there are
several) and tp, cp, pp, ep over the union of the problems' default domains (pins fix a knob; dp
is what the GPU count leaves). Everything cheap is then enumerated inside the trial, exactly as
the exhaustive search does for a core row (``search.space.expand`` + the broadcast knobs): every
etp, vpp, mbs, searched stage split, ZeRO stage and recompute mode that obeys the rules, priced
in one ``evaluate_batch`` call (up to a few thousand layouts). A trial's value is the best
fitting step time of that batch (Pareto mode: its best time and best second objective). Every
layout a trial evaluates goes into the same pools as the exhaustive search, so the reported
top-K / Pareto front is exact over everything evaluated; trial values only steer the sampler.
Sampling the core rather than every knob keeps TPE's space small (4 x 13 x 7 values for 405B
on 16,384 GPUs) and most trials feasible.

Infeasible trials are penalized, not pruned, so every sampler sees them: ``PENALTY_RULES`` when
the sampled degrees break a rule (e.g. tp*cp*pp does not divide the GPU count), and
``PENALTY_MEMORY`` + GiB over the limit when they obey the rules but nothing fits in memory (so the
sampler still sees which way memory goes down).

Samplers: ``tpe`` (default; multivariate TPE), ``random``, ``nsga2`` (default with ``pareto``).
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from search.exhaustive import Objectives, Pools, Progress, memory_limit_gib
from search.rules import RULES, removed_by_rule
from search.space import BROADCAST, Problem, Space, _broadcast_grid, domains, expand

PENALTY_RULES = 1e12
"""Trial value when the sampled degrees break a hard rule."""
PENALTY_MEMORY = 1e9
"""Base trial value when nothing in the trial's batch fits in memory (+ GiB over the limit)."""
SAMPLERS = ("tpe", "random", "nsga2")


def make_sampler(name: Optional[str], seed: int, pareto: bool):
    """An optuna sampler by name (None: tpe, or nsga2 for a Pareto search)."""
    import optuna

    from hardware_catalog.errors import PlannerInputError

    name = name or ("nsga2" if pareto else "tpe")
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=20)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=30)
    raise PlannerInputError(f"--sampler {name!r} is not allowed (allowed: {', '.join(SAMPLERS)})")


def run_optuna(problems: list[Problem], *, trials: int, seed: int, top: int, memory_headroom: float,
               objectives: Objectives = Objectives(), sampler: Optional[str] = None,
               progress: bool = False) -> tuple[Pools, dict]:
    """Search ``problems`` with ``trials`` optuna trials. Returns the pools and stats."""
    import optuna

    from costmodel import evaluate_batch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t0 = time.perf_counter()
    pools = Pools(top=top, objectives=objectives)
    doms = [domains(p) for p in problems]
    by_key = {(p.gpu.name, p.gpus): i for i, p in enumerate(problems)}
    gpu_names = sorted({p.gpu.name for p in problems})
    gpu_counts = sorted({p.gpus for p in problems})

    def union(k):
        vals = set()
        for d in doms:
            vals |= set(int(x) for x in d[k])
        return sorted(vals)

    choices = {k: union(k) for k in ("tp", "cp", "pp", "ep")}
    broadcasts = []
    for p, d in zip(problems, doms):
        bgrid = _broadcast_grid(d)
        bcols = dict(bgrid)
        bcols["tp"] = np.int64(2)  # sp is forced off where tp == 1, so its rule always holds
        _, alive = removed_by_rule(p.ctx, bcols, [r for r in RULES if set(r.fields) & set(BROADCAST)])
        broadcasts.append({k: v[alive] for k, v in bgrid.items()})
    cache: dict = {}
    counters = {"proposed": 0, "feasible": 0, "infeasible_trials": 0, "no_fit_trials": 0}
    bar = Progress(trials, "optuna", enabled=progress)

    def penalty(v):
        return (v, v) if objectives.pareto else v

    def objective(trial):
        gname = trial.suggest_categorical("gpu", gpu_names) if len(gpu_names) > 1 else gpu_names[0]
        g = trial.suggest_categorical("gpus", gpu_counts) if len(gpu_counts) > 1 else gpu_counts[0]
        pi = by_key.get((gname, g))
        knobs = {k: (trial.suggest_categorical(k, vals) if len(vals) > 1 else vals[0]) for k, vals in choices.items()}
        key = (pi,) + tuple(knobs[k] for k in choices)
        if key not in cache:
            cache[key] = _trial_value(pi, knobs)
        return cache[key]

    def _trial_value(pi, knobs):
        if pi is None:
            counters["infeasible_trials"] += 1
            return penalty(PENALTY_RULES)
        p, dom = problems[pi], doms[pi]
        tcp = knobs["tp"] * knobs["cp"] * knobs["pp"]
        dp = p.gpus // tcp if p.gpus % tcp == 0 else 1
        dp = p.pins.get("dp", dp)
        core = {k: np.array([v], dtype=np.int64) for k, v in knobs.items()}
        core["dp"] = np.array([dp], dtype=np.int64)
        skel, removed = expand(p, core, dom)
        space = Space(problem=p, skeleton=skel, broadcast=broadcasts[pi], raw_size=0, removed_by_rule={},
                      engine="optuna", seconds=0.0)
        counters["proposed"] += (len(skel["tp"]) + sum(removed.values())) * len(broadcasts[pi]["zero"])
        if len(space) == 0:
            counters["infeasible_trials"] += 1
            return penalty(PENALTY_RULES)
        counters["feasible"] += len(space)
        batch = space.batch()
        result = evaluate_batch(p.model, p.cluster, batch, gpu=p.gpu)
        limit = memory_limit_gib(p.gpu.memory_gib, memory_headroom)
        pools.add(p, result, limit)
        peak = np.asarray(result.memory_gib["peak"], dtype=np.float64)
        step = np.asarray(result.step_time_s, dtype=np.float64)
        fit = (peak <= limit) & np.isfinite(step)
        if not fit.any():
            counters["no_fit_trials"] += 1
            return penalty(PENALTY_MEMORY + float(np.min(peak - limit)))
        if objectives.pareto:
            gpus = batch.tp * batch.pp * batch.dp * batch.cp
            a, b = objectives.values(result, gpus)
            return float(np.min(a[fit])), float(np.min(b[fit]))
        return float(np.min(step[fit]))

    smp = make_sampler(sampler, seed, objectives.pareto)
    directions = ["minimize", "minimize"] if objectives.pareto else None
    study = optuna.create_study(sampler=smp, directions=directions) if directions else \
        optuna.create_study(sampler=smp, direction="minimize")

    def _cb(study, trial):
        bar.update(trial.number + 1)

    study.optimize(objective, n_trials=int(trials), callbacks=[_cb], gc_after_trial=False)
    bar.close()
    stats = {
        "method": "optuna",
        "sampler": smp.__class__.__name__.replace("Sampler", "").lower().replace("nsgaii", "nsga2"),
        "trials": int(trials),
        "seed": int(seed),
        "enumerated": counters["proposed"],
        "feasible": counters["feasible"],
        "evaluated": pools.evaluated,
        "fits": pools.fits,
        "distinct_trials": len(cache),
        "infeasible_trials": counters["infeasible_trials"],
        "no_fit_trials": counters["no_fit_trials"],
        "optimize_seconds": time.perf_counter() - t0,
    }
    return pools, stats
