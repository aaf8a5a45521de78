"""``planner sweep``: one exhaustive search per scenario over a grid, shared by any number of workers.

A sweep is an Optuna study whose sampler is a ``GridSampler`` over the scenario axes (model, GPU
type, GPU count, sequence length, batch); each trial runs one exhaustive ``search.api.search``
and stores its outcome as trial user attributes (``status``, ``best`` record or ``reason``,
``scenario``, ``worker``), so any process that opens the study can print the whole table.
Workers join the same study through a shared storage (``search.storage``): Optuna's own
distributed mode (https://optuna.readthedocs.io/en/stable/tutorial/10_key_features/004_distributed.html).

Exactly once. The GridSampler's own docs say distributed workers "will occasionally suggest the
same parameter configuration"; a sweep must not run a scenario twice. Each trial *claims* one
grid point, and the claim is visible to every worker from the moment the trial exists:

* a fresh trial numbered k < N (N = grid size) claims grid point k: ``GridSampler.before_trial``
  gives such a trial ``grid_id = trial.number``, and trial numbers are unique (created under a
  lock: the study row lock in RDB storages, the log order in journal files);
* a trial queued by a worker (``enqueue``: a scenario left undone, or a stale trial's heartbeat
  callback) carries its claim in its system attributes from creation (``study.add_trial`` with
  ``state=WAITING``; popping a waiting trial is atomic, Optuna's ``Study._pop_waiting_trial_id``);
* a fresh trial numbered >= N claims nothing and is pruned at once ("overflow").

Every worker must number the grid points alike: the same axes (sorted) and GridSampler seed (0);
a digest of the numbering is part of what a joining worker must match.

A trial runs its scenario only if no other trial claiming the same grid point is COMPLETE, or is
RUNNING/WAITING with a lower number (``holder``); else it is pruned. Trial numbers grow in the
order trials become visible, so of two live claimants the later one always sees the earlier one:
a scenario completes at most once, and only a FAILed claimant (dead worker, crash) lets a later
one run it again. A worker loops until every scenario is COMPLETE: it runs queued or fresh
trials, queues scenarios nobody holds (``enqueue``), and waits for scenarios running elsewhere.

Dead workers. RDB storages record heartbeats; a RUNNING trial without one for
``search.storage.GRACE_PERIOD_S`` is failed by ``optuna.storages.fail_stale_trials`` and
``requeue_stale`` queues its scenario again. Journal files have no heartbeat (Optuna's
``JournalStorage`` does not implement ``BaseHeartbeat``): such a trial stays RUNNING; workers wait
for it ``wait_s`` seconds without progress, then stop; ``reclaim_running`` (``--reclaim-running``,
only when no worker is alive) fails those trials so the next run redoes them.

Interrupted workers. Ctrl-C reaches a worker only while a scenario computes: creating, starting
and storing a trial is held off (``hardware_catalog.errors.interrupts_held``), so a trial is
stored whole or failed, and the one failed is the interrupted worker's own (``_optimize_one``);
its scenario is run again by the next worker, and trials other workers run meanwhile go on.
"""

from __future__ import annotations

import json
import os
import socket
import time
import warnings
from dataclasses import dataclass, field
from typing import Optional

from costmodel.options import Bound
from hardware_catalog.errors import PlannerInputError, interrupts_allowed, interrupts_held, raise_if_interrupted

SPEC_ATTR = "planner_sweep"
"""Study user attribute: the sweep's axes and search settings (every worker must agree)."""
REPORT_ATTR = "planner_sweep_report"
"""Study user attribute: the train tokens / prices given first (defaults for later reports)."""
CLAIM = "sweep_claim"
"""Trial system attribute: the grid point a queued trial claims."""
RESULT = "result"
"""Trial user attribute: the scenario, status (ok | nothing fits | invalid | error), best
record, reason, worker and seconds (one attribute: one storage write)."""
AXES = ("model", "gpu", "gpus", "seq_len", "gbs", "tokens_per_batch")
MAX_SCENARIOS = 100_000
DEFAULT_WAIT_S = 60.0
"""How long a worker with nothing left to do waits for scenarios running in other workers,
counted from the last scenario completed anywhere."""
WAIT = Bound("--wait", integer=False, minimum=0, maximum=7 * 86400)
"""Seconds a worker may wait (a week at most)."""
POLL_S = 0.2


# ------------------------------------------------------------------------------------------ spec


