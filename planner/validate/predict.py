"""Predictions for mapped runs: the candidate layouts, the fastest that fits, the error."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from costmodel.calibration import DEFAULT, Calibration
from costmodel.options import IMPLEMENTATION_OPTIONS
from hardware_catalog.errors import PlannerInputError
from planner.frameworks.profiles import row_label_suffix
from planner.validate.runs import MappedRun, map_run, parse_row
from search.grid import candidate_grid, expand_recompute_modules
from search.space import RECOMPUTE_SHARES, divisors, powers_of_two

PP_MAX = 64
"""Largest pipeline degree tried where a row states no layout."""
_LAYOUT_KNOBS = ("tp", "pp", "dp")


@dataclass
class RowResult:
    id: str
    source: str
    confidence: str
    gpus: int
    reported: float
    predicted: Optional[float] = None
    error: Optional[float] = None
    layout: str = ""
    chosen: dict = field(default_factory=dict)
    fits: bool = True
    reported_memory_gib: Optional[float] = None
    predicted_memory_gib: Optional[float] = None
    memory_error: Optional[float] = None
    reason: str = ""
    assumptions: list = field(default_factory=list)
    values: dict = field(default_factory=dict)
    """The predicted layout, every option (``Layout.to_dict``)."""
    traits: dict = field(default_factory=dict)
    """What the row states that families test (``planner.validate.families.RowTraits``)."""
    alternatives: dict = field(default_factory=dict)
    """Where the row leaves the schedule knobs (``ALTERNATIVE_KNOBS``) to the search: for each
    value of them, e.g. ``(("vpp", 2), ("mbs", 1))``, the fastest fitting prediction with it
    (tokens/s/GPU); the trend report holds them fixed across a series (not in --json)."""


ALTERNATIVE_KNOBS = ("vpp", "mbs")
"""Searched knobs whose choice the trend report varies (``planner.validate.trend``): the
virtual-stage count and the micro-batch size set the pipeline bubble's share of a step, which
grows as a strong-scaling study spreads one batch over more GPUs."""


def fastest_by_choice(batch, out, knobs) -> dict:
    """{((knob, value), ...): the fastest fitting tokens/s/GPU among the candidates with those values}."""
    fits = np.nonzero(out.fits)[0]
    if not knobs or len(fits) == 0:
        return {}
    cols = np.stack([np.asarray(getattr(batch, k))[fits] for k in knobs], axis=1)
    speed = out.tokens_per_s_per_gpu[fits]
    best: dict = {}
    for row, value in zip(map(tuple, cols.tolist()), speed.tolist()):
        key = tuple(zip(knobs, row))
        if value > best.get(key, -1.0):
            best[key] = value
    return best


def _layout_known(run: MappedRun) -> bool:
    return all(k in run.pins for k in _LAYOUT_KNOBS)


def candidate_choices(run: MappedRun) -> tuple[dict, dict]:
    """(choices, fixed) for ``search.grid.candidate_grid``: the degrees (those the row does not
    state searched), then the searched knobs; everything else pinned."""
    pins, searched = run.pins, run.searched
    if _layout_known(run):
        choices = {k: [pins.get(k, 1)] for k in ("tp", "pp", "cp")}
        fixed = {"dp": pins["dp"]}
    else:
        # Every power-of-two tp in the NVLink domain and every pp dividing the GPUs; the rules
        # drop what does not split the heads or the layers.
        pp_max = min(run.model.num_layers, PP_MAX)
        choices = {"tp": [pins["tp"]] if "tp" in pins else powers_of_two(run.cluster.scaleup_domain_size),
                   "pp": [pins["pp"]] if "pp" in pins else [p for p in divisors(run.gpus) if p <= pp_max],
                   "cp": [pins.get("cp", 1)]}
        fixed = {"dp": pins["dp"]} if "dp" in pins else {}
    if "ep" in searched:
        choices["ep"] = searched["ep"]
    for k in ("mbs", "vpp", "zero"):
        choices[k] = searched.get(k, [pins.get(k)])
    choices.update({k: searched[k] for k in IMPLEMENTATION_OPTIONS if k in searched})
    choices["recompute"] = searched.get("recompute", [pins.get("recompute")])
    # Unstated recompute also covers partial full recompute (3, 2 or 1 quarters of the layers).
    unstated = "recompute" in searched
    if unstated:
        choices["recompute_share"] = list(RECOMPUTE_SHARES)
    else:  # as stated: layers per stage, or a profile's share (recompute_share)
        choices["recompute_layers"] = [pins.get("recompute_layers", 0)]
        choices["recompute_share"] = [pins.get("recompute_share", 0)]
    if run.model.sliding_window is not None and pins.get("cp_comm_type") == "p2p" \
            and "cp_comm_type" in run.row.stated_settings():
        # A stated p2p is judged as stated (rule sliding_window_cp_comm_type: TransformerEngine runs
        # no window on the ring), not switched to a2a as a setting left to the grid is.
        choices["cp_comm_type"] = ["p2p"]
    fixed.update({k: v for k, v in pins.items() if k not in choices and k not in _LAYOUT_KNOBS})
    return choices, fixed


def candidates(run: MappedRun):
    """Every valid layout consistent with the pins (the unstated knobs as a grid). Where the
    recompute mode is unstated, selective recompute also covers Megatron-Core's fine-grained
    variant: each selective layout once per set of the recompute modules the model has."""
    choices, fixed = candidate_choices(run)
    batch = candidate_grid(run.model, run.cluster, run.gpu, run.gpus, choices, fixed)
    era_fixed = "recompute_modules" in run.pins  # a profile or the row fixes the module set
    return expand_recompute_modules(batch, run.model) if "recompute" in run.searched and not era_fixed else batch


def _first_broken_rule(run: MappedRun) -> str:
    """': e.g. <the rule the first candidate breaks>' (search.rules.check_layout), or ''."""
    from costmodel.options import Layout
    from search.rules import check_layout

    choices, fixed = candidate_choices(run)
    values = {**{k: v[0] for k, v in choices.items()}, **fixed}
    values.setdefault("dp", max(run.gpus // (values["tp"] * values["pp"] * values["cp"]), 1))
    try:
        check_layout(run.model, run.cluster, run.gpu, Layout(**values), gpus=run.gpus)
    except (PlannerInputError, TypeError, ValueError) as err:
        return f": e.g. {err}"
    return ""


def _modules_label(lay) -> str:
    """'(mla_up_proj,mlp)' after 'sel' when selective recompute runs other modules than core_attn."""
    if lay.recompute != "selective" or lay.recompute_modules in (None, ("core_attn",)):
        return ""
    return "(" + ",".join(lay.recompute_modules) + ")"


_RECOMPUTE_WORD = {"none": "none", "selective": "sel", "full": "full"}  # the column is narrow: only selective is shortened


def layout_label(lay) -> str:
    """One line, e.g. "TP8 PP16 DP8 CP1 v1 mbs1 z1 sel bf16 tpo eager" (recompute: none, sel, full)."""
    return (
        f"TP{lay.tp} PP{lay.pp} DP{lay.dp} CP{lay.cp}" + (f" EP{lay.ep}" if lay.ep > 1 else "")
        + f" v{lay.vpp} mbs{lay.mbs} z{lay.zero} {_RECOMPUTE_WORD.get(lay.recompute, lay.recompute)}" + _modules_label(lay)
        + (f"{lay.recompute_share}/4" if lay.recompute_share else "") + f" {lay.precision}"
        + row_label_suffix(lay)
    )


def predict_run(run: MappedRun, calib: Calibration = DEFAULT) -> RowResult:
    """The fastest candidate that fits (else the one needing least memory), against the row."""
    from costmodel import evaluate_batch
    from costmodel.record import recorded_layout

    from dataclasses import asdict

    from planner.validate.families import row_traits

    res = RowResult(
        id=run.id, source=run.source, confidence=run.confidence, gpus=run.gpus, reported=float(run.reported),
        reported_memory_gib=run.reported_memory_gib, assumptions=list(run.assumptions),
        traits=asdict(row_traits(run)),
    )
    batch = candidates(run)
    if len(batch) == 0:
        res.reason = "no layout satisfies the published knobs and the planner's rules" + _first_broken_rule(run)
        return res
    out = evaluate_batch(run.model, run.cluster, batch, gpu=run.gpu, calib=calib)
    if out.fits.any():
        idx = np.nonzero(out.fits)[0]
        best = idx[np.argmax(out.tokens_per_s_per_gpu[idx])]
    else:
        best = int(np.argmin(out.memory_gib["peak"]))
        res.fits = False
    lay = batch.layout(int(best))
    res.predicted = float(out.tokens_per_s_per_gpu[best])
    res.error = (res.predicted - res.reported) / res.reported
    res.chosen = {k: getattr(lay, k) for k in run.searched}
    if not _layout_known(run):
        res.chosen.update({k: getattr(lay, k) for k in _LAYOUT_KNOBS if k not in run.pins})
    if "recompute" in run.searched and lay.recompute == "selective":
        res.chosen["recompute_modules"] = list(lay.recompute_modules or ("core_attn",))
    res.layout = layout_label(lay)
    res.values = recorded_layout(run.model, lay)  # partial recompute in layers per stage
    res.alternatives = fastest_by_choice(batch, out, [k for k in ALTERNATIVE_KNOBS if k in run.searched])
    res.predicted_memory_gib = float(out.memory_gib["peak"][best])
    if res.reported_memory_gib:
        res.memory_error = (res.predicted_memory_gib - res.reported_memory_gib) / res.reported_memory_gib
    return res


def validate_rows(rows: list, calib: Calibration = DEFAULT, base_dir=None) -> list[RowResult]:
    """A result per row: predicted, or listed with the reason it could not be mapped.
    ``base_dir``: the runs file's folder (cluster and model files a row names are relative to it)."""
    results = []
    for i, row in enumerate(rows, 1):
        try:
            results.append(predict_run(map_run(parse_row(row, i), base_dir), calib))
        except (PlannerInputError, KeyError, TypeError, ValueError) as err:
            results.append(_unmapped(row, i, err))
    return results


def _unmapped(row, index: int, err: Exception) -> RowResult:
    """The row listed with the reason, from whatever of it can be read."""
    row = row if isinstance(row, dict) else {}
    ref = row.get("reference") if isinstance(row.get("reference"), dict) else {}
    hw = row.get("hardware") if isinstance(row.get("hardware"), dict) else {}
    src = row.get("source")
    source = src.get("key", "?") if isinstance(src, dict) else str(src or "?")
    gpus = hw.get("num_gpus") or row.get("num_gpus") or row.get("gpus")
    reported = ref.get("tokens_per_s_per_gpu")
    try:  # a misspelt field may be why ("gbs" written "global_batch")
        unread = parse_row(row, index).unread()
    except PlannerInputError:
        unread = ""
    return RowResult(
        id=str(row.get("id", f"row {index}")), source=source, confidence=str(row.get("confidence", "high")),
        gpus=gpus if isinstance(gpus, int) else 0, reported=float(reported) if isinstance(reported, (int, float)) else 0.0,
        reason=str(err) + unread,
    )
