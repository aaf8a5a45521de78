"""The validated envelope: for each mechanism, the range of the reference runs that support it.

The cost model is fitted and checked on published runs (``planner/data/published_runs.json``).
A mechanism priced in a regime no reference run measured (context parallelism at 512 tokens
per rank, TP 16, 16,384 GPUs) is an extrapolation: its prediction may be right, but nothing
has checked it. This module says so, layout by layout.

``search/data/envelope.json`` holds, per mechanism, what the high-confidence reference rows
cover (``min``..``max`` for a number, ``values`` for a category), as the layouts ``planner
validate`` maps (or, where a row leaves knobs unstated, chooses) for them. It is written by
``planner validate --write-envelope search/data/envelope.json`` (``planner.validate.envelope``)
and carries its provenance. Two scopes:

* ``layout``: a property of the layout (TP degree, CP tokens per rank, ...): it differs between
  candidates of one search, so ``search --within-envelope`` can keep only supported layouts;
* ``job``: a property of the job (GPU count, GPU architecture, sequence length, model size): the
  same for every candidate; reported once, never filtered on.

``flags`` lists, for one layout, every mechanism outside its supported range with the reason;
``inside`` is the vectorized check ``search --within-envelope`` filters with.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from costmodel.options import FP8_RECIPES, PRECISIONS, RECOMPUTE

LAYOUT, JOB = "layout", "job"
RANGE, SET = "range", "set"


@dataclass(frozen=True)
class Mechanism:
    """One checked quantity: how to read it off a job and its layouts, and how to say it."""

    name: str
    label: str
    """What the supported range is of, e.g. "CP tokens per rank"."""
    scope: str
    """LAYOUT or JOB."""
    kind: str
    """RANGE (min..max) or SET (values seen)."""
    value: Callable
    """(job, columns) -> (values array, applies mask)."""
    what: str
    """How one value reads, with {value} and the layout's columns, e.g. "CP {cp} at {value} tokens per rank"."""
    what_one: str = ""
    """How a value of exactly 1 reads, where ``what`` counts in the plural ("1 expert per rank")."""


@dataclass(frozen=True)
class Job:
    """What the job fixes: the model, the GPU, the GPU count and the sequence length."""

    model: object
    gpu: object
    gpus: int
    seq_len: int


def _all(cols) -> np.ndarray:
    return np.ones(len(cols["tp"]), dtype=bool)


def _col(name: str, applies: Optional[Callable] = None) -> Callable:
    def value(job, cols):
        v = np.asarray(cols[name])
        return v, (applies(job, cols) if applies else _all(cols))
    return value


def _moe(job, cols) -> np.ndarray:
    return _all(cols) & (job.model.moe is not None)


def _experts_per_rank(job, cols):
    experts = job.model.moe.num_experts if job.model.moe is not None else 1
    return experts // np.maximum(np.asarray(cols["ep"]), 1), _moe(job, cols)


def _names(name: str, choices: tuple) -> Callable:
    def value(job, cols):
        return np.asarray(choices, dtype=object)[np.asarray(cols[name])], _all(cols)
    return value


def _fp8_recipe(job, cols):
    """The FP8 recipe of the layouts that run FP8 (moot under BF16)."""
    names = np.asarray(FP8_RECIPES, dtype=object)[np.asarray(cols["fp8_recipe"])]
    return names, np.asarray(cols["precision"]) == PRECISIONS.index("fp8")


def _token_policy(job, cols):
    """dropless, dropped (a capacity factor) or padded (to capacity), for MoE models."""
    factor = np.asarray(cols["moe_capacity_factor"], dtype=np.float64)
    padded = np.asarray(cols["moe_pad_to_capacity"], dtype=bool)
    names = np.where(factor <= 0.0, "dropless", np.where(padded, "padded", "dropped")).astype(object)
    return names, _moe(job, cols)


def _job(fn: Callable) -> Callable:
    def value(job, cols):
        n, x = len(cols["tp"]), fn(job)
        return np.full(n, x, dtype=object if isinstance(x, str) else np.int64), np.ones(n, dtype=bool)
    return value


def _params(job) -> int:
    from costmodel.params import count_params

    return int(count_params(job.model).total)