def parse_int_list(flag: str, text: Optional[str], bound=None) -> list:
    """``"4096,8192"`` -> [4096, 8192] (sorted, unique; 4e6 style allowed when integral), each
    within ``bound`` (a ``costmodel.options`` Option or Bound); None -> [None]."""
    if text is None:
        return [None]
    out = []
    for part in str(text).replace(" ", "").split(","):
        try:
            v = float(part)
            if not part or v != int(v) or v <= 0:
                raise ValueError
        except (ValueError, OverflowError):
            raise PlannerInputError(f"{flag} {text!r} is not understood (allowed: a positive integer or a "
                                    f"comma list like 4096,8192)") from None
        out.append(bound.parse(int(v), where=flag) if bound is not None else int(v))
    return sorted(set(out))


def parse_token_list(text: Optional[str], flag: str = "--tokens-per-batch") -> list:
    """``"4M,16M"`` -> [4000000, 16000000]: each part a token count as planner search reads one
    (``costmodel.goodput.parse_token_count``: 4194304, 4M, 4.2e6), sorted and unique; None -> [None]."""
    from costmodel.goodput import parse_token_count

    if text is None:
        return [None]
    parts = [p for p in str(text).replace(" ", "").split(",")]
    if not all(parts):
        raise PlannerInputError(f"{flag} {text!r} is not understood (allowed: a token count or a comma list "
                                f"like 4M,16M)")
    return sorted({parse_token_count(p, flag) for p in parts})


def _names(flag: str, text: Optional[str], resolve) -> list[str]:
    items = [x for x in (text or "").replace(" ", "").split(",") if x]
    if not items:
        raise PlannerInputError(f"{flag} {text!r}: give a name or a comma list (e.g. {flag} 8b,70b)")
    return sorted({resolve(x) for x in items})


def _model_name(x: str) -> str:
    from hardware_catalog import get_model

    spec = get_model(x)  # PlannerInputError naming the model and the known ones
    return x if os.path.exists(x) else spec.name


def _gpu_name(x: str) -> str:
    from hardware_catalog import default_cluster_for_gpu, get_gpu

    name = get_gpu(x).name
    default_cluster_for_gpu(name)
    return name


@dataclass(frozen=True)
class SweepSpec:
    """The scenario grid (each axis a sorted list; [None] = the model's default) and the search
    settings every scenario uses. ``to_dict`` is what workers compare when they join a study."""

    model: tuple
    gpu: tuple
    gpus: tuple
    seq_len: tuple = (None,)
    gbs: tuple = (None,)
    tokens_per_batch: tuple = (None,)
    memory_headroom: float = 0.05
    allow_cross_node_tp: bool = False
    calibration: Optional[dict] = None
    """--calibration: {"profile": its path, "constants": name -> value} (``planner.calibration_use``),
    stored with the study so every worker prices with the same constants; None: the shipped ones."""

    @property
    def size(self) -> int:
        n = 1
        for k in AXES:
            n *= len(getattr(self, k))
        return n

    def grid(self) -> dict:
        """The GridSampler search space."""
        return {k: list(getattr(self, k)) for k in AXES}

    def to_dict(self) -> dict:
        d = {"version": 1, **self.grid(), "memory_headroom": float(self.memory_headroom),
             "allow_cross_node_tp": bool(self.allow_cross_node_tp)}
        if self.calibration is not None:  # absent when shipped: a study stored before keeps its fingerprint
            d["calibration"] = self.calibration
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "SweepSpec":
        return cls(**{k: tuple(d[k]) for k in AXES}, memory_headroom=d["memory_headroom"],
                   allow_cross_node_tp=d["allow_cross_node_tp"], calibration=d.get("calibration"))

    def applied_calibration(self):
        """The ``AppliedCalibration`` every scenario is priced with (None: the shipped constants)."""
        if self.calibration is None:
            return None
        from planner.calibration_use import AppliedCalibration

        return AppliedCalibration.from_record({"calibration": self.calibration["profile"],
                                               "calibration_constants": self.calibration["constants"],
                                               "calibration_fitted_gpus": self.calibration.get("fitted_gpus")},
                                              "the sweep's stored calibration")

    def describe(self) -> str:
        counts = [(len(getattr(self, k)), label) for k, label in (
            ("model", "model"), ("gpu", "GPU type"), ("gpus", "GPU count"), ("seq_len", "sequence length"))]
        counts.append((len(self.gbs) * len(self.tokens_per_batch), "batch size"))
        parts = [f"{n} {label}{'s' if n != 1 else ''}" for n, label in counts]
        return f"{self.size} scenario{'s' if self.size != 1 else ''} ({' x '.join(parts)})"


