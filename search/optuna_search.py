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

import os
import time
from typing import Optional

import numpy as np

from search.exhaustive import Objectives, Pools, Progress, _distinct_recompute, _offered_zero, memory_limit_gib
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


class _Cores:
    """The degree cores trials sample (problem + tp, cp, pp, ep), each priced once, on demand,
    with everything cheap enumerated (see the module doc); every layout priced goes into ``pools``."""

    def __init__(self, problems: list[Problem], pools: Pools, objectives: Objectives, memory_headroom: float,
                 calib=None):
        self.problems, self.pools, self.objectives, self.headroom = problems, pools, objectives, memory_headroom
        self.calib = calib
        self.doms = [domains(p) for p in problems]
        self.by_key = {(p.gpu.name, p.gpus): i for i, p in enumerate(problems)}
        self.gpu_names = sorted({p.gpu.name for p in problems})
        self.gpu_counts = sorted({p.gpus for p in problems})
        self.choices = {k: sorted({int(x) for d in self.doms for x in d[k]}) for k in ("tp", "cp", "pp", "ep")}
        self.broadcasts = [self._broadcast(p, d) for p, d in zip(problems, self.doms)]
        self.cache: dict = {}
        self.counters = {"proposed": 0, "feasible": 0, "infeasible_trials": 0, "no_fit_trials": 0}

    @staticmethod
    def _broadcast(p: Problem, d: dict) -> dict:
        bgrid = _broadcast_grid(d)
        bcols = dict(bgrid)
        bcols["tp"] = np.int64(2)  # sp is forced off where tp == 1, so its rule always holds
        _, alive = removed_by_rule(p.ctx, bcols, [r for r in RULES if set(r.fields) & set(BROADCAST)])
        return {k: v[alive] for k, v in bgrid.items()}

    def space(self) -> dict:
        """What a trial samples: knob -> values (knobs with one value are not sampled)."""
        space = {"gpu": self.gpu_names, "gpus": self.gpu_counts, **self.choices}
        return {k: vals for k, vals in space.items() if len(vals) > 1}

    @property
    def size(self) -> int:
        """Distinct degree cores a trial can sample."""
        n = 1
        for vals in self.space().values():
            n *= len(vals)
        return n

    def objective(self, trial):
        return self.value({k: trial.suggest_categorical(k, vals) for k, vals in self.space().items()})

    def decode(self, params: dict):
        """(cache key, problem index, knobs) of a trial's params (knobs with one value: not sampled)."""
        pi = self.by_key.get((params.get("gpu", self.gpu_names[0]), params.get("gpus", self.gpu_counts[0])))
        knobs = {k: params.get(k, vals[0]) for k, vals in self.choices.items()}
        return (pi,) + tuple(knobs[k] for k in self.choices), pi, knobs

    def value(self, params: dict):
        key, pi, knobs = self.decode(params)
        if key not in self.cache:
            self.cache[key] = self._price(pi, knobs)
        return self.cache[key]

    def _penalty(self, v: float):
        return (v, v) if self.objectives.pareto else v

    def _price(self, pi, knobs):
        from costmodel import evaluate_batch
        from costmodel.calibration import DEFAULT

        if pi is None:
            self.counters["infeasible_trials"] += 1
            return self._penalty(PENALTY_RULES)
        p, dom, bcast = self.problems[pi], self.doms[pi], self.broadcasts[pi]
        tcp = knobs["tp"] * knobs["cp"] * knobs["pp"]
        dp = p.pins.get("dp", p.gpus // tcp if p.gpus % tcp == 0 else 1)
        core = {k: np.array([v], dtype=np.int64) for k, v in knobs.items()}
        core["dp"] = np.array([dp], dtype=np.int64)
        skel, removed = expand(p, core, dom)
        space = Space(problem=p, skeleton=skel, broadcast=bcast, raw_size=0, removed_by_rule={},
                      engine="optuna", seconds=0.0)
        self.counters["proposed"] += (len(skel["tp"]) + sum(removed.values())) * len(bcast["zero"])
        if len(space) == 0:
            self.counters["infeasible_trials"] += 1
            return self._penalty(PENALTY_RULES)
        self.counters["feasible"] += len(space)
        batch = space.batch()
        result = evaluate_batch(p.model, p.cluster, batch, gpu=p.gpu, calib=self.calib or DEFAULT)
        limit = memory_limit_gib(p.gpu.memory_gib, self.headroom)
        self.pools.add(p, result, limit)
        peak = np.asarray(result.memory_gib["peak"], dtype=np.float64)
        step = np.asarray(result.step_time_s, dtype=np.float64)
        # What the pools count as fitting (the same filters as Pools.add): a ZeRO-2 pipeline layout
        # the search does not offer must not steer the sampler towards its core.
        fit = ((peak <= limit) & np.isfinite(step) & _distinct_recompute(p, batch)
               & _offered_zero(p, batch, self.pools.sharded_pipeline_grads))
        if p.domain is not None and fit.any():  # nor one the --framework release cannot launch
            fit[fit] = ~p.domain.outside(batch.take(np.flatnonzero(fit)), p.model, p.cluster).mask
        if not fit.any():
            self.counters["no_fit_trials"] += 1
            return self._penalty(PENALTY_MEMORY + float(np.min(peak - limit)))
        if self.objectives.pareto:
            a, b = self.objectives.values(result, batch.tp * batch.pp * batch.dp * batch.cp, p.gpu.name)
            return float(np.min(a[fit])), float(np.min(b[fit]))
        return float(np.min(step[fit]))


def run_optuna(problems: list[Problem], *, trials: int, seed: int, top: int, memory_headroom: float,
               objectives: Objectives = Objectives(), sampler: Optional[str] = None,
               progress: bool = False, storage: Optional[str] = None,
               study_name: Optional[str] = None, calib=None) -> tuple[Pools, dict]:
    """Search ``problems`` with ``trials`` optuna trials. Returns the pools and stats.

    ``storage`` (a ``search.storage`` URL): join the shared study ``study_name``; ``trials`` is
    then the study's total of complete trials, whichever processes run them."""
    import optuna

    # ERROR: a trial failed by Ctrl-C is logged by optuna as a WARNING with its traceback; planner
    # says "interrupted" once (planner.cli.errors).
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    t0 = time.perf_counter()
    pools = Pools(top=top, objectives=objectives)
    cores = _Cores(problems, pools, objectives, memory_headroom, calib)
    # Workers sharing a study each draw their own random stream (else they repeat each other's
    # startup trials); the result is then not reproducible from the seed alone.
    smp = make_sampler(sampler, seed if storage is None else seed + os.getpid(), objectives.pareto)
    directions = ["minimize", "minimize"] if objectives.pareto else ["minimize"]
    study = _create_study(problems, smp, directions, storage, study_name, memory_headroom, objectives, sampler)
    n_cores = cores.size
    if storage is None and trials >= n_cores:
        # As many trials as distinct degree cores: sampling cannot beat pricing each core once.
        _price_every_core(cores, Progress(n_cores, "optuna", enabled=progress))
    else:
        _optimize(study, cores.objective, int(trials), shared=storage is not None,
                  bar=Progress(trials, "optuna", enabled=progress))
    if pools.fits == 0 and cores.cache:
        # Nothing fits: offer ZeRO-2 under a pipeline too, on the cores the trials priced, as
        # run_exhaustive does; else its layouts, under the limit, read as "closest" over it.
        pools = Pools(top=top, objectives=objectives, sharded_pipeline_grads=True)
        cores.pools, counters = pools, dict(cores.counters)
        for key in list(cores.cache):
            if key[0] is not None:
                cores._price(key[0], dict(zip(cores.choices, key[1:])))
        cores.counters = counters
    shared = {}
    if storage is not None:  # bring the best cores found by other workers into this one's pools
        for params in _best_params(study, top, objectives.pareto, cores.decode):
            cores.value(params)
        from search.storage import redact

        shared = {"storage": redact(storage), "study_name": study.study_name, "study_trials": len(study.trials)}
    counters = cores.counters
    stats = {
        "method": "optuna",
        "sampler": smp.__class__.__name__.replace("Sampler", "").lower().replace("nsgaii", "nsga2"),
        "trials": int(min(trials, n_cores)) if storage is None else int(trials),
        "seed": int(seed),
        "enumerated": counters["proposed"],
        "feasible": counters["feasible"],
        "evaluated": pools.evaluated,
        "fits": pools.fits,
        "distinct_trials": len(cores.cache),
        "infeasible_trials": counters["infeasible_trials"],
        "no_fit_trials": counters["no_fit_trials"],
        "optimize_seconds": time.perf_counter() - t0,
        **shared,
    }
    if storage is None and trials > n_cores:
        stats.update(trials_requested=int(trials), space_cores=n_cores)
    return pools, stats


def _price_every_core(cores: "_Cores", bar: Progress) -> None:
    """Price every degree core once, in order (what ``trials`` >= the number of cores would at
    best reach by sampling)."""
    import itertools

    space = cores.space()
    names = list(space)
    for i, combo in enumerate(itertools.product(*space.values())):
        cores.value(dict(zip(names, combo)))
        bar.update(i + 1)
    bar.close()


def _optimize(study, objective, trials: int, shared: bool, bar: Progress) -> None:
    """Run ``trials`` trials; in a shared study, until it holds ``trials`` complete trials in all
    (``optuna.study.MaxTrialsCallback``, https://optuna.readthedocs.io/en/stable/reference/generated/optuna.study.MaxTrialsCallback.html)."""
    import optuna

    ran = [0]

    def _cb(study, trial):
        ran[0] += 1
        bar.update(ran[0])

    callbacks, n_trials = [_cb], trials
    if shared:
        complete = (optuna.trial.TrialState.COMPLETE,)
        callbacks.append(optuna.study.MaxTrialsCallback(trials, states=complete))
        n_trials = max(0, trials - len(study.get_trials(deepcopy=False, states=complete)))
    study.optimize(objective, n_trials=n_trials, callbacks=callbacks, gc_after_trial=False)
    bar.close()


def _create_study(problems, sampler, directions, storage, study_name, memory_headroom, objectives, sampler_name):
    """An in-memory study, or the shared study ``study_name`` in ``storage`` (``search.storage``),
    checked to be the same problem (model, hardware, batch, pins, settings, objectives)."""
    import optuna

    if storage is None:
        return optuna.create_study(sampler=sampler, directions=directions)
    from costmodel.goodput import prices_as_stored
    from search.storage import join_study, open_storage

    fingerprint = {
        "problems": [{"model": p.model.name, "gpu": p.gpu.name, "cluster": p.cluster.name, "gpus": p.gpus,
                      "gbs": p.gbs, "seq_len": p.seq_len, "pins": {k: str(v) for k, v in sorted(p.pins.items())},
                      "allow_cross_node_tp": p.allow_cross_node_tp, "stage_splits": p.stage_splits,
                      "implementation": {k: str(v) for k, v in sorted(p.implementation.items())},
                      "recompute_modules": int(p.recompute_modules)} for p in problems],
        "memory_headroom": float(memory_headroom), "pareto": objectives.pareto,
        # one price for every GPU as a number, as studies stored before per-type prices name it
        "price_per_gpu_hour": prices_as_stored(objectives.prices),
        "train_tokens": objectives.train_tokens,
        "sampler": sampler_name or "",
    }
    return join_study(open_storage(storage), study_name or "planner-search", "planner_search", fingerprint,
                      sampler=sampler, directions=directions, url=storage)


def _best_params(study, top: int, pareto: bool, decode) -> list[dict]:
    """Params of the study's best trials (every worker's): the ``top`` best distinct degree cores
    by value (the top-K layouts come from those: a core's value is its best layout's step time),
    or the trials on the study's Pareto front. Penalized trials are left out."""
    import optuna

    if pareto:
        return [t.params for t in study.best_trials if t.values[0] < PENALTY_MEMORY]
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    out, seen = [], set()
    for t in sorted((t for t in done if t.value < PENALTY_MEMORY), key=lambda t: t.value):
        key = decode(t.params)[0]
        if key not in seen:
            seen.add(key)
            out.append(t.params)
        if len(out) >= top:
            break
    return out
