"""Known-good reference layouts: published framework recipes next to the search's ranking.

``planner/data/recipes.json`` catalogs the layouts framework teams publish per model, GPU type
and GPU count (NeMo's performance-script configs, the Megatron-Bridge performance tables), each
with its source: repo, file, commit and the row quoted. When a search's problem matches one
(same GPU type, and the same model or a framework's variant of it: a preset of the same shape,
``model_differences``), ``reference_recipes`` prices that recipe as ``planner evaluate``
would, under the search's batch, precision and implementation settings, and says where it would
rank among the layouts the search found fitting and how far behind #1 it is predicted.

Matching: the recipe at the search's GPU count if there is one, else the nearest count with DP
scaled (TP, PP, CP, VPP, EP and micro-batch kept; the notes say so); a recipe in the search's
precision before one in another, one of the searched model before a variant's (whose notes name
what differs: it is priced as the searched model); at most ``SHOWN`` distinct layouts per GPU type.
"""

from __future__ import annotations

import functools
import json
import math
from importlib import resources

SHOWN = 2
"""Distinct recipe layouts shown per GPU type."""
_DEGREES = ("tp", "pp", "cp", "vpp", "mbs")


@functools.lru_cache(maxsize=1)
def load_recipes() -> tuple:
    """The catalog's recipes (``planner/data/recipes.json``)."""
    return tuple(json.loads(resources.files("planner").joinpath("data/recipes.json").read_text())["recipes"])


def _layout_key(recipe: dict) -> tuple:
    lay = recipe["layout"]
    return tuple(lay.get(k) for k in ("tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "zero", "recompute",
                                      "recompute_layers")) + (tuple(lay.get("recompute_modules") or ()),)


def matching(model: str, gpu: str, counts: list[int], precision: str, seq_len: int,
             best_count: int) -> list[tuple[dict, int]]:
    """(recipe, GPU count to price it at) for every recipe of ``model`` on ``gpu``, best match
    first, one per distinct layout, at most ``SHOWN``. The count: the recipe's own where the
    search covers it, else the count of the search's #1 (DP scaled)."""
    found = []
    for r in load_recipes():
        if r["gpu"] != gpu or not (r["model"] == model or model_differences(r["model"], model) is not None):
            continue
        count = r["gpus"] if r["gpus"] in counts else best_count
        order = (r["model"] != model, r["precision"] != precision, count != r["gpus"], abs(math.log(count / r["gpus"])),
                 r["seq_len"] != seq_len, r.get("measured") is None)
        found.append((order, r, count))
    out, seen = [], set()
    for _, r, count in sorted(found, key=lambda x: x[0]):
        if _layout_key(r) in seen:
            continue
        seen.add(_layout_key(r))
        out.append((r, count))
    return out[:SHOWN]


_SAME_MODEL = ("num_layers", "hidden_size", "num_attention_heads", "kv_heads", "head_size", "ffn_hidden_size",
               "experts", "multi-latent")
"""What ``planner.launch.models.differences`` may name that makes another model, not a variant of it."""


@functools.lru_cache(maxsize=None)
def model_differences(recipe_model: str, model: str) -> tuple | None:
    """The architecture fields in which the recipe's model preset differs from the searched one,
    when both have the same shape and vocabulary (a framework's variant of the model, e.g. NeMo
    2.0's GPT-3 175B without dropout); None when they do not or a name is not a preset."""
    from hardware_catalog import get_model
    from hardware_catalog.errors import PlannerInputError
    from planner.launch.models import differences

    try:
        a, b = get_model(recipe_model), get_model(model)
    except PlannerInputError:
        return None
    fields = tuple(d.split()[0] for d in differences(a, b))
    if a.vocab_size != b.vocab_size or any(f in _SAME_MODEL for f in fields):
        return None
    return fields