def build_spec(model: str, gpus: str, gpu: str, seq_len: Optional[str] = None, gbs: Optional[str] = None,
               tokens_per_batch: Optional[str] = None, memory_headroom: float = 0.05,
               allow_cross_node_tp: bool = False, calibration=None) -> SweepSpec:
    """A SweepSpec from the option strings; PlannerInputError (one line) on bad input."""
    from costmodel.options import OPTIONS_BY_NAME
    from search.api import MEMORY_HEADROOM, parse_gpu_counts

    if gbs is not None and tokens_per_batch is not None:
        raise PlannerInputError("give --gbs or --tokens-per-batch, not both")
    memory_headroom = MEMORY_HEADROOM.parse(memory_headroom)
    spec = SweepSpec(
        model=tuple(_names("--model", model, _model_name)), gpu=tuple(_names("--gpu", gpu, _gpu_name)),
        gpus=tuple(parse_gpu_counts(gpus)),
        seq_len=tuple(parse_int_list("--seq-len", seq_len, OPTIONS_BY_NAME["seq_len"])),
        gbs=tuple(parse_int_list("--gbs", gbs, OPTIONS_BY_NAME["gbs"])),
        tokens_per_batch=tuple(parse_token_list(tokens_per_batch)),
        memory_headroom=memory_headroom, allow_cross_node_tp=bool(allow_cross_node_tp),
        calibration=_calibration(calibration),
    )
    if spec.size > MAX_SCENARIOS:
        raise PlannerInputError(f"the sweep has {spec.size:,} scenarios (at most {MAX_SCENARIOS:,}); narrow an axis")
    _check_batches(spec)
    return spec


def _calibration(path) -> Optional[dict]:
    """--calibration PROFILE as the spec stores it: its path and constants (checked, one-line errors)."""
    if path is None:
        return None
    from planner.calibration_use import AppliedCalibration

    applied = AppliedCalibration.from_path(path)
    out = {"profile": applied.profile, "constants": dict(applied.constants)}
    if applied.fitted_gpus:  # the GPU types of the profile's runs: the output warns on others
        out["fitted_gpus"] = list(applied.fitted_gpus)
    return out


def _check_batches(spec: SweepSpec) -> None:
    from hardware_catalog import get_model

    if spec.tokens_per_batch == (None,):
        return
    for m in spec.model:
        for seq in spec.seq_len:
            s = seq or get_model(m).default_seq_len
            small = [t for t in spec.tokens_per_batch if t < s]
            if small:
                raise PlannerInputError(f"--tokens-per-batch {small[0]} is smaller than one sequence of {s} tokens "
                                        f"({m}); allowed: at least the sequence length")


# -------------------------------------------------------------------------------- claim protocol


def claim_of(trial, n: int) -> Optional[int]:
    """The grid point a trial claims (see the module doc), or None (an overflow trial)."""
    attrs = trial.system_attrs
    if CLAIM in attrs:
        return int(attrs[CLAIM])
    if trial.number < n and "fixed_params" not in attrs and "failed_trial" not in attrs:
        return trial.number
    return None


def holder(study, grid_id: int, number: int, n: int) -> Optional[int]:
    """The number of another trial that has done grid point ``grid_id``, or holds it with a lower
    number than ``number`` (then trial ``number`` must not run it); None if none does."""
    from optuna.trial import TrialState

    states = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)
    for t in study._storage.get_all_trials(study._study_id, deepcopy=False, states=states):
        if t.number == number or claim_of(t, n) != grid_id:
            continue
        if t.state == TrialState.COMPLETE or t.number < number:
            return t.number
    return None


def _waiting_trial(spec: SweepSpec, grid_id: int, **extra):
    import optuna

    attrs = {CLAIM: int(grid_id), "grid_id": int(grid_id), "search_space": spec.grid(), **extra}
    return optuna.trial.create_trial(state=optuna.trial.TrialState.WAITING, system_attrs=attrs)


def enqueue(study, spec: SweepSpec, grid_ids) -> None:
    """Queue one WAITING trial per grid point (popped atomically by one worker)."""
    study.add_trials([_waiting_trial(spec, g) for g in grid_ids])


def requeue_stale(study, trial) -> None:
    """Heartbeat callback (RDB storages): queue the scenario of a trial failed as stale again.
    Modeled on ``optuna.storages.RetryHeartbeatStaleTrialCallback``, which copies the trial's
    system attributes; this one carries only the claim, so it works whatever the dead trial wrote."""
    raw = study.user_attrs.get(SPEC_ATTR)
    if raw is None:
        return
    spec = SweepSpec.from_dict(raw)
    g = claim_of(trial, spec.size)
    if g is not None:
        study.add_trial(_waiting_trial(spec, g, retry_of=trial.number))


