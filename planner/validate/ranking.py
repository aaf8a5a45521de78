"""``planner validate --ranking FILE``: does the planner put layouts in the measured order?

``planner search`` is judged by its order, so its accuracy is also measured as an order: on
ablation groups, the same model, cluster and batch measured under several layouts.

A file of groups (the format of ``planner/data/ablations.json``)::

    [{"id", "source": {...}, "model": {"name", shape fields as in published_runs.json} or a preset name,
      "hardware": {"gpu", "num_gpus", "gpus_per_node"}, "seq_length", "global_batch_size",
      "framework", "precision", "confidence", "notes",
      "layouts": [{"layout": {"tp", "pp", "dp", "cp", "ep", "vp", "micro_batch_size",
                              "activation_recompute", "zero_stage", ...},
                   "measured": {"tokens_per_s_per_gpu": ...}, "quote"}]}]

Each layout becomes a runs-file row (group fields, then the layout's own: a layout may state
its own ``framework``, ``precision`` or, in a group gathered from two releases, ``source``) and
is predicted as ``planner validate`` predicts any row (``runs.map_run`` + ``predict.predict_run``:
the same profiles, pins and searched knobs). The whole file is checked before anything is
predicted (``load_groups``): a group or layout of the wrong shape, a duplicate group id, an empty
list, or a value the runs format refuses (``planner validate --runs``' own check of a row) is
one error line naming the group, the layout, the field and the value. A layout with no
measurement, or one well formed that cannot be predicted (nothing fits), is listed as not
predicted. Per group:

* **Kendall tau** (tau-b) between the measured and the predicted throughputs;
* **pairs ordered right**: of the pairs measured more than ``DECISIVE`` apart, those the
  planner orders the same way;
* **top-1**: the planner's fastest layout is the measured fastest, or measured within
  ``DECISIVE`` of it (a layout measured within that of the best is no decisive pair with it,
  so picking it is not an error); ``top1_strict`` drops that allowance.

Overall: decisive pairs pooled over groups, top-1 over groups, mean tau over groups; for all
groups, and for the groups measured on one software release (confidence high or medium: the
low ones mix releases, so their measured order mixes layout and software effects).

Where the model leans (``knob_bias``): per knob (TP, PP, DP, mbs, CP, VPP, EP), the decisive pairs
whose layouts differ in it, the share ordered right and the mean log bias of the predicted
ratio against the measured one, larger value over smaller. How the stated uncertainty calls
ties (``tie_stats``): the 80% interval of every prediction (``search.uncertainty``), and how
often two overlapping intervals (what ``planner search`` marks as a tie) meet pairs measured
within that uncertainty, beyond it, and more than ``DECISIVE`` apart.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

import numpy as np

from hardware_catalog.errors import PlannerInputError
from hardware_catalog.files import read_input_text, show
from planner.validate.schema import RowError, parse_row
from planner.validate.schema import _kind as schema_kind

DECISIVE = 0.03
"""Pairs measured further apart than this (relative to the slower) count for ordering."""
MAX_SHOWN_ERRORS = 4
"""Problems of a ranking file its error line spells out (the rest are counted)."""


def load_groups(path: Path) -> list[dict]:
    """The groups of an ablation file, every layout checked before anything is predicted
    (``check_group``: the group's shape, then each layout's row as ``planner validate --runs``
    checks a row). Any problem is one ``PlannerInputError`` line naming each problem's group,
    layout, field and value. A group without an id is named 'group N' (its place in the file);
    one without a confidence is 'high', as a runs row's (both normalised here)."""
    where = f"--ranking {show(path)}"
    try:
        groups = json.loads(read_input_text(path, where))
    except OSError as err:
        raise PlannerInputError(f"{where}: cannot read ({err.strerror or type(err).__name__})") from None
    except UnicodeDecodeError:
        raise PlannerInputError(f"{where}: not UTF-8 text (a ranking file is JSON: a list of groups)") from None
    except json.JSONDecodeError as err:
        raise PlannerInputError(f"{where}: not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(groups, list):
        raise PlannerInputError(f"{where}: expected a JSON list of groups, each with a 'layouts' list, "
                                f"got {_kind(groups)}")
    if not groups:
        raise PlannerInputError(f"{where}: no groups (an empty list)")
    errors, out, first_of = [], [], {}
    for n, group in enumerate(groups, 1):
        problems = check_group(group, n)
        errors += problems
        if problems:
            continue
        ident = group["id"] if isinstance(group.get("id"), str) else f"group {n}"
        if ident in first_of:  # one group counted twice skews every figure, as a runs row would
            errors.append(RowError(_group_label(group, n), "id", f"duplicate id {ident!r} (group {first_of[ident]} has it)"))
            continue
        first_of[ident] = n
        conf = group.get("confidence")
        out.append({**group, "id": ident, "confidence": "high" if conf is None else conf.strip().lower()})
    if errors:
        shown = "; ".join(str(e) for e in errors[:MAX_SHOWN_ERRORS])
        more = f"; and {len(errors) - MAX_SHOWN_ERRORS} more" if len(errors) > MAX_SHOWN_ERRORS else ""
        count = f"{len(errors)} problems: " if len(errors) > 1 else ""
        raise PlannerInputError(f"{where}: {count}{shown}{more}")
    return out


def _kind(value) -> str:
    """``schema._kind`` (text, true/false, int, ...) with a group file's objects and lists named."""
    return "an object" if isinstance(value, dict) else "a list" if isinstance(value, list) else schema_kind(value)


def _got(value) -> str:
    return f"got {json.dumps(value, default=str)[:40]} ({_kind(value)})"


def _group_label(group, number: Optional[int]) -> str:
    """'group 3 (id 'x')', as a runs error names 'row 3 (id 'x')'; 'group 'x'' without a number."""
    ident = group.get("id") if isinstance(group, dict) else None
    if number is None:
        return f"group {show(repr(ident))}" if isinstance(ident, str) else "group"
    return f"group {number} (id {show(repr(ident))})" if isinstance(ident, str) else f"group {number}"


def _shape_problems(group, number: Optional[int] = None) -> list:
    """What keeps ``group`` from being read as a group at all (``RowError``s; [] if none)."""
    label = _group_label(group, number)
    if not isinstance(group, dict):
        return [RowError(label, "", f"expected an object (one group: id, model, hardware, layouts, ...), {_got(group)}")]
    out = []
    if group.get("id") is not None and not isinstance(group["id"], str):
        out.append(RowError(label, "id", f"expected text, {_got(group['id'])}"))
    if not isinstance(group.get("model"), (str, dict, type(None))):
        out.append(RowError(label, "model", "expected a preset name or an object {name, shape fields}, "
                                            + _got(group["model"])))
    if not isinstance(group.get("hardware"), (dict, type(None))):
        out.append(RowError(label, "hardware", f"expected an object {{gpu, num_gpus, gpus_per_node}}, {_got(group['hardware'])}"))
    layouts = group.get("layouts")
    if not isinstance(layouts, list):
        said = "missing" if layouts is None else _got(layouts)
        return out + [RowError(label, "layouts", f"expected a list of measured layouts, each {{layout, measured}}, {said}")]
    if not layouts:
        return out + [RowError(label, "layouts", "no layouts (an empty list): give the group's measured layouts, "
                                                 "each {layout, measured}")]
    for i, entry in enumerate(layouts, 1):
        at = f"{label} layout {i}"
        if not isinstance(entry, dict):
            out.append(RowError(at, "", f"expected an object {{layout, measured}}, {_got(entry)}"))
            continue
        if not isinstance(entry.get("layout"), (dict, type(None))):
            out.append(RowError(at, "layout", "expected an object {tp, pp, dp, micro_batch_size, ...}, "
                                              + _got(entry["layout"])))
        if not isinstance(entry.get("measured"), (dict, type(None))):
            out.append(RowError(at, "measured", f"expected an object {{tokens_per_s_per_gpu}}, {_got(entry['measured'])}"))
    return out


def check_group(group, number: Optional[int] = None) -> list:
    """Everything wrong with a group (``RowError``s, each naming the group, the layout where the
    problem is the layout's own, the field and the value; [] if none): its shape, then each
    layout's row checked against the runs format as ``planner validate --runs`` checks a row
    (``schema.parse_row``), the measurement as a runs row's ``measured.tokens_per_s_per_gpu``. A
    layout with no measurement is no error (``rank_group`` lists it); one that is well formed but
    cannot be predicted (an unknown GPU, nothing fits) is none either: ``rank_group`` lists it
    with the reason, as ``planner validate`` lists such a row."""
    shape = _shape_problems(group, number)
    if shape:
        return shape
    label, out = _group_label(group, number), []
    for i, (entry, row) in enumerate(zip(group["layouts"], group_rows(group, number)), 1):
        checked = {k: v for k, v in row.items() if k != "reference"}
        measured = row["reference"]["tokens_per_s_per_gpu"]
        checked["measured"] = {"tokens_per_s_per_gpu": 1.0 if measured is None else measured}  # 1.0: none to check
        try:
            parse_row(checked, i)
        except RowError as err:
            located = _located(err, group, entry, f"{label} layout {i}", label)
            if str(located) not in map(str, out):  # a group's field is wrong in every layout: said once
                out.append(located)
    return out


def _located(err, group: dict, entry: dict, at_layout: str, at_group: str):
    """A runs-row error as the ranking file has it: the layout's own fields (``layout.*``,
    ``measured.*``, its ``source``) at the layout; the group's (model, hardware, seq_length,
    global_batch_size, framework, precision, confidence) at the group, under their group names."""
    top, _, rest = err.field.partition(".")
    key = rest.split(".")[0]
    if top == "measured" or (top == "layout" and key in (entry.get("layout") or {})) \
            or (top == "source" and entry.get("source")):
        return RowError(at_layout, err.field, err.reason)
    if not err.field:  # a check of the whole row: missing model or GPU (the group's), or a disagreement
        return RowError(at_group if err.reason.startswith("missing") else at_layout, "", err.reason)
    field = err.field
    if top == "layout":  # a group field the row's layout carries
        field = "seq_length" if key == "seq_len" else rest
    elif top == "model" and key == "seq_length" and group.get("seq_length") is not None:
        field = "seq_length"
    return RowError(at_group, field, err.reason)


def group_rows(group: dict, number: Optional[int] = None) -> list[dict]:
    """One runs-file row per layout of ``group`` (``number``: its place in the file, naming a
    group without an id). A group whose shape is no group's is a ``PlannerInputError``; the
    rows' values are checked by ``check_group``. The model is the group's as a runs row takes
    it: an object (the group's ``seq_length`` added as its ``seq_length``) or a preset name
    (the ``seq_length`` then the layout's ``seq_len``, as in a flat runs row)."""
    shape = _shape_problems(group, number)
    if shape:
        raise shape[0]
    model = group.get("model")
    base = {k: group[k] for k in ("framework", "precision") if group.get(k) is not None}
    base["global_batch_size"] = group.get("global_batch_size")
    if isinstance(model, dict):
        model = dict(model)
        if group.get("seq_length") is not None:
            model["seq_length"] = group["seq_length"]
    elif group.get("seq_length") is not None:  # a preset name, or none (refused as a runs row's)
        base["seq_len"] = group["seq_length"]
    ident = group["id"] if isinstance(group.get("id"), str) else f"group {number}" if number else "?"
    extra = {"confidence": group["confidence"]} if group.get("confidence") is not None else {}
    rows = []
    for i, entry in enumerate(group["layouts"]):
        measured = (entry.get("measured") or {}).get("tokens_per_s_per_gpu")
        rows.append({
            "id": f"{ident}#{i + 1}", "source": entry.get("source") or group.get("source") or {},
            "model": model, "hardware": group.get("hardware") or {},
            # A layout's own framework / precision, beside its "layout" (as the shipped file states them) or in it.
            "layout": {**base, **{k: entry[k] for k in ("framework", "precision") if entry.get(k) is not None},
                       **(entry.get("layout") or {})},
            "reference": {"tokens_per_s_per_gpu": measured}, **extra,
        })
    return rows


def kendall_tau(measured, predicted) -> Optional[float]:
    """Kendall's tau-b of two sequences (None below two items or when one is all ties)."""
    m, p = np.asarray(measured, float), np.asarray(predicted, float)
    i, j = np.triu_indices(len(m), 1)
    sm, sp = np.sign(m[i] - m[j]), np.sign(p[i] - p[j])
    n0 = len(i)
    denom = np.sqrt(float(np.count_nonzero(sm)) * float(np.count_nonzero(sp)))
    if n0 == 0 or denom == 0:
        return None
    return float(np.sum(sm * sp) / denom)


def order_stats(measured, predicted, decisive: float = DECISIVE) -> dict:
    """Kendall tau, decisive pairs and those ordered right, top-1 agreement, and the indices of
    the misordered decisive pairs (faster-measured first)."""
    m, p = np.asarray(measured, float), np.asarray(predicted, float)
    i, j = np.triu_indices(len(m), 1)
    apart = np.abs(m[i] - m[j]) / np.minimum(m[i], m[j]) > decisive
    right = np.sign(m[i] - m[j]) == np.sign(p[i] - p[j])
    wrong = [(int(a), int(b)) if m[a] > m[b] else (int(b), int(a)) for a, b, d, r in zip(i, j, apart, right) if d and not r]
    picked = m[int(np.argmax(p))]
    return {"kendall_tau": kendall_tau(m, p), "pairs": int(apart.sum()), "pairs_right": int((apart & right).sum()),
            "top1": bool(len(m) > 1 and (m.max() - picked) / picked <= decisive),
            "top1_strict": bool(len(m) > 1 and picked == m.max()), "misordered": wrong}


def rank_group(group: dict, with_intervals: bool = False, base_dir: Optional[Path] = None) -> dict:
    """Predictions and order figures of one group; layouts that cannot be predicted are listed.
    ``base_dir``: the ranking file's folder (model and cluster files a group names are relative
    to it, as a runs file's are to the runs file)."""
    from planner.validate.predict import validate_rows

    rows = group_rows(group)
    missing = [r for r in rows if not r["reference"]["tokens_per_s_per_gpu"]]
    results = validate_rows([r for r in rows if r not in missing], base_dir=base_dir)
    done = [r for r in results if r.error is not None]
    stated = {row["id"]: stated_knobs(row) for row in rows}
    out = {"id": group.get("id", "?"), "confidence": group.get("confidence"), "job": job_key(group),
           "layouts": [{"id": r.id, "layout": r.layout, "measured": r.reported, "predicted": r.predicted,
                        "error": r.error, "fits": r.fits, "values": {k: r.values.get(k) for k in KNOBS},
                        "stated": stated[r.id]}
                       for r in done],
           "unmapped": [{"id": r.id, "reason": r.reason} for r in results if r.error is None]
           + [{"id": r["id"], "reason": "no measured.tokens_per_s_per_gpu"} for r in missing]}
    if with_intervals and done:
        for lay, q in zip(out["layouts"], layout_intervals(rows, done, base_dir)):
            lay["interval"] = q
    stats = order_stats([r.reported for r in done], [r.predicted for r in done]) if len(done) > 1 else None
    out.update(stats or {"kendall_tau": None, "pairs": 0, "pairs_right": 0, "top1": None, "top1_strict": None,
                         "misordered": []})
    return out


STATED_KNOBS = ("tp", "pp", "dp", "cp", "ep", "vp", "micro_batch_size", "activation_recompute", "zero_stage",
                "sequence_parallel", "precision", "moe_dispatcher", "ep_comm_overlap")
"""The layout fields that make two measured layouts the same layout (``replicated_pairs``), with the
MoE dispatcher and EP overlap the MoE groups state; the framework and kernel texts are left out:
groups of one study often differ only in those."""


def job_key(group: dict) -> str:
    """What a group's layouts share: model shape, GPU, GPU count, sequence and batch."""
    model, hw = group.get("model") or {}, group.get("hardware") or {}
    shape = model if isinstance(model, str) else {k: v for k, v in model.items() if k != "name"}  # a preset: its name
    return json.dumps([shape, hw.get("gpu"), hw.get("num_gpus"),
                       group.get("seq_length"), group.get("global_batch_size")], sort_keys=True, default=str)


def stated_knobs(row: dict) -> tuple:
    """A runs-file row's layout as stated, on ``STATED_KNOBS`` only (text, in that order)."""
    lay = row.get("layout") or {}
    return tuple(str(lay.get(k)) for k in STATED_KNOBS)


def measured_gap(la: dict, lb: dict) -> float:
    """How far apart two layouts were measured, relative to the slower (``order_stats``' test)."""
    return abs(la["measured"] - lb["measured"]) / min(la["measured"], lb["measured"])


def decisive_pairs(layouts: list[dict], decisive: float = DECISIVE):
    """(a, b, planner right) for each pair of ``layouts`` measured more than ``decisive`` apart."""
    for a in range(len(layouts)):
        for b in range(a + 1, len(layouts)):
            la, lb = layouts[a], layouts[b]
            if measured_gap(la, lb) > decisive:
                yield la, lb, (la["measured"] > lb["measured"]) == (la["predicted"] > lb["predicted"])


def replicated_pairs(groups: list[dict], decisive: float = DECISIVE) -> dict:
    """Layout pairs measured in more than one group of the same job (groups of one study that
    differ in a kernel or framework setting, or a layout measured again): how often their
    measured order agrees, and the most decisive pairs any ranking could get right if it ordered
    a pair the same way in every group (per pair, the larger of its two vote counts; pairs of one
    layout measured twice count as lost). Also the planner's share right on the decisive pairs no
    other group contradicts (``uncontested``: measured once, or always in the same order) and on
    those another group measures the other way round (``contested``). ``groups``: ``rank_group``
    outputs."""
    votes: dict = {}
    instances = []  # (key, planner right)
    same_layout = 0
    for g in groups:
        for la, lb, right in decisive_pairs(g["layouts"], decisive):
            if la["stated"] == lb["stated"]:
                same_layout += 1  # one layout, two decisive measurements: no order to get right
                continue
            lo, hi = sorted((la, lb), key=lambda x: x["stated"])
            key = (g.get("job"), lo["stated"], hi["stated"])
            votes.setdefault(key, [0, 0])[0 if lo["measured"] > hi["measured"] else 1] += 1
            instances.append((key, right))
    n_decisive = sum(sum(v) for v in votes.values()) + same_layout
    repeated = [v for v in votes.values() if sum(v) > 1]
    contested = [right for key, right in instances if min(votes[key]) > 0]
    uncontested = [right for key, right in instances if min(votes[key]) == 0]
    return {"decisive": n_decisive, "reachable": sum(max(v) for v in votes.values()),
            "repeated_pairs": len(repeated), "repeated_measurements": sum(sum(v) for v in repeated),
            "repeated_agreeing": sum(max(v) for v in repeated),
            "uncontested": len(uncontested), "uncontested_right": sum(uncontested),
            "contested": len(contested), "contested_right": sum(contested)}


def format_replicated(r: dict) -> list[str]:
    return ["measured order across groups (the same two layouts measured in more than one group of one job, "
            "e.g. under another kernel setting):",
            f"  {r['repeated_pairs']} layout pairs, {r['repeated_measurements']} decisive measurements; "
            f"{_share(r['repeated_agreeing'], r['repeated_measurements'])} agree with their pair's majority order",
            f"  a ranking that orders each pair the same way in every group gets at most "
            f"{_share(r['reachable'], r['decisive'])} of the decisive pairs right",
            f"  planner: {_share(r['uncontested_right'], r['uncontested'])} of the pairs no group contradicts, "
            f"{_share(r['contested_right'], r['contested'])} of those another group measures the other way round"]


KNOBS = ("tp", "pp", "dp", "mbs", "cp", "vpp", "ep")
"""The layout knobs the bias table splits pairs by (``Layout`` names; EP for the MoE groups)."""


def layout_intervals(rows: list[dict], done: list, base_dir: Optional[Path] = None) -> list[Optional[tuple]]:
    """(p10, p90) tokens/s/GPU of each predicted layout: the 80% interval ``planner search``
    states for it (search.uncertainty: the folds' constants x the held-out errors)."""
    from costmodel.layout import LayoutBatch
    from costmodel.options import Layout
    from planner.validate.runs import map_run, parse_row
    from search.uncertainty import tokens_interval

    by_id = {r["id"]: r for r in rows}
    out = []
    for res in done:
        run = map_run(parse_row(by_id[res.id]), base_dir)
        fields = {f.name for f in dataclasses.fields(Layout)}
        batch = LayoutBatch.from_layouts([Layout(**{k: v for k, v in res.values.items() if k in fields})])
        q = tokens_interval(run.model, run.cluster, run.gpu, batch, predicted=np.array([res.predicted]))
        out.append((float(q[0, 0]), float(q[2, 0])))
    return out


def knob_bias(groups: list[dict], decisive: float = DECISIVE) -> dict:
    """Per knob, over the decisive pairs whose layouts differ in it: pairs, those ordered right,
    and the mean log bias log(predicted ratio / measured ratio), the ratios taken as the layout
    with the larger value of the knob over the other. A positive bias: the model favours the
    larger value more than the measurements do (e.g. TP +5%: it over-rates larger TP)."""
    table = {k: {"pairs": 0, "pairs_right": 0, "log_bias": []} for k in KNOBS}
    for g in groups:
        for la, lb, right in decisive_pairs(g["layouts"], decisive):
            for k in KNOBS:
                va, vb = (la.get("values") or {}).get(k), (lb.get("values") or {}).get(k)
                if va is None or vb is None or va == vb:
                    continue
                hi, lo = (la, lb) if va > vb else (lb, la)
                t = table[k]
                t["pairs"] += 1
                t["pairs_right"] += int(right)
                t["log_bias"].append(np.log(hi["predicted"] / lo["predicted"]) - np.log(hi["measured"] / lo["measured"]))
    return {k: {"pairs": t["pairs"], "pairs_right": t["pairs_right"],
                "share_right": t["pairs_right"] / t["pairs"] if t["pairs"] else None,
                "mean_log_bias": float(np.mean(t["log_bias"])) if t["log_bias"] else None} for k, t in table.items()}


def tie_stats(groups: list[dict], decisive: float = DECISIVE) -> dict:
    """How the 80% intervals (``layout_intervals``) separate measured pairs: a pair is called a
    tie when the two intervals overlap (``planner search`` marks such rows ``≈``). Pairs measured
    within the stated uncertainty (their measured gap below the larger relative half-width of the
    two intervals) should be called ties; decisive pairs beyond it should not."""
    inside = inside_tied = beyond = beyond_tied = n_decisive = decisive_tied = 0
    for g in groups:
        lays = [lay for lay in g["layouts"] if lay.get("interval")]
        for a in range(len(lays)):
            for b in range(a + 1, len(lays)):
                la, lb = lays[a], lays[b]
                (lo_a, hi_a), (lo_b, hi_b) = la["interval"], lb["interval"]
                tied = lo_a <= hi_b and lo_b <= hi_a
                half = max((hi_a - lo_a) / (2 * la["predicted"]), (hi_b - lo_b) / (2 * lb["predicted"]))
                gap = measured_gap(la, lb)
                if gap <= half:
                    inside, inside_tied = inside + 1, inside_tied + int(tied)
                else:
                    beyond, beyond_tied = beyond + 1, beyond_tied + int(tied)
                if gap > decisive:
                    n_decisive, decisive_tied = n_decisive + 1, decisive_tied + int(tied)
    return {"inside": inside, "inside_tied": inside_tied, "beyond": beyond, "beyond_tied": beyond_tied,
            "decisive": n_decisive, "decisive_tied": decisive_tied}


def format_bias(bias: dict) -> list[str]:
    lines = ["where the model leans: decisive pairs whose layouts differ in the knob; bias = mean of "
             "log(predicted / measured ratio), larger value over smaller (+: the model over-rates the larger value)",
             f"{'knob':<6}{'pairs':>7}{'right':>16}{'bias':>9}  leans to"]
    for k, t in bias.items():
        if not t["pairs"]:
            continue
        b = t["mean_log_bias"]
        lean = "-" if abs(b) < 0.005 else (f"larger {k.upper()}" if b > 0 else f"smaller {k.upper()}")
        lines.append(f"{k.upper():<6}{t['pairs']:>7}{_share(t['pairs_right'], t['pairs']):>16}{(np.exp(b) - 1) * 100:>+8.1f}%  {lean}")
    return lines


def format_ties(t: dict) -> list[str]:
    return ["ties (80% intervals of the two layouts overlap, as planner search marks them):",
            f"  pairs measured within the stated uncertainty: {t['inside']}, called ties {_share(t['inside_tied'], t['inside'])}",
            f"  pairs measured beyond it: {t['beyond']}, called ties {_share(t['beyond_tied'], t['beyond'])}",
            f"  decisive pairs (> {DECISIVE * 100:g}% apart): {t['decisive']}, called ties {_share(t['decisive_tied'], t['decisive'])}"]


SAME_RELEASE = ("high", "medium")
"""Group confidences measured on one software release (low: releases or clusters mixed)."""


def overall(groups: list[dict], confidences: Optional[tuple] = None) -> dict:
    """Pooled pairs, top-1 share and mean tau over the groups with two or more predictions
    (of those ``confidences``, when given)."""
    ranked = [g for g in groups if g["top1"] is not None and (confidences is None or g["confidence"] in confidences)]
    taus = [g["kendall_tau"] for g in ranked if g["kendall_tau"] is not None]
    pairs, right = sum(g["pairs"] for g in ranked), sum(g["pairs_right"] for g in ranked)
    top1, strict = sum(g["top1"] for g in ranked), sum(g["top1_strict"] for g in ranked)
    return {"groups": len(ranked), "pairs": pairs, "pairs_right": right,
            "pairs_right_share": right / pairs if pairs else None,
            "top1": top1, "top1_share": top1 / len(ranked) if ranked else None,
            "top1_strict": strict, "top1_strict_share": strict / len(ranked) if ranked else None,
            "mean_kendall_tau": float(np.mean(taus)) if taus else None, "decisive": DECISIVE,
            "confidences": list(confidences) if confidences else "all"}


def _share(n: int, d: int) -> str:
    """'60/67 (89.6%)': one decimal, so a share just under a goal (90%) is not printed as it."""
    return f"{n}/{d} ({n / d * 100:.1f}%)" if d else "-"


def _overall_line(label: str, total: dict) -> str:
    tau = "-" if total["mean_kendall_tau"] is None else f"{total['mean_kendall_tau']:+.2f}"
    return (f"{label}: {total['groups']} groups; pairs ordered right {_share(total['pairs_right'], total['pairs'])}; "
            f"top-1 {_share(total['top1'], total['groups'])} (strictly the fastest: "
            f"{_share(total['top1_strict'], total['groups'])}); mean Kendall tau {tau}")


def format_ranking(groups: list[dict], total: dict, path: str, same_release: Optional[dict] = None,
                   high: Optional[dict] = None, bias: Optional[dict] = None, ties: Optional[dict] = None,
                   replicated: Optional[dict] = None) -> str:
    lines = [f"ordering accuracy on ablation groups ({path}): each group's layouts as measured vs as predicted",
             f"(pairs: measured more than {DECISIVE * 100:g}% apart; top-1: the predicted fastest is measured fastest "
             f"or within {DECISIVE * 100:g}% of it)",
             "", f"{'group':<44}{'conf':>7}{'layouts':>8}{'Kendall tau':>13}{'pairs right':>13}{'top-1':>7}"]
    for g in groups:
        tau = "-" if g["kendall_tau"] is None else f"{g['kendall_tau']:+.2f}"
        top1 = "-" if g["top1"] is None else ("yes" if g["top1"] else "no")
        lines.append(f"{g['id'][:43]:<44}{str(g['confidence'])[:6]:>7}{len(g['layouts']):>8}{tau:>13}"
                     f"{g['pairs_right']:>7}/{g['pairs']:<5}{top1:>7}")
    lines += ["", _overall_line("all groups", total)]
    if same_release is not None and same_release["groups"] != total["groups"]:
        lines.append(_overall_line("one release (high, medium)", same_release))
    if high is not None and high["groups"] not in (0, total["groups"], (same_release or {}).get("groups")):
        lines.append(_overall_line("high confidence (every knob stated)", high))
    if bias is not None:
        lines += [""] + format_bias(bias)
    if ties is not None:
        lines += [""] + format_ties(ties)
    if replicated is not None and replicated["repeated_pairs"]:
        lines += [""] + format_replicated(replicated)
    lines += ["", f"{'group / layout (as planner validate predicts a row)':<64}{'measured':>10}{'predicted':>11}{'error':>8}"]
    for g in groups:
        lines.append(g["id"])
        for lay in g["layouts"]:
            label = f"  #{lay['id'].rsplit('#', 1)[-1]} {lay['layout']}"
            lines.append(f"{label[:63]:<64}{lay['measured']:>10.1f}{lay['predicted']:>11.1f}{lay['error'] * 100:>+7.1f}%")
    wrong = [(g, a, b) for g in groups for a, b in g["misordered"]]
    if wrong:
        lines += ["", "misordered pairs (measured faster first):"]
    for g, a, b in wrong:
        fa, fb = g["layouts"][a], g["layouts"][b]
        lines.append(f"  {g['id']}: {fa['layout']}  vs  {fb['layout']}: measured {fa['measured']:.0f} > {fb['measured']:.0f} "
                     f"({(fa['measured'] / fb['measured'] - 1) * 100:+.1f}%), predicted {fa['predicted']:.0f} vs "
                     f"{fb['predicted']:.0f} ({(fa['predicted'] / fb['predicted'] - 1) * 100:+.1f}%)")
    lines += [f"not predicted: {u['id']}: {u['reason']}" for g in groups for u in g["unmapped"]]
    return "\n".join(lines)


def run_ranking(path: Path, as_json: bool = False) -> None:
    import typer

    groups = [rank_group(g, with_intervals=True, base_dir=Path(path).parent) for g in load_groups(path)]
    total, same, high = overall(groups), overall(groups, SAME_RELEASE), overall(groups, ("high",))
    bias, ties, replicated = knob_bias(groups), tie_stats(groups), replicated_pairs(groups)
    if as_json:
        typer.echo(json.dumps({"groups": groups, "overall": total, "one_release": same, "high": high,
                               "knob_bias": bias, "ties": ties, "replicated": replicated}, indent=2))
    else:
        typer.echo(format_ranking(groups, total, str(path), same, high, bias, ties, replicated))
    if not any(g["layouts"] for g in groups):  # as planner validate --runs when no row maps: exit 3
        from planner.validate.report import NOTHING_MAPPED

        typer.echo(f"error: no layout of {show(path)} could be predicted (the reasons are listed)", err=True)
        raise typer.Exit(NOTHING_MAPPED)