MECHANISMS: tuple[Mechanism, ...] = (
    Mechanism("cp_tokens_per_rank", "CP tokens per rank", LAYOUT, RANGE,
              lambda job, cols: (job.seq_len // np.asarray(cols["cp"]), np.asarray(cols["cp"]) > 1),
              "CP {cp} at {value} tokens per rank", "CP {cp} at {value} token per rank"),
    Mechanism("cp", "CP degree", LAYOUT, RANGE, _col("cp", lambda job, cols: np.asarray(cols["cp"]) > 1), "CP {value}"),
    Mechanism("tp", "TP degree", LAYOUT, RANGE, _col("tp"), "TP {value}"),
    Mechanism("pp", "pipeline stages", LAYOUT, RANGE, _col("pp"), "PP {value}"),
    Mechanism("vpp", "virtual stages per GPU", LAYOUT, RANGE,
              _col("vpp", lambda job, cols: np.asarray(cols["pp"]) > 1), "{value} virtual stages per GPU",
              "{value} virtual stage per GPU"),
    Mechanism("dp", "DP degree", LAYOUT, RANGE, _col("dp"), "DP {value}"),
    Mechanism("mbs", "micro-batch size", LAYOUT, RANGE, _col("mbs"), "micro-batch {value}"),
    Mechanism("ep", "EP degree", LAYOUT, RANGE, _col("ep", _moe), "EP {value}"),
    Mechanism("experts_per_rank", "experts per rank", LAYOUT, RANGE, _experts_per_rank, "{value} experts per rank",
              "{value} expert per rank"),
    Mechanism("zero", "ZeRO stage", LAYOUT, SET, _col("zero"), "ZeRO-{value}"),
    Mechanism("recompute", "recompute", LAYOUT, SET, _names("recompute", RECOMPUTE), "recompute {value}"),
    Mechanism("precision", "precision", LAYOUT, SET, _names("precision", PRECISIONS), "{value}"),
    Mechanism("fp8_recipe", "FP8 recipe", LAYOUT, SET, _fp8_recipe, "FP8 recipe {value}"),
    Mechanism("moe_tokens", "MoE token policy", LAYOUT, SET, _token_policy, "{value} MoE tokens"),
    Mechanism("gpu_architecture", "GPU architecture", JOB, SET, _job(lambda job: job.gpu.architecture),
              "{value} GPUs"),
    Mechanism("gpus", "GPU count", JOB, RANGE, _job(lambda job: job.gpus), "{value} GPUs", "{value} GPU"),
    Mechanism("seq_len", "sequence length", JOB, RANGE, _job(lambda job: job.seq_len), "sequence {value}"),
    Mechanism("model_params", "model size (parameters)", JOB, RANGE, _job(_params), "{value} parameters"),
)
MECHANISMS_BY_NAME = {m.name: m for m in MECHANISMS}


# ------------------------------------------------------------------------------------- the data


def default_path() -> Path:
    return Path(str(resources.files("search").joinpath("data/envelope.json")))


@functools.lru_cache(maxsize=4)
def load(path: Optional[str] = None) -> dict:
    """The envelope file (default: the shipped one): {"provenance": ..., "mechanisms": ...}."""
    p = Path(path) if path else default_path()
    try:
        return json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as err:
        from hardware_catalog.errors import PlannerInputError

        raise PlannerInputError(f"envelope file {p}: cannot read ({err})") from None


def derive(observations: list[tuple[Job, dict]]) -> dict:
    """Per mechanism, what the observed (job, one-layout columns) pairs cover: {"min", "max",
    "rows"} for a range, {"values", "rows"} for a set (rows: observations where it applies)."""
    out = {}
    for m in MECHANISMS:
        seen = []
        for job, cols in observations:
            v, applies = m.value(job, cols)
            seen += [x.item() if hasattr(x, "item") else x for x in np.asarray(v)[applies]]
        if not seen:
            continue
        out[m.name] = ({"min": min(seen), "max": max(seen), "rows": len(seen)} if m.kind == RANGE
                       else {"values": sorted(set(seen), key=str), "rows": len(seen)})
    return out


# ------------------------------------------------------------------------------------ the checks


def _outside(m: Mechanism, supported: dict, v: np.ndarray, applies: np.ndarray) -> np.ndarray:
    if m.kind == RANGE:
        vv = np.asarray(v, dtype=np.float64)
        bad = (vv < supported["min"]) | (vv > supported["max"])
    else:
        bad = ~np.isin(np.asarray(v, dtype=object), np.asarray(supported["values"], dtype=object))
    return applies & bad


def inside(job: Job, cols: dict, data: Optional[dict] = None) -> np.ndarray:
    """True where every layout-scope mechanism lies in its supported range (vectorized over the
    columns of a LayoutBatch)."""
    data = data or load()
    ok = _all(cols)
    for m in MECHANISMS:
        supported = data["mechanisms"].get(m.name)
        if m.scope != LAYOUT or supported is None:
            continue
        v, applies = m.value(job, cols)
        ok &= ~_outside(m, supported, v, applies)
    return ok


def _fmt(x) -> str:
    """1,024 for counts, 405B / 1.01T for parameter counts, text as is."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        for unit, scale in (("T", 1e12), ("B", 1e9)):
            if abs(x) >= scale:
                return f"{x / scale:.3g}{unit}"
        return f"{int(x):,}"
    return str(x)


def supported_text(m: Mechanism, supported: dict) -> str:
    """"4,096-32,768" or "ampere, hopper"."""
    if m.kind == RANGE:
        lo, hi = supported["min"], supported["max"]
        return _fmt(lo) if lo == hi else f"{_fmt(lo)}-{_fmt(hi)}"
    return ", ".join(str(v) for v in supported["values"])


def flags(job: Job, cols: dict, scope: Optional[str] = None, data: Optional[dict] = None) -> list[dict]:
    """For one layout (columns of length 1): each mechanism outside its supported range, as
    {mechanism, scope, value, supported, reason}; ``scope`` keeps only LAYOUT or JOB flags."""
    data = data or load()
    out = []
    for m in MECHANISMS:
        supported = data["mechanisms"].get(m.name)
        if supported is None or (scope and m.scope != scope):
            continue
        v, applies = m.value(job, cols)
        if not _outside(m, supported, v, applies)[0]:
            continue
        value = v[0].item() if hasattr(v[0], "item") else v[0]
        fields = {k: _fmt(np.asarray(c)[0].item()) for k, c in cols.items() if k in ("tp", "pp", "cp", "ep", "dp")}
        what = (m.what_one if m.what_one and value == 1 else m.what).format(value=_fmt(value), **fields)
        out.append({"mechanism": m.name, "scope": m.scope, "value": value,
                    "supported": {k: v for k, v in supported.items() if k != "rows"},
                    "reason": f"{what}: reference runs cover {supported_text(m, supported)} "
                              f"({supported['rows']:,} row{'' if supported['rows'] == 1 else 's'})"})
    return out


def columns_of(batch, i: int = 0) -> dict:
    """Row i of a LayoutBatch as length-1 columns."""
    return {k: v[i:i + 1] for k, v in batch.columns().items()}