def reclaim_running(study) -> int:
    """Fail every RUNNING trial of the study (use only when no worker is alive: journal files
    have no heartbeat). Their scenarios are queued again by the next worker. Returns the count."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        try:
            n += bool(study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL))
        except UpdateFinishedTrialError:
            pass
    return n


# ------------------------------------------------------------------------------------------ study


def _grid_sampler(spec: SweepSpec):
    import optuna

    class SweepGridSampler(optuna.samplers.GridSampler):
        """GridSampler whose ``after_trial`` does not stop the study (the worker loop decides when
        the sweep is done) and so does not rescan every trial after each one."""

        def after_trial(self, study, trial, state, values) -> None:
            return None

    return SweepGridSampler(spec.grid(), seed=0)


def _grid_order(sampler) -> Optional[str]:
    """A digest of the order in which the GridSampler numbers the grid points (grid_id -> scenario,
    shuffled with its seed): workers whose optuna/numpy would number them otherwise must not join."""
    import hashlib

    grids = getattr(sampler, "_all_grids", None)  # private; without it the check is skipped
    return hashlib.sha1(json.dumps(grids).encode()).hexdigest()[:16] if grids is not None else None


def open_sweep(spec: Optional[SweepSpec], storage: Optional[str] = None, study_name: Optional[str] = None,
               report: Optional[dict] = None, report_only: bool = False, read_only: Optional[bool] = None):
    """(study, spec, report settings): create or join the sweep study. Without ``storage`` an
    in-memory study; with it and no ``spec``, the spec stored in the study. ``report_only``: a
    storage file that does not exist is an error (nothing is created). ``read_only`` (default:
    ``report_only``): this process writes nothing to the study, so a read-only file is fine. A
    storage file that is not what its form says is refused before anything opens it
    (``search.storage.check_file``)."""
    import optuna

    from search.storage import check_study_name, join_study, local_file, open_storage, redact

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    name = "planner-sweep" if study_name is None else study_name
    check_study_name(name)  # before a storage file is created; an empty name is refused, not defaulted
    if storage is None:
        if spec is None:
            raise PlannerInputError("give the scenario axes: --model, --gpus and --gpu (or --storage of a sweep to join)")
        store = optuna.storages.InMemoryStorage()
    else:
        path = local_file(storage)
        if spec is None and not report_only and path is not None and not os.path.lexists(path):
            raise PlannerInputError(f"--storage {redact(storage)!r}: no such file; give the scenario axes (--model, "
                                    f"--gpus, --gpu) to start a sweep there (nothing was created)")
        store = open_storage(storage, stale_callback=requeue_stale, must_exist=report_only,
                             read_only=report_only if read_only is None else read_only)
    if spec is None:
        spec = _stored_spec(store, name)
    if (report or {}).get("prices"):  # a price for a type the sweep lacks is refused before it is stored
        from costmodel.goodput import parse_prices

        parse_prices(report["prices"], spec.gpu, "this sweep")
    sampler = _grid_sampler(spec)
    fingerprint = {**spec.to_dict(), "grid_order": _grid_order(sampler)}
    if report_only and storage is not None:  # read what is there: create no study
        _stored_spec(store, name)
    study = join_study(store, name, SPEC_ATTR, fingerprint, sampler=sampler, directions=["maximize"], url=storage)
    stored_report = study.user_attrs.get(REPORT_ATTR)
    given = {k: v for k, v in (report or {}).items() if v}
    if stored_report is None and given and not report_only:  # --report-only writes nothing to the study
        study.set_user_attr(REPORT_ATTR, given)
    return study, spec, {**(stored_report or {}), **given}


def _stored_spec(store, name: str) -> SweepSpec:
    import optuna

    try:
        study = optuna.load_study(study_name=name, storage=store)
    except KeyError:
        raise PlannerInputError(f"--study-name {name!r}: no such study in this storage; give the scenario axes "
                                f"(--model, --gpus, --gpu) to start it") from None
    raw = study.user_attrs.get(SPEC_ATTR)
    if raw is None:
        raise PlannerInputError(f"--study-name {name!r} is not a planner sweep (give another --study-name)")
    return SweepSpec.from_dict(raw)


# ------------------------------------------------------------------------------------------ worker


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class WorkerStats:
    """What this process did."""

    worker: str = field(default_factory=worker_id)
    ran: int = 0
    """Scenarios this worker searched."""
    skipped: int = 0
    """Trials pruned because another trial had done or held their scenario."""
    overflow: int = 0
    """Trials pruned because every grid point already had its trial."""
    queued: int = 0
    """Scenarios this worker queued again (left undone by a failed or dead trial)."""
    reclaimed: int = 0
    seconds: float = 0.0
    gave_up_waiting: bool = False


def run_scenario(spec: SweepSpec, params: dict) -> dict:
    """One exhaustive search; the user attributes stored on the trial."""
    from search.api import search
    from search.request import ProblemRequest, Ranking, SearchOptions, SearchRequest

    t0 = time.perf_counter()
    out = {"scenario": dict(params), "status": "ok", "best": None, "reason": "", "worker": worker_id()}
    try:
        problem = ProblemRequest(params["model"], params["gpus"], params["gpu"], gbs=params["gbs"],
                                 seq_len=params["seq_len"], tokens_per_batch=params["tokens_per_batch"],
                                 allow_cross_node_tp=spec.allow_cross_node_tp)
        applied = spec.applied_calibration()
        res = search(SearchRequest(problem, SearchOptions(method="exhaustive", memory_headroom=spec.memory_headroom,
                                                          look_around=False), Ranking(top=1),
                                   applied.calib() if applied is not None else None))
        if applied is not None and res.best is not None:
            applied.stamp(res.best)  # the scenario's record says which constants priced it
    except PlannerInputError as err:
        out.update(status="invalid", reason=str(err))
    except Exception as err:  # a scenario that breaks the cost model must not stop the sweep
        raise_if_interrupted()  # Ctrl-C turned into another exception: fail the trial, store nothing
        out.update(status="error", reason=f"{type(err).__name__}: {err}")
    else:
        out.update(gbs_used=res.stats["gbs"], seq_len_used=res.stats["seq_len"])
        if res.best is None:
            out.update(status="nothing fits", reason=res.message)
        else:
            out["best"] = _jsonable(res.best)
    out["seconds"] = time.perf_counter() - t0
    return out


def _jsonable(obj):
    from planner.reports.search import json_default

    return json.loads(json.dumps(obj, default=json_default))


def _objective(study, spec: SweepSpec, stats: WorkerStats, last: Optional[list] = None):
    """The trial function; ``last[0]`` is set to the highest trial number this worker has run."""
    import optuna

    n = spec.size
    grid = spec.grid()
    last = last if last is not None else [-1]

    def objective(trial) -> float:
        frozen = study._storage.get_trial(trial._trial_id)
        g = claim_of(frozen, n)
        if g is None:
            last[0] = max(last[0], trial.number)
            stats.overflow += 1
            trial.set_user_attr("skipped", "overflow: every scenario already had a trial")
            raise optuna.TrialPruned()
        # Axes with one value are not suggested: one storage write less per trial each.
        params = {k: trial.suggest_categorical(k, vals) if len(vals) > 1 else vals[0] for k, vals in grid.items()}
        last[0] = max(last[0], trial.number)
        # A fresh trial #g < N is the first claimant of g ever (queued claims of g copy an earlier
        # claimant, and repairs start once trials 0..N-1 exist): only queued trials can collide.
        other = holder(study, g, trial.number, n) if CLAIM in frozen.system_attrs else None
        if other is not None:
            stats.skipped += 1
            trial.set_user_attr("skipped", f"scenario done or held by trial #{other}")
            raise optuna.TrialPruned()
        result = run_scenario(spec, params)
        trial.set_user_attr(RESULT, result)
        stats.ran += 1
        return float(result["best"]["tokens_per_s_per_gpu"]) if result["best"] else 0.0

    return releasing_reads(objective)


def releasing_reads(objective):
    """``objective`` that, when it raises (a Ctrl-C inside one of its storage reads), closes what
    the exception holds open before Optuna stores the trial as failed: else Optuna's write and the
    heartbeat thread wait out SQLite's 5 s lock timeout first (``_close_interrupted_reads``)."""
    import functools

    import optuna

    @functools.wraps(objective)
    def run(trial):
        try:
            return objective(trial)
        except optuna.TrialPruned:  # a verdict, not a failure: nothing was interrupted
            raise
        except BaseException as err:
            _close_interrupted_reads(err)
            raise

    return run