def _fixed(recipe: dict, dp: int, problem: dict) -> dict:
    lay = recipe["layout"]
    fixed = {"dp": dp, "ep": lay.get("ep", 1), "etp": lay.get("etp", 1), "zero": lay.get("zero", 1),
             "recompute": lay.get("recompute", "none"), "precision": problem["precision"], "gbs": problem["gbs"],
             "seq_len": problem["seq_len"], **problem["implementation"]}
    if lay.get("recompute_layers"):
        fixed["recompute_layers"] = lay["recompute_layers"]
    if lay.get("recompute_modules"):
        fixed["recompute_modules"] = tuple(lay["recompute_modules"])
    return fixed


def _priced(recipe: dict, specs: tuple, gpus: int, problem: dict, calib=None):
    """(BatchResult of one layout, None) or (None, why it cannot run here); ``calib``: the
    search's constants (None: the shipped ones)."""
    from costmodel import Layout, evaluate_batch
    from costmodel.calibration import DEFAULT
    from hardware_catalog.errors import PlannerInputError
    from search.grid import candidate_grid
    from search.rules import check_layout

    model, cluster, gpu = specs
    lay = recipe["layout"]
    split = lay["tp"] * lay["pp"] * lay["cp"]
    if gpus % split:
        return None, f"{gpus:,} GPUs do not split into TP{lay['tp']} x PP{lay['pp']} x CP{lay['cp']}"
    fixed = _fixed(recipe, gpus // split, problem)
    batch = candidate_grid(model, cluster, gpu, gpus, {k: [lay.get(k, 1)] for k in _DEGREES}, fixed)
    if len(batch) == 0:
        try:
            check_layout(model, cluster, gpu, Layout(**{k: lay.get(k, 1) for k in _DEGREES}, **fixed), gpus=gpus)
        except PlannerInputError as err:
            return None, str(err)
        return None, "breaks a rule of the search"
    return evaluate_batch(model, cluster, batch, gpu=gpu, calib=calib or DEFAULT), ""


def _notes(recipe: dict, gpus: int, problem: dict) -> list[str]:
    notes = []
    if recipe["model"] != problem["model"]:
        diff = model_differences(recipe["model"], problem["model"])
        notes.append(f"model differs: recipe {recipe['model']} (its {', '.join(diff) or 'name'} differs), priced as the "
                     f"search's {problem['model']}")
    if gpus != recipe["gpus"]:
        split = recipe["layout"]["tp"] * recipe["layout"]["pp"] * recipe["layout"]["cp"]
        # Where TP x PP x CP does not divide the GPUs there is no DP to scale to (the reason says so).
        notes.append(f"published for {recipe['gpus']:,} GPUs" + (f"; DP scaled to {gpus:,} GPUs (DP {recipe['gpus'] // split} "
                                                                 f"-> {gpus // split})" if gpus % split == 0 else ""))
    for what, key, fmt in (("batch", "gbs", "{:,} sequences"), ("sequence", "seq_len", "{:,} tokens"),
                           ("precision", "precision", "{}")):
        if recipe[key] != problem[key]:
            notes.append(f"{what} differs: recipe {fmt.format(recipe[key])}, priced at the search's {fmt.format(problem[key])}")
    return notes + list(recipe.get("notes") or [])


def price_recipe(result, recipe: dict, specs: tuple, gpus: int, problem: dict) -> dict:
    """One recipe priced for the search ``result``: its record (or why it cannot run), rank among
    the fitting layouts, how far behind #1, interval, envelope flags and notes."""
    from costmodel.record import result_record
    from search.exhaustive import memory_limit_gib
    from search.ranking import annotate_batch

    model, cluster, gpu = specs
    out = {"recipe": {k: recipe[k] for k in ("id", "framework", "gpus", "gbs", "seq_len", "precision", "layout",
                                               "source", "measured")}, "gpus": gpus,
           "notes": _notes(recipe, gpus, problem)}
    res, why = _priced(recipe, specs, gpus, problem, getattr(result, "calib", None))
    if res is None:
        out["reason"] = why
        return out
    rec = result_record(model, cluster, gpu, res, 0)
    annotate_batch(rec, model, cluster, gpu, res.batch)
    rec.update(result.objectives.extras(rec["step_time_s"], rec["tokens_per_s"], rec["gpus"], rec["gpu"]))
    limit = memory_limit_gib(gpu.memory_gib, problem["memory_headroom"])
    fits = rec["memory_gib"]["peak"] <= limit
    rec["memory_limit_gib"], rec["headroom_gib"] = limit, limit - rec["memory_gib"]["peak"]  # as search rows
    best = result.results[0]
    left_out = _left_out(result, rec, res.batch, specs, problem) if fits else None
    fits_ranked = fits and left_out is None  # ranked only among the layouts the search kept
    rec["rank"] = result.rank_of(rec) if fits_ranked else None
    out.update(record=rec, fits=bool(fits), rank=rec["rank"], fitting=int(len(result.fitting_keys)),
               behind_best=rec["tokens_per_s_per_gpu"] / best["tokens_per_s_per_gpu"] - 1,
               ties_best=bool(fits_ranked) and _overlaps(rec, best, result.objectives),
               outside_search=outside_search(rec["layout"], problem.get("pins") or {}),
               sampled=result.stats.get("method") == "optuna")
    if not fits:
        out["reason"] = f"needs {rec['memory_gib']['peak']:.1f} GiB per GPU, over the {limit:.1f} GiB limit"
    elif left_out:
        out["reason"] = left_out
    return out


def _left_out(result, rec: dict, batch, specs: tuple, problem: dict):
    """Why the search would have left the recipe's layout out of its ranking although it fits
    (None: it ranks it): with ``--framework R``, no format that launches R writes it (the search's
    domain, ``planner.export.domain``: its rows are checked the same way); with
    ``--within-envelope``, a mechanism outside the validated envelope (``search.envelope``)."""
    model, cluster, gpu = specs
    domain = result.stats.get("domain")
    if domain:
        from planner.export.domain import launch_domain
        from planner.frameworks.releases import get_release

        launch = launch_domain(get_release(domain["release"]))
        why = launch.refused(rec, model, cluster) if launch is not None else None
        if why is not None:
            return f"{domain['release']} cannot launch it (rule {why[0]})"
    if result.stats.get("within_envelope"):
        from search.envelope import LAYOUT, Job, columns_of, flags

        outside = flags(Job(model, gpu, int(rec["gpus"]), int(problem["seq_len"])), columns_of(batch), scope=LAYOUT)
        if outside:
            return f"outside the validated envelope ({outside[0]['reason']})"
    return None


def _overlaps(rec: dict, best: dict, objectives) -> bool:
    """The recipe's 80% interval on the ranked quantity (``objectives.rank_value``: step time,
    GPU-seconds, cost, energy or time per token) overlaps #1's, on either side: unlike a search
    row, a recipe may be predicted faster than #1. Each record's quantity scales inversely with
    its tokens/s/GPU (``search.ranking.key_span``, as a search row's)."""
    import numpy as np

    from search.ranking import key_span

    def span(r):
        key = float(np.asarray(objectives.rank_value(r["step_time_s"], r["tokens_per_s"], r["gpus"], r["gpu"])))
        q = r["tokens_per_s_per_gpu_interval"]
        return key_span(key, r["tokens_per_s_per_gpu"], q["p10"], q["p90"])

    (a_lo, a_hi), (b_lo, b_hi) = span(rec), span(best)
    return a_lo <= b_hi and b_lo <= a_hi


def reference_recipes(result) -> list[dict]:
    """The matching recipes of a search result, priced (empty when nothing matches)."""
    stats = result.stats
    if not result.results or stats.get("objectives"):
        return []
    model = result.specs[0][0]
    problem = {"model": model.name, "gbs": stats["gbs"], "seq_len": stats["seq_len"], "precision": result.results[0]["layout"]["precision"],
               "implementation": stats.get("implementation") or {}, "memory_headroom": stats["memory_headroom"],
               "pins": stats.get("pins") or {}}
    out = []
    for gpu_name in stats["gpu_types"]:
        # The specs the search priced (a cluster file's cluster has no catalog name to look up).
        i = next((i for i, r in enumerate(result.results) if r["gpu"] == gpu_name), None)
        if i is None:
            continue
        best, (_, cluster, gpu) = result.results[i], result.specs[i]
        specs = (model, cluster, gpu)
        for recipe, gpus in matching(model.name, gpu_name, stats["gpu_counts"], problem["precision"], stats["seq_len"],
                                     best["gpus"]):
            out.append(price_recipe(result, recipe, specs, gpus, problem))
    return out


def outside_search(layout: dict, pins: dict) -> str:
    """Which of the recipe's values the search did not try: knobs the user pinned to another
    value first (``stats["pins"]``, option names), then values outside the default domains."""
    from costmodel.options import OPTIONS_BY_NAME

    found = [f"{OPTIONS_BY_NAME[k].flag} {layout[k]} (pinned {v})" for k, v in pins.items()
             if k in OPTIONS_BY_NAME and k in layout and layout[k] is not None and layout[k] != v]
    return ", ".join(found) or outside_domain(layout, default="")


def outside_domain(layout: dict, default: str = "a setting outside its domain") -> str:
    """Which of the recipe's values the search's default domains leave out (``search.space``);
    ``default`` where none is."""
    from search.space import MBS_CHOICES, VPP_MAX

    found = []
    if layout.get("vpp", 1) > VPP_MAX:
        found.append(f"VPP {layout['vpp']} > {VPP_MAX}")
    if layout.get("mbs", 1) not in MBS_CHOICES:
        found.append(f"micro-batch {layout['mbs']}")
    if layout.get("recompute_layers"):
        found.append(f"full recompute of {layout['recompute_layers']} layers per stage")
    return ", ".join(found) or default


def recipe_source(recipe: dict) -> str:
    """"NVIDIA/NeMo scripts/performance/.../model_configs_h100.csv @ ae861a9c"."""
    s = recipe["source"]
    return f"{s['repo']} {s['file']} @ {s['commit'][:8]}"


def format_recipes(entries: list[dict], fitting_label: str) -> list[str]:
    """Footnote lines under the table for each recipe row."""
    lines = []
    for e in entries:
        r = e["recipe"]
        head = f"({format(e['rank'], ',') if e.get('rank') else '-'}) published recipe {r['id']} ({r['framework']}; {recipe_source(r)})"
        lines.append(head)
        if e.get("rank"):
            tie = "; its interval overlaps #1's" if e["ties_best"] else ""
            outside = e.get("outside_search")
            why = (f"it uses a value the search does not try: {outside}" if outside else
                   "the sampled search did not try it" if e.get("sampled") else
                   f"it uses a value the search does not try: {outside_domain(r['layout'])}")
            where = ("level with #1" if abs(e["behind_best"]) < 0.005 else
                     f"{-e['behind_best'] * 100:.0f}% behind #1" if e["behind_best"] <= 0 else
                     f"{e['behind_best'] * 100:.0f}% ahead of #1 ({why})")
            lines.append(f"    rank {e['rank']:,} of {e['fitting']:,} {fitting_label}; predicted {where} in tokens/s/GPU{tie}")
        elif e.get("reason"):
            lines.append(f"    not ranked: {e['reason']}")
        if r.get("measured") and not any(n.startswith(("published for", "batch", "sequence", "precision")) for n in e["notes"]):
            lines.append(f"    measured {r['measured']['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU at this setup")
        lines += [f"    {n}" for n in e["notes"] if not n.startswith("zero:")]  # all of them in --json
    return lines
