"""Families of rows: named predicates over what a mapped run states, and their error figures.

A family groups rows across sources by a mechanism they stress (thousands of GPUs, long
sequences, ZeRO-3 on a thin network), so ``planner validate`` and ``--cross-validate`` print
how the model does on each next to the per-source figures. A family is one ``Family``: a name
and a predicate over ``RowTraits`` (what the row states, not what planner chose); adding one is
one entry in ``FAMILIES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from planner.reports import counted

THIN_NETWORK_GBPS_PER_GPU = 12.5
"""Network bandwidth per GPU (GB/s, one direction) at or below which a network is thin: 100
Gb/s per GPU, half of a DGX A100's 200 Gb/s HDR rail per GPU (AWS p4d: 4 x 100 Gb/s EFA for 8
GPUs = 6.25 GB/s per GPU)."""


@dataclass(frozen=True)
class RowTraits:
    """What a family predicate reads about one row: the job as the row states it."""

    gpus: int
    seq_len: int
    zero: Optional[int]
    """ZeRO stage the row states (None: unstated, searched)."""
    network_gbps_per_gpu: float
    """Network bandwidth per GPU of the row's cluster, GB/s per direction (line rate)."""
    moe: bool
    series: str = ""
    """The job the row belongs to apart from its size: source, model and framework text
    (``planner.validate.trend`` follows one series across GPU counts)."""


def row_traits(run) -> RowTraits:
    """``RowTraits`` of a ``planner.validate.runs.MappedRun``."""
    from hardware_catalog import get_interconnect

    cluster = run.cluster
    nic = get_interconnect(cluster.nic) if cluster.nic else None
    per_gpu = (nic.bandwidth_gbps * cluster.nics_per_node / cluster.gpus_per_node) if nic else 0.0
    return RowTraits(
        gpus=int(run.gpus),
        seq_len=int(run.pins.get("seq_len", 0) or 0),
        zero=run.pins.get("zero"),
        network_gbps_per_gpu=float(per_gpu),
        moe=run.model.moe is not None,
        series=" | ".join((run.source, _model_text(run), run.row.framework_text())),
    )


def _model_text(run) -> str:
    """The model as the row names it (a preset name, or the block's name), else planner's name."""
    stated = run.row.model
    name = stated if isinstance(stated, str) else getattr(stated, "name", None)
    return str(name or getattr(run.model, "name", "") or "")


@dataclass(frozen=True)
class Family:
    name: str
    predicate: Callable[[RowTraits], bool]


FAMILIES: tuple[Family, ...] = (
    Family("MoE", lambda t: t.moe),
    Family("> 4,096 GPUs", lambda t: t.gpus > 4096),
    Family("long context >= 32K", lambda t: t.seq_len >= 32768),
    Family("ZeRO-3 on thin networks", lambda t: t.zero == 3 and 0 < t.network_gbps_per_gpu <= THIN_NETWORK_GBPS_PER_GPU),
)
"""The families printed, in order (issue 24: MoE; issue 25: scale, long context, ZeRO-3 on thin networks)."""


def family_stats(traits: list, errors) -> list[dict]:
    """Per family: rows, median and p90 of |error| over the rows whose traits it matches."""
    errors = np.abs(np.asarray(errors, dtype=np.float64))
    out = []
    for fam in FAMILIES:
        mask = np.array([fam.predicate(t) for t in traits], dtype=bool) if traits else np.zeros(0, bool)
        e = errors[mask]
        out.append({"family": fam.name, "rows": int(mask.sum()),
                    "median_abs_error": float(np.median(e)) if len(e) else None,
                    "p90_abs_error": float(np.percentile(e, 90)) if len(e) else None})
    return out


def format_family_line(st: dict) -> str:
    if not st["rows"]:
        return f"  {st['family']:<26}no rows"
    return (f"  {st['family']:<26}{counted(st['rows'], 'row'):>8}: median |err| {st['median_abs_error'] * 100:.1f}%, "
            f"p90 {st['p90_abs_error'] * 100:.1f}%")