@dataclass
class Snapshot:
    done: set
    held: set
    waiting: int
    total: int


def snapshot(study, n: int) -> Snapshot:
    """Grid points done (COMPLETE) and held (RUNNING / WAITING), from one read of the storage."""
    from optuna.trial import TrialState

    done, held, waiting = set(), set(), 0
    trials = study._storage.get_all_trials(study._study_id, deepcopy=False)
    for t in trials:
        waiting += t.state == TrialState.WAITING
        g = claim_of(t, n)
        if g is None:
            continue
        if t.state == TrialState.COMPLETE:
            done.add(g)
        elif t.state in (TrialState.RUNNING, TrialState.WAITING):
            held.add(g)
    return Snapshot(done=done, held=held - done, waiting=waiting, total=len(trials))


def _optimize_one(study, objective) -> None:
    """One trial, stored whole or failed (issue 28: no partial trial is stored). Ctrl-C is held off
    while Optuna creates, starts and stores the trial (``interrupts_held``) and let through while
    the objective runs, so the trial an interrupt stops is always this call's own: Optuna fails
    it, or, where its write did not get through, it is failed here on the way out. A RUNNING trial
    another worker started meanwhile is never touched."""
    from optuna.trial import TrialState

    mine: list = []

    def run(trial):
        mine.append(trial._trial_id)
        with interrupts_allowed():
            return objective(trial)

    try:
        with interrupts_held():
            study.optimize(run, n_trials=1)
    except BaseException as err:
        _close_interrupted_reads(err)
        for trial_id in mine:
            if study._storage.get_trial(trial_id).state == TrialState.RUNNING:
                study._storage.set_trial_state_values(trial_id, TrialState.FAIL)
        raise


