"""Exhaustive search: enumerate every valid layout, price them all in one vectorized call (in
chunks of ``CHUNK`` layouts), keep those that fit with the memory headroom, rank by step time.

Also home of the pieces the optuna search shares: the memory limit, the objectives, the
Pareto filter, the running top-K / closest / Pareto pools, and the stderr progress bar.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from search.space import Problem, Space, build_space

CHUNK = 1_000_000
"""Layouts per ``evaluate_batch`` call."""
DEFAULT_MEMORY_HEADROOM = 0.05
"""Fraction of HBM kept free by default: a layout fits when peak <= (1 - headroom) * capacity.
5% covers what an analytic model cannot see (allocator caching beyond its fragmentation
allowance, NCCL buffers growing with communicator count, CUDA graphs, spikes at checkpoints)."""
CLOSEST = 5
"""How many closest (least memory) layouts to report when nothing fits."""


def memory_limit_gib(capacity_gib: float, headroom: float) -> float:
    """Usable HBM per GPU with ``headroom`` kept free."""
    return float(capacity_gib) * (1.0 - float(headroom))


RANK_OBJECTIVES = ("step-time", "tokens-per-gpu", "cost", "time-to-train", "energy")
"""What a single-objective search ranks by (``Objectives.rank``). With one GPU count and type
they agree; over several GPU counts step time favours the most GPUs, tokens/s/GPU (and cost,
at one price per GPU-hour) the most efficient. time-to-train, cost and energy count the wall
time with failures, checkpoints and restarts (``costmodel.goodput``) when ``run`` is given."""


@dataclass(frozen=True)
class Objectives:
    """What the search minimizes. Single objective: ``rank`` (``RANK_OBJECTIVES``; ties: lower
    ZeRO stage, then lower memory). Pareto: time (step time, or whole-run time when
    ``train_tokens``) against cost (when ``prices``: per step, or per run) or else memory per GPU."""

    pareto: bool = False
    prices: Optional[dict] = None
    """USD per GPU-hour by GPU type (catalog name, "*" for the rest: ``costmodel.goodput
    .parse_prices``); each layout is costed at its own GPU's price. None: no price."""
    train_tokens: Optional[float] = None
    rank: str = "step-time"
    run: Optional[object] = None
    """``costmodel.goodput.RunModel``: wall time / useful time at each GPU count (failures,
    checkpoints, restarts) and energy per GPU-second; None = useful time only."""

    def price(self, gpu_name=None) -> Optional[float]:
        """USD per GPU-hour of ``gpu_name`` (None: no price given)."""
        from costmodel.goodput import price_for

        return price_for(self.prices, gpu_name)

    def _wall(self, gpus, gpu_name=None):
        return 1.0 if self.run is None else self.run.factor(gpus, gpu_name)

    def rank_value(self, step_time_s, tokens_per_s, gpus, gpu_name=None):
        """The ranked quantity, lower is better (arrays or scalars): step time; GPU-seconds per
        token (tokens-per-gpu); USD per token at the GPU's price (else GPU-hours per token); seconds per token, times ``train_tokens`` when given; joules
        per token (energy). The last three in wall time when ``run`` is given."""
        if self.rank == "step-time":
            return step_time_s
        if self.rank == "tokens-per-gpu":
            return gpus / tokens_per_s
        if self.rank == "cost":
            return gpus / tokens_per_s * (self.price(gpu_name) or 1.0) / 3600.0 * self._wall(gpus, gpu_name)
        if self.rank == "energy":
            watts = 1.0 if self.run is None else self.run.joules_per_gpu_second(gpu_name)
            return gpus / tokens_per_s * watts * self._wall(gpus, gpu_name)
        return (self.train_tokens or 1.0) / tokens_per_s * self._wall(gpus, gpu_name)

    @property
    def names(self) -> tuple[str, str]:
        t = "run_time_s" if self.train_tokens else "step_time_s"
        if self.prices:
            c = "run_cost_usd" if self.train_tokens else "cost_per_step_usd"
        else:
            c = "memory_gib"
        return t, c

    def values(self, result, gpus: np.ndarray, gpu_name=None) -> tuple[np.ndarray, np.ndarray]:
        """(time objective, second objective) arrays for a BatchResult of GPU type ``gpu_name``;
        the run time in wall time (as ``extras`` reports it) when ``run`` is given."""
        step = np.asarray(result.step_time_s, dtype=np.float64)
        t = step
        if self.train_tokens:
            t = self.train_tokens / np.asarray(result.tokens_per_s, dtype=np.float64) * self._wall(gpus, gpu_name)
        if self.prices:
            c = gpus * t * self.price(gpu_name) / 3600.0
        else:
            c = np.asarray(result.memory_gib["peak"], dtype=np.float64)
        return t, c

    def extras(self, step_time_s: float, tokens_per_s: float, gpus: int, gpu_name=None) -> dict:
        """Cost / run-time fields added to a record when price or train tokens are given (the
        run time in wall time, with ``goodput``, when ``run`` is given)."""
        out = {}
        if self.train_tokens:
            wall = float(self._wall(gpus, gpu_name))
            run = self.train_tokens / tokens_per_s * wall
            out["run_time_s"] = run
            out["run_time_days"] = run / 86400.0
            if self.run is not None:
                out["goodput"] = 1.0 / wall
                out["run_energy_mwh"] = gpus * run * self.run.joules_per_gpu_second(gpu_name) / 3.6e9
        price = self.price(gpu_name)
        if price:
            out["cost_per_step_usd"] = gpus * step_time_s * price / 3600.0
            if self.train_tokens:
                out["run_cost_usd"] = gpus * out["run_time_s"] * price / 3600.0
        return out


