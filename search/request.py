"""What a search is asked, by concern: the problem (model, GPUs, hardware, batch), the search's own
options (what it varies and how it enumerates) and the ranking (what the top rows are).

``search.api.search(SearchRequest(...))`` runs one; ``planner.job`` prices a single layout for the
same ``ProblemRequest``. ``SearchRequest.of(model, gpus, gpu, **keywords)`` builds one from flat
keywords (the Python API's ``planner.search``): each keyword goes to the concern that declares a
field of that name, so the keywords are the fields below and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional

from search.exhaustive import DEFAULT_MEMORY_HEADROOM


@dataclass(frozen=True)
class ProblemRequest:
    """The training job: which model, on how many GPUs of which kind, with which batch."""

    model: Any
    """Model preset name (e.g. "405b"), model or Hugging Face config.json file, or a ``ModelSpec``."""
    gpus: Any
    """GPUs in the job: a count; a search also takes a list or "A..B" / "A..B:S" / "N1,N2" of counts
    (``search.api.parse_gpu_counts``)."""
    gpu: Any = None
    """GPU type: catalog name or ``GPUSpec`` (a search also takes "h100,b200" or a list); picks its
    default cluster. None: the cluster's GPU."""
    cluster: Any = None
    """Cluster: preset name, cluster file or ``ClusterSpec``; fixes the GPU type. None: the GPU's
    default cluster."""
    gbs: Optional[int] = None
    """Global batch, sequences per optimizer step. None: ``tokens_per_batch`` or the model's default."""
    seq_len: Optional[int] = None
    """Tokens per sequence. None: the model preset's."""
    tokens_per_batch: Optional[int] = None
    """Global batch in tokens (instead of ``gbs``; a whole number of sequences)."""
    allow_cross_node_tp: bool = False
    """Allow tensor-parallel groups wider than the scale-up (NVLink) domain."""


@dataclass(frozen=True)
class SearchOptions:
    """What the search varies, what it holds fixed, and how it enumerates."""

    pins: Optional[dict] = None
    """Searched knobs fixed by the user (option name -> ``Layout`` value: tp pp dp cp ep etp vpp mbs
    zero recompute precision sequence_parallel pp_first_layers pp_last_layers)."""
    implementation: Optional[dict] = None
    """Implementation settings (``costmodel.options.IMPLEMENTATION_OPTIONS`` -> value), applied to
    every candidate where their rules allow (``search.rules.where_settings_apply``)."""
    recompute_modules: Any = None
    """Megatron-Core submodules selective candidates recompute (names or "a,b"; None: core_attn)."""
    stage_splits: bool = False
    """Also search the first / last pipeline stage's layer counts."""
    method: str = "auto"
    """exhaustive | optuna | auto (enumerates up to ``search.api.AUTO_EXHAUSTIVE_MAX`` candidates)."""
    trials: int = 300
    """Optuna trials (count)."""
    seed: int = 0
    """Optuna seed."""
    sampler: Optional[str] = None
    """Optuna sampler (``search.optuna_search.SAMPLERS``); None: its default."""
    engine: str = "cpsat"
    """How the exhaustive search enumerates degree combinations: cpsat | numpy."""
    storage: Optional[str] = None
    """Optuna storage URL of a study other processes may join (``search.storage``)."""
    study_name: Optional[str] = None
    """Name of that study (with ``storage``)."""
    memory_headroom: float = DEFAULT_MEMORY_HEADROOM
    """Fraction of each GPU's HBM kept free (0 to < 1)."""
    progress: Any = False
    """Report progress on stderr (True, False or a mode of ``planner search --progress``)."""
    domain: Any = None
    """What the ``--framework`` release can launch (``planner.export.domain.launch_domain``): layouts
    every launch format of the release refuses are not ranked. None: every layout."""
    look_around: bool = True
    """When nothing fits, also search nearby jobs (batch sizes, GPU counts) to name the nearest that
    has a layout (``search.nearest``; up to a few seconds). A sweep, which reports every scenario
    of its grid, turns it off."""


@dataclass(frozen=True)
class Ranking:
    """What the top rows are: how many, ranked by what, or the Pareto front."""

    top: int = 10
    """Layouts reported (count)."""
    pareto: bool = False
    """Report the time vs memory front instead (vs cost with ``price_per_gpu_hour``)."""
    price_per_gpu_hour: Any = None
    """USD per GPU-hour: a number for every GPU, or per GPU type as ``--price-per-gpu-hour`` takes it
    (``"h100=2.5,b200=4"`` or {"h100": 2.5, "b200": 4}; ``costmodel.goodput.parse_prices``: every GPU
    type of the search needs a price, none other may be named). Adds the cost per step (and of the
    run, with ``train_tokens``), each layout at its own GPU's price."""
    train_tokens: Optional[float] = None
    """Tokens of the whole training run: adds its time (and cost)."""
    objective: str = "step-time"
    """What the top list ranks by (``search.exhaustive.RANK_OBJECTIVES``)."""
    rank_by: str = "median"
    """median (the point prediction) or p10 (its pessimistic end, ``search.ranking``)."""
    within_envelope: bool = False
    """Only layouts whose every mechanism lies inside the validated envelope (``search.envelope``)."""
    run: Any = None
    """A ``costmodel.goodput.RunInputs`` (failures, checkpoints, restarts, power): whole-run time, cost
    and energy count the wall time with goodput; None = its defaults when the objective or
    ``train_tokens`` asks for whole-run figures."""


@dataclass(frozen=True)
class SearchRequest:
    """One search: the problem, the search's options, the ranking, and the constants it prices with."""

    problem: ProblemRequest
    options: SearchOptions = field(default_factory=SearchOptions)
    ranking: Ranking = field(default_factory=Ranking)
    calib: Any = None
    """The cost model's constants (a ``Calibration``, e.g. a ``planner calibrate`` profile's); None:
    the shipped ones."""

    @classmethod
    def of(cls, model, gpus, gpu=None, cluster=None, *, calib=None, **keywords) -> "SearchRequest":
        """A request from flat keywords, each the name of a field of ``ProblemRequest``,
        ``SearchOptions`` or ``Ranking``; another name raises TypeError."""
        parts = {}
        for concern in (ProblemRequest, SearchOptions, Ranking):
            names = {f.name for f in fields(concern)}
            parts[concern] = {k: keywords.pop(k) for k in list(keywords) if k in names}
        if keywords:
            raise TypeError(f"search got unknown argument(s) {', '.join(sorted(keywords))}")
        problem = ProblemRequest(model, gpus, gpu, cluster, **parts[ProblemRequest])
        return cls(problem, SearchOptions(**parts[SearchOptions]), Ranking(**parts[Ranking]), calib)