def _close_interrupted_reads(err: BaseException) -> None:
    """Drop the locals of the finished frames ``err`` (and the exceptions it chains) passed
    through. A Ctrl-C inside a storage read leaves that read's cursor alive in those frames, and on
    SQLite an unfinished statement holds the file's shared lock: the FAIL written next would meet
    "database is locked" and leave the trial RUNNING (seen on a loaded CI runner). The locals are
    not needed: an interrupt is answered with one line, an error keeps its traceback's lines."""
    import gc
    import traceback

    seen: set = set()
    pending = [err]
    while pending:
        e = pending.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)  # frames still running (this one) are skipped
        pending += [e.__cause__, e.__context__]
    gc.collect()  # an exception a cleared frame held (Optuna's func_err) can sit in a cycle


def run_worker(study, spec: SweepSpec, *, progress: bool = False, wait_s: float = DEFAULT_WAIT_S,
               stats: Optional[WorkerStats] = None) -> WorkerStats:
    """Work on the sweep until every scenario is done (by anyone), or until nothing completed
    anywhere for ``wait_s`` seconds while the rest runs in other workers."""
    from optuna.storages import fail_stale_trials

    from search.exhaustive import Progress

    stats = stats or WorkerStats()
    t0, n = time.perf_counter(), spec.size
    last = [-1]
    objective = _objective(study, spec, stats, last)
    bar = Progress(n, "sweep", enabled=progress)
    last_done, last_change = -1, time.monotonic()
    while True:
        if -1 < last[0] < n - 1:  # trials 0..N-1 do not all exist yet: start the next one
            bar.update(last[0])
            _optimize_one(study, objective)
            continue
        snap = snapshot(study, n)
        bar.update(len(snap.done))
        if len(snap.done) != last_done:
            last_done, last_change = len(snap.done), time.monotonic()
        if len(snap.done) >= n:
            break
        if snap.waiting or snap.total < n:
            _optimize_one(study, objective)
            continue
        last[0] = n  # from now on, decide from a snapshot each time
        missing = sorted(set(range(n)) - snap.done - snap.held)
        if missing:
            enqueue(study, spec, missing)
            stats.queued += len(missing)
            continue
        if time.monotonic() - last_change > wait_s:
            stats.gave_up_waiting = True
            break
        with warnings.catch_warnings():  # fail_stale_trials is marked experimental
            warnings.simplefilter("ignore")
            fail_stale_trials(study)  # RDB: fails trials whose worker died; requeue_stale queues them
        time.sleep(POLL_S)
    bar.close()
    stats.seconds = time.perf_counter() - t0
    return stats


# ----------------------------------------------------------------------------------------- results


def collect(study, spec: SweepSpec) -> tuple[list[dict], dict]:
    """(one row per scenario done, sorted by the axes; counts of the study's trials)."""
    from optuna.trial import TrialState

    n = spec.size
    rows, dup = {}, 0
    counts = {s.name.lower(): 0 for s in TrialState}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name.lower()] += 1
        g = claim_of(t, n)
        if t.state != TrialState.COMPLETE or g is None or RESULT not in t.user_attrs:
            continue
        if g in rows:
            dup += 1
            continue
        rows[g] = {**t.user_attrs[RESULT], "trial": t.number}
    ordered = sorted(rows.values(), key=_row_key)
    stats = {"study": study.study_name, "scenarios": n, "done": len(ordered), "duplicates": dup,
             "trials": sum(counts.values()), **{f"trials_{k}": v for k, v in counts.items() if v},
             "spec": spec.to_dict()}
    return ordered, stats