def pareto_mask(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """True for the points not dominated when minimizing both ``a`` and ``b`` (one point kept
    per identical (a, b) pair)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n = len(a)
    mask = np.zeros(n, bool)
    if n == 0:
        return mask
    order = np.lexsort((b, a))
    bs = b[order]
    prev_min = np.minimum.accumulate(np.concatenate([[np.inf], bs[:-1]]))
    mask[order[bs < prev_min]] = True
    return mask


@dataclass
class Candidate:
    """One evaluated layout kept in a pool: where it came from and its BatchResult row."""

    problem: Problem
    result: object
    """BatchResult of length 1."""
    step: float
    peak: float
    limit: float
    obj: tuple = ()
    key: float = 0.0
    """The ranked quantity (``Objectives.rank_value``)."""


def _distinct_recompute(problem: Problem, batch) -> np.ndarray:
    """False for a partial-recompute share that rounds to recomputing every layer (the same
    layout as plain full recompute, already in the pool)."""
    from costmodel.pipeline import partial_recompute_per_chunk

    _, distinct = partial_recompute_per_chunk(problem.model.num_layers, batch.pp, batch.vpp, batch.pp_first_layers,
                                              batch.pp_last_layers, batch.recompute_layers,
                                              batch.recompute_share)
    return distinct | ~batch.is_("recompute", "full")


def _offered_zero(problem: Problem, batch, sharded_pipeline_grads: bool) -> np.ndarray:
    """False for ZeRO-2 under a pipeline unless the user asked for it (``--zero``) or
    ``sharded_pipeline_grads``: gradients sharded and reduce-scattered per micro-batch under PP
    is how Llama 3 405B was trained (its paper, Sec. 3.3.2), but none of the launchers planner
    exports runs it (Megatron-FSDP and DeepSpeed refuse PP with ZeRO-2/3; torchtitan's FSDP2
    keeps gradients unsharded under torch.distributed.pipelining), so the search offers it only
    where nothing else fits (``run_exhaustive``)."""
    if sharded_pipeline_grads or "zero" in problem.pins:
        return np.ones(len(batch), dtype=bool)
    return ~((np.asarray(batch.zero) == 2) & (np.asarray(batch.pp) > 1))


@dataclass
class Pools:
    """Running best-K, closest-K and Pareto pools over chunks of evaluated layouts."""

    top: int
    objectives: Objectives
    best: list = field(default_factory=list)
    closest: list = field(default_factory=list)
    front: list = field(default_factory=list)
    fits: int = 0
    evaluated: int = 0
    keys: list = field(default_factory=list)
    """Ranked quantity of every layout counted in ``fits`` (arrays): where a layout found
    elsewhere (a published recipe) would rank."""
    sharded_pipeline_grads: bool = False
    """Offer ZeRO-2 under a pipeline although the user did not ask (``_offered_zero``)."""
    outside_envelope: int = 0
    """Layouts counted in ``fits`` but left out by ``within_envelope``."""
    outside_domain: int = 0
    """Layouts counted in ``fits`` but left out because the ``--framework`` release's launch formats
    all refuse them (``Problem.domain``)."""
    launchable: int = 0
    """Layouts the domain was asked about and kept: while 0, every layout is asked (also those that
    do not fit), so that 0 at the end means the release launches none of them."""
    domain_rules: dict = field(default_factory=dict)
    """Rule -> layouts it left out (the first format's first refusal); with ``domain_reasons`` and
    ``domain_reads`` (the options each rule's answer read)."""
    domain_reasons: dict = field(default_factory=dict)
    domain_reads: dict = field(default_factory=dict)
    domain_rules_all: dict = field(default_factory=dict)
    """Rule -> every layout asked about it left out, fitting or not."""

    def add(self, problem: Problem, result, limit: float) -> None:
        n = len(result)
        if n == 0:
            return
        self.evaluated += n
        step = np.asarray(result.step_time_s, dtype=np.float64)
        peak = np.asarray(result.memory_gib["peak"], dtype=np.float64)
        ok = ((peak <= limit) & np.isfinite(step) & _distinct_recompute(problem, result.batch)
              & _offered_zero(problem, result.batch, self.sharded_pipeline_grads))
        self.fits += int(ok.sum())
        if problem.domain is not None:
            ok = self._within_domain(problem, result.batch, ok)
        if problem.within_envelope:
            ok = self._within_envelope(problem, result.batch, ok)
        fit_idx = np.flatnonzero(ok)
        gpus = result.batch.tp * result.batch.pp * result.batch.dp * result.batch.cp
        key = np.asarray(self.objectives.rank_value(step, np.asarray(result.tokens_per_s, dtype=np.float64), gpus,
                                                    problem.gpu.name))
        self.keys.append(key[fit_idx])
        if len(fit_idx):
            k = min(self.top, len(fit_idx))
            # Ties on the ranked quantity (data-parallel traffic fully hidden) go to the lower
            # ZeRO stage, the simpler layout more launchers can run, then to the lower memory.
            zero = np.asarray(result.batch.zero)
            order = np.lexsort((peak[fit_idx], zero[fit_idx], key[fit_idx]))[:k]
            for i in fit_idx[order]:
                self.best.append(self._cand(problem, result, int(i), step, peak, limit, key))
            self.best.sort(key=lambda c: (c.key, int(c.result.batch.zero[0]), c.peak))
            del self.best[self.top:]
            if self.objectives.pareto:
                a, b = self.objectives.values(result, gpus, problem.gpu.name)
                m = pareto_mask(a[fit_idx], b[fit_idx])
                for i in fit_idx[m]:
                    c = self._cand(problem, result, int(i), step, peak, limit)
                    c.obj = (float(a[i]), float(b[i]))
                    self.front.append(c)
                if self.front:
                    fm = pareto_mask([c.obj[0] for c in self.front], [c.obj[1] for c in self.front])
                    self.front = [c for c, keep in zip(self.front, fm) if keep]
        elif not self.best:
            over = peak - limit
            k = min(CLOSEST, n)
            order = np.argsort(over, kind="stable")[:k]
            for i in order:
                self.closest.append(self._cand(problem, result, int(i), step, peak, limit))
            self.closest.sort(key=lambda c: (c.peak - c.limit, c.step))
            del self.closest[CLOSEST:]

    def _within_envelope(self, problem: Problem, batch, ok: np.ndarray) -> np.ndarray:
        """``ok`` less the layouts outside the validated envelope (``search.envelope``)."""
        from search.envelope import Job, inside

        keep = ok & inside(Job(problem.model, problem.gpu, problem.gpus, problem.seq_len), batch.columns())
        self.outside_envelope += int(ok.sum() - keep.sum())
        return keep

    def _within_domain(self, problem: Problem, batch, ok: np.ndarray) -> np.ndarray:
        """``ok`` less the layouts no launch format of the release writes (``Problem.domain``); asks
        the domain about the fitting layouts, and about the others too until one is launchable."""
        rows = np.flatnonzero(ok)
        out = self._ask_domain(problem, batch, rows)
        refused = np.zeros(len(batch), bool)
        refused[rows] = out
        if self.launchable == 0:
            rest = np.flatnonzero(~ok)
            refused[rest] = self._ask_domain(problem, batch, rest, count=False)
        self.outside_domain += int((ok & refused).sum())
        return ok & ~refused

    def _ask_domain(self, problem: Problem, batch, rows: np.ndarray, count: bool = True) -> np.ndarray:
        if len(rows) == 0:
            return np.zeros(0, bool)
        out = problem.domain.outside(batch.take(rows), problem.model, problem.cluster)
        self.launchable += int((~out.mask).sum())
        for rule, n in out.rules.items():
            if count:
                self.domain_rules[rule] = self.domain_rules.get(rule, 0) + n
            self.domain_rules_all[rule] = self.domain_rules_all.get(rule, 0) + n
            self.domain_reasons.setdefault(rule, out.reasons[rule])
            self.domain_reads.setdefault(rule, out.reads[rule])
        return out.mask

    @staticmethod
    def _cand(problem, result, i, step, peak, limit, key=None) -> Candidate:
        return Candidate(problem=problem, result=result.take(np.array([i])), step=float(step[i]),
                         peak=float(peak[i]), limit=float(limit), key=float(step[i] if key is None else key[i]))


class Progress:
    """Progress on stderr once the work has run for ``delay`` s: a one-line bar redrawn in place
    (``enabled=True``, for a terminal), or with ``enabled="lines"`` (a log file, a pipe) one
    plain line every ``LINE_EVERY_S`` seconds."""

    LINE_EVERY_S = 10.0

    def __init__(self, total: int, label: str, enabled=True, delay: float = 1.0):
        self.total = max(int(total), 1)
        self.label = label
        self.lines = enabled == "lines"
        self.enabled = bool(enabled)
        self.delay = self.LINE_EVERY_S if self.lines else delay
        self.t0 = time.perf_counter()
        self.drawn = False
        self.last = 0.0

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.lines:
            if now - self.t0 >= self.delay and now - self.last >= self.LINE_EVERY_S:
                self.last = now
                sys.stderr.write(f"{self.label}: {done:,}/{self.total:,} after {now - self.t0:.0f} s\n")
                sys.stderr.flush()
            return
        if now - self.t0 < self.delay or (self.drawn and now - self.last < 0.1 and done < self.total):
            return
        self.last = now
        frac = min(done / self.total, 1.0)
        width = 30
        bar = "#" * int(frac * width) + "." * (width - int(frac * width))
        sys.stderr.write(f"\r{self.label} [{bar}] {done}/{self.total} {now - self.t0:.1f}s")
        sys.stderr.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _evaluate(problem: Problem, batch, calib=None):
    from costmodel import evaluate_batch
    from costmodel.calibration import DEFAULT

    return evaluate_batch(problem.model, problem.cluster, batch, gpu=problem.gpu, calib=calib or DEFAULT)


AUTO_SECONDS = 15.0
"""``method="auto"`` enumerates when enumerating and pricing every valid layout is predicted to
take at most this long; else it samples with optuna (whose 300 trials take a few seconds). Over
this, sampling saves time; under it, the exhaustive optimum is worth the wait."""
AUTO_PROBE_SHARE = 0.03
"""``method="auto"`` builds the spaces for up to this share of ``AUTO_SECONDS`` (0.45 s) before
extrapolating to all of them: the first problem carries one-off set-up (CP-SAT, numpy) and the
GPU counts of a range differ in divisors (1,024 has many more layouts than 1,280), so one or two
problems predict the whole badly."""
PRICING_RATE = 300_000
"""Valid layouts the cost model prices per second (spaces built and priced), at the slow end:
measured on a shared 2-core machine (2026-11-27), Llama 3 70B over 1,024..8,192 H100 and B200,
369,936 layouts in 0.91 s (406k/s), and Llama 3 405B over 1,024..16,384:256 GPUs of H100, B200
and A100, 1,747,728 layouts in 5.2 s (337k/s). At the 150k/s measured earlier in the project,
auto sampled that 405B search (predicted over 15 s): optuna's best was 18.05 s per step against
the enumerated optimum's 3.22 s."""


@dataclass
class AutoChoice:
    """What ``method="auto"`` chose, and why (from the real candidate count, not a bound)."""

    method: str
    spaces: Optional[list] = None
    """The problems' spaces, built while counting (exhaustive reuses them)."""
    layouts: int = 0
    """Valid layouts counted (all problems when exhaustive; those built before giving up else)."""
    predicted_s: float = 0.0
    """Predicted seconds to enumerate and price everything."""


def choose_method(problems: list[Problem], engine: str = "cpsat", seconds: float = AUTO_SECONDS) -> AutoChoice:
    """Enumerate the problems' spaces one by one (the rules applied: the real candidate count),
    predicting the whole enumeration's time from the part built so far (build time and layouts
    per problem, extrapolated to the rest, priced at ``PRICING_RATE``); give up for optuna as
    soon as the prediction passes ``seconds``."""
    t0 = time.perf_counter()
    built: dict[int, Space] = {}
    layouts = 0
    predicted = 0.0
    # Visited spread over the list (GPU types and counts interleaved), so the problems built
    # first stand for all of them: in list order they are one GPU type's smallest counts.
    order = sorted(range(len(problems)), key=lambda j: ((j * 0.6180339887498949) % 1.0, j))
    for i, j in enumerate(order, 1):
        built[j] = build_space(problems[j], engine)
        layouts += len(built[j])
        scale = len(problems) / i
        elapsed = time.perf_counter() - t0
        predicted = elapsed * scale + layouts * scale / PRICING_RATE
        # Trust the extrapolation only after AUTO_PROBE_SHARE of the limit spent building (or once
        # the layouts built already take longer to price): one problem out of 183 (405B over
        # 1,024..16,384:256 GPUs of 3 types) predicted 24 s for an enumeration that takes 2 s, and
        # optuna's sampled answer was 24x slower than the optimum.
        if predicted > seconds and (elapsed > AUTO_PROBE_SHARE * seconds or layouts / PRICING_RATE > seconds):
            return AutoChoice("optuna", None, layouts, predicted)
    return AutoChoice("exhaustive", [built[j] for j in range(len(problems))], layouts, predicted)


def run_exhaustive(problems: list[Problem], *, top: int, memory_headroom: float,
                   objectives: Objectives = Objectives(), progress: bool = False,
                   engine: str = "cpsat", chunk: int = CHUNK, calib=None,
                   spaces: Optional[list] = None) -> tuple[Pools, dict]:
    """Enumerate and price every valid layout of every problem (``calib``: the constants, None =
    the shipped ones; ``spaces``: the problems' spaces when already built). Returns the pools
    and stats."""
    t0 = time.perf_counter()
    pools = Pools(top=top, objectives=objectives)
    if spaces is None:
        spaces = [build_space(p, engine) for p in problems]
        t_enum = time.perf_counter() - t0
    else:
        t_enum = sum(s.seconds for s in spaces)
    total = sum(len(s) for s in spaces)
    bar = Progress(total, "search", enabled=progress)
    if progress is True:  # smaller chunks so the bar moves (same results: the pools merge chunks exactly)
        chunk = min(chunk, max(100_000, total // 20))
    done = 0
    for space in spaces:
        p = space.problem
        limit = memory_limit_gib(p.gpu.memory_gib, memory_headroom)
        for start in range(0, len(space), chunk):
            batch = space.batch(start, start + chunk)
            pools.add(p, _evaluate(p, batch, calib), limit)
            done += len(batch)
            bar.update(done)
    bar.close()
    if pools.fits == 0:
        # Nothing fits: offer ZeRO-2 under a pipeline too (gradients sharded, as Llama 3 trained).
        pools = Pools(top=top, objectives=objectives, sharded_pipeline_grads=True)
        for space in spaces:
            p = space.problem
            limit = memory_limit_gib(p.gpu.memory_gib, memory_headroom)
            for start in range(0, len(space), chunk):
                pools.add(p, _evaluate(p, space.batch(start, start + chunk), calib), limit)
    removed: dict[str, int] = {}
    for s in spaces:
        for k, v in s.removed_by_rule.items():
            removed[k] = removed.get(k, 0) + v
    stats = {
        "method": "exhaustive",
        "engine": engine,
        "enumerated": sum(s.raw_size for s in spaces),
        "feasible": total,
        "evaluated": pools.evaluated,
        "fits": pools.fits,
        "removed_by_rule": {k: v for k, v in removed.items() if v},
        "enumerate_seconds": t_enum,
    }
    return pools, stats