def _row_key(row: dict):
    s = row["scenario"]
    return (s["model"], s["gpu"], s["seq_len"] or 0, s["gbs"] or 0, s["tokens_per_batch"] or 0, s["gpus"])


def add_costs(rows: list[dict], train_tokens: Optional[float], prices: dict, run=None) -> None:
    """Add usd_per_mtok (with a price: at the steady step rate, or with train tokens the run's
    cost per million tokens, goodput included) and, with train tokens, the run: the "run" block
    (``costmodel.goodput.run_block``: failures, checkpoints, restarts, goodput, energy) and
    run_time_s (wall time with goodput), goodput, energy_mwh and run_cost_usd, to the rows that
    found a layout, in place. ``run``: the ``RunInputs`` (None: their defaults)."""
    from costmodel.goodput import RunInputs, price_for, run_block
    from hardware_catalog import default_cluster_for_gpu, get_gpu, get_model

    for row in rows:
        best = row.get("best")
        if not best:
            continue
        tps, gpus = best["tokens_per_s"], best["gpus"]
        price = price_for(prices, row["scenario"]["gpu"])
        if price:
            row["usd_per_mtok"] = gpus * price / 3600.0 / tps * 1e6
        if train_tokens:
            s = row["scenario"]
            inputs = (run or RunInputs()).with_(train_tokens=train_tokens, price_per_gpu_hour=price)
            block = run_block(best, get_model(s["model"]), default_cluster_for_gpu(s["gpu"]), get_gpu(s["gpu"]), inputs)
            row["run"] = block
            row["run_time_s"] = block["days"] * 86400.0
            row["goodput"] = block["goodput"]
            row["energy_mwh"] = block["energy_mwh"]
            if price:
                row["run_cost_usd"] = block["cost_usd"]
                # the run's own cost per token (goodput included), so $/M tok x tokens = run cost
                row["usd_per_mtok"] = block["cost_usd"] / train_tokens * 1e6


OBJECTIVES = ("step-time", "tokens-per-gpu", "time-to-train", "cost", "energy")
"""What ``planner sweep --objective`` picks the best GPU count by (``search.exhaustive``'s
objectives; within a scenario they pick the same layout, so they rank the scenarios)."""


def _objective_value(row: dict, objective: str) -> Optional[float]:
    best = row.get("best")
    if not best:
        return None
    if objective == "step-time":
        return best["step_time_s"]
    if objective == "tokens-per-gpu":
        return -best["tokens_per_s_per_gpu"]
    if objective == "time-to-train":
        return row.get("run_time_s")
    if objective == "cost":
        return row.get("run_cost_usd", row.get("run", {}).get("gpu_hours"))
    return row.get("energy_mwh")


def mark_scaling(rows: list[dict], objective: str, threshold: Optional[float] = None) -> list[dict]:
    """Per series (model, GPU type, sequence, batch) over GPU counts: the optimum by ``objective``
    (row["optimum"] = True) and, with a time to train, the first count where adding GPUs stops
    paying (row["diminishing"] = True, ``costmodel.goodput.diminishing_from``), on the time to
    train where a token budget gives one, else on the step time. Returns one summary dict per series."""
    from costmodel.goodput import DIMINISHING, diminishing_from

    threshold = DIMINISHING if threshold is None else threshold
    series: dict = {}
    for r in rows:
        if r.get("best"):
            s = r["scenario"]
            series.setdefault((s["model"], s["gpu"], r.get("seq_len_used"), r.get("gbs_used")), []).append(r)
    out = []
    for key, members in series.items():
        members.sort(key=lambda r: r["scenario"]["gpus"])
        valued = [r for r in members if _objective_value(r, objective) is not None]
        best = min(valued, key=lambda r: _objective_value(r, objective)) if valued else None
        if best is not None:
            best["optimum"] = True
        summary = {"model": key[0], "gpu": key[1], "seq_len": key[2], "gbs": key[3], "objective": objective,
                   "optimum_gpus": best["scenario"]["gpus"] if best else None, "diminishing_from_gpus": None}
        # The time of the same work at each count: the run's (with a token budget), else the step's
        # (one series shares its batch and sequence, so a step is the same tokens at every count).
        def time_of(r):
            return r.get("run_time_s") or r["best"]["step_time_s"]

        timed = [r for r in members if time_of(r)]
        if len(timed) > 1:
            n = diminishing_from([r["scenario"]["gpus"] for r in timed], [time_of(r) for r in timed], threshold)
            if n is not None:
                for r in timed:
                    if r["scenario"]["gpus"] == n:
                        r["diminishing"] = True
                summary["diminishing_from_gpus"] = n
            summary["threshold"] = threshold
            summary["timed_by"] = "run" if all(r.get("run_time_s") for r in timed) else "step"
            summary["marginal"] = [
                {"from": a["scenario"]["gpus"], "to": b["scenario"]["gpus"],
                 "speedup": time_of(a) / time_of(b),
                 "efficiency": (time_of(a) / time_of(b) - 1) / (b["scenario"]["gpus"] / a["scenario"]["gpus"] - 1)}
                for a, b in zip(timed, timed[1:])]
        out.append(summary)
    return out


@dataclass
class SweepResult:
    rows: list
    stats: dict
    worker: Optional[WorkerStats] = None


def run_sweep(spec: Optional[SweepSpec], *, storage: Optional[str] = None, study_name: Optional[str] = None,
              train_tokens: Optional[float] = None, prices: Optional[dict] = None, progress: bool = False,
              wait_s: float = DEFAULT_WAIT_S, report_only: bool = False, reclaim: bool = False,
              run=None, objective: Optional[str] = None, min_scaling_efficiency: Optional[float] = None,
              run_flags: tuple = ()) -> SweepResult:
    """Create or join the sweep, work on it (unless ``report_only``), and collect the table.
    ``run``: ``costmodel.goodput.RunInputs`` for the run block; ``objective``: mark each
    series' best GPU count by it (``OBJECTIVES``) and where adding GPUs stops paying;
    ``run_flags``: the run-model flags typed, refused without a token budget (given or stored),
    as they change nothing else the sweep reports."""
    from costmodel.goodput import refuse_unused_run_settings
    from search.api import TRAIN_TOKENS

    if train_tokens is not None:
        train_tokens = TRAIN_TOKENS.parse(train_tokens)
    if objective is not None and objective not in OBJECTIVES:
        raise PlannerInputError(f"--objective {objective!r} is not allowed (allowed: {', '.join(OBJECTIVES)})")
    if min_scaling_efficiency is not None:
        from costmodel.goodput import MIN_SCALING_EFFICIENCY

        min_scaling_efficiency = MIN_SCALING_EFFICIENCY.parse(min_scaling_efficiency)
        if objective is None:  # only the --objective marks say where adding GPUs stops paying
            raise PlannerInputError(f"--min-scaling-efficiency {min_scaling_efficiency:g} needs --objective "
                                    f"(allowed: {', '.join(OBJECTIVES)}): it sets where the marks say adding GPUs "
                                    f"stops paying")
    if objective in ("time-to-train", "cost", "energy") and train_tokens is None and storage is None:
        raise PlannerInputError(f"--objective {objective} prices the whole run: give --train-tokens (e.g. 15T)")
    if train_tokens is None and storage is None:
        refuse_unused_run_settings(run_flags, "sweep", "--train-tokens")
    wait_s = WAIT.parse(wait_s)
    if wait_s < 0:
        raise PlannerInputError(f"--wait {wait_s}: must be >= 0 seconds")
    study, spec, report = open_sweep(spec, storage, study_name, {"train_tokens": train_tokens, "prices": prices},
                                     report_only=report_only, read_only=report_only and not reclaim)
    if objective in ("time-to-train", "cost", "energy") and not report.get("train_tokens"):
        raise PlannerInputError(f"--objective {objective} prices the whole run: give --train-tokens (e.g. 15T)")
    if not report.get("train_tokens"):  # a joined sweep's stored budget puts them to use
        refuse_unused_run_settings(run_flags, "sweep", "--train-tokens")
    worker = WorkerStats()
    if reclaim:
        worker.reclaimed = reclaim_running(study)
    if not report_only:
        run_worker(study, spec, progress=progress, wait_s=wait_s, stats=worker)
    rows, stats = collect(study, spec)
    add_costs(rows, report.get("train_tokens"), report.get("prices") or {}, run)
    from search.storage import redact

    stats.update(storage=redact(storage) if storage else "memory", train_tokens=report.get("train_tokens"),
                 prices=report.get("prices") or {})
    if report.get("train_tokens"):
        from costmodel.goodput import RunInputs

        stats["run_inputs"] = (run or RunInputs()).to_dict()
    if objective is not None:
        stats["objective"] = objective
        stats["scaling"] = mark_scaling(rows, objective, min_scaling_efficiency)
    if not report_only:
        stats["worker"] = worker.__dict__
    return SweepResult(rows=rows, stats=stats, worker=None if report_only else worker)
