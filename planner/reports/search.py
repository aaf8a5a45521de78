"""The search's table, summary and files: what ``planner search`` prints and writes (also used
by ``search --from-launch`` and ``planner sweep``).

Imported when the CLI starts: nothing heavy at module level.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

COLUMNS = ("rank", "DP", "TP", "PP", "VPP", "CP", "EP", "ZeRO", "mbs", "GA", "recompute",
           "step time", "tok/s/GPU", "80% range", "env", "MFU", "mem/GPU", "headroom", "largest term")


def _fmt_seconds(s: float) -> str:
    if s >= 100:
        return f"{s:.0f} s"
    if s >= 1:
        return f"{s:.2f} s"
    return f"{s * 1e3:.0f} ms"


def _fmt_duration(s: float) -> str:
    if s >= 86400:
        return f"{s / 86400:.1f} d"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    return _fmt_seconds(s)


def _row(rec: dict, multi_hw: bool, extra_cols: list[str], splits: bool = False, env: str = "",
         etp: bool = False) -> list[str]:
    lay = rec["layout"]
    mem = rec["memory_gib"]
    row = [str(rec.get("rank", "")) + ("≈" if rec.get("ties_best") else "")]
    if multi_hw:
        row += [rec["gpu"], str(rec["gpus"])]
    row += [str(lay[k]) for k in ("dp", "tp", "pp", "vpp", "cp", "ep")]
    if etp:
        row.append(str(lay.get("etp", 1)))
    # Hybrid sharding shows its shard group: "3/8" = ZeRO-3 over groups of 8 data-parallel ranks.
    row.append(str(lay["zero"]) + (f"/{lay['dp_shard']}" if lay.get("dp_shard") else ""))
    row += [str(lay[k]) for k in ("mbs", "grad_accum")]
    if splits:
        st = lay.get("stage_layers")
        row.append(f"{st[0]}/{st[1] if len(st) > 2 else '-'}/{st[-1]}" if st else "-")
    from planner.reports.evaluate import recompute_label

    row.append(recompute_label(lay) + (" fp8" if lay.get("precision") == "fp8" else ""))
    row += [
        _fmt_seconds(rec["step_time_s"]),
        f"{rec['tokens_per_s_per_gpu']:,.0f}",
        _fmt_interval(rec.get("tokens_per_s_per_gpu_interval")),
        env,
        f"{rec['mfu'] * 100:.1f}%",
        f"{mem['peak']:.1f}/{mem['capacity']:.0f} GiB",
        f"{rec.get('headroom_gib', mem['capacity'] - mem['peak']):.1f} GiB",  # the JSON's headroom_gib
        rec.get("largest_term", ""),
    ]
    for c in extra_cols:
        v = rec.get(c)
        if v is None:
            row.append("-")
        elif c.endswith("_usd"):
            row.append(f"${v:,.2f}" if v < 1000 else f"${v:,.0f}")
        elif c == "run_time_s":
            row.append(_fmt_duration(v))
        elif c == "goodput":
            row.append(f"{v * 100:.1f}%")
        elif c == "run_energy_mwh":
            row.append(f"{v:,.0f}")
        else:
            row.append(f"{v:g}")
    return row


EXTRA_LABELS = {"cost_per_step_usd": "$/step", "run_time_s": "run time", "goodput": "goodput",
                "run_energy_mwh": "MWh", "run_cost_usd": "run cost"}


def _fmt_interval(q: Optional[dict]) -> str:
    return f"{q['p10']:,.0f}-{q['p90']:,.0f}" if q else "-"


def format_table(records: list[dict], multi_hw: bool = False, splits: bool = False,
                 env: Optional[list[str]] = None) -> str:
    """The results as a plain aligned table (``splits``: add the first/middle/last stage layers;
    ``env``: each record's envelope footnote marks)."""
    extra = [c for c in EXTRA_LABELS if any(c in r for r in records)]
    head = list(COLUMNS)
    # Expert TP is searched (1 or tp) and changes the launch (Megatron's --expert-tensor-parallel-size
    # defaults to tp): a column wherever a row runs it other than 1.
    etp = any((r["layout"].get("etp") or 1) != 1 for r in records)
    if etp:
        head.insert(head.index("EP") + 1, "ETP")
    if splits:
        i = head.index("GA") + 1
        head = head[:i] + ["layers f/m/l"] + head[i:]
    if multi_hw:
        head = head[:1] + ["GPU", "GPUs"] + head[1:]
    head += [EXTRA_LABELS[c] for c in extra]
    env = env or [""] * len(records)
    rows = [head] + [_row(r, multi_hw, extra, splits, e, etp) for r, e in zip(records, env)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    left = {"recompute", "largest term", "GPU", "env"}
    lines = []
    for r in rows:
        cells = [c.ljust(w) if h in left else c.rjust(w) for c, w, h in zip(r, widths, head)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def sampled_note(stats: dict) -> str:
    """For the table's header: a sampled result is said to be one where it is read first."""
    if stats.get("method") != "optuna":
        return ""
    auto = stats.get("auto")
    why = (f" (about {auto['layouts']:,}+ layouts: enumerating would take over {auto['limit_seconds']:.0f} s)"
           if auto else "")
    return f"\nSAMPLED by optuna, not enumerated{why}: maybe not the optimum; --method exhaustive prices every layout"


def format_summary(stats: dict) -> str:
    method = stats["method"]
    how = stats.get("engine", "")
    if method == "optuna":
        how = f"{stats.get('sampler')}, {stats.get('trials')} trials, seed {stats.get('seed')}"
        if stats.get("trials_requested"):
            how = (f"{stats.get('sampler')}, {stats['trials_requested']:,} trials asked for: capped at the "
                   f"{stats['space_cores']:,} degree cores of the space, each priced once")
        if stats.get("storage"):
            how += f"; study {stats['study_name']!r} in {stats['storage']}: {stats['study_trials']} trials in all"
    auto = " (auto)" if stats.get("method_requested") == "auto" else ""
    outside = f" ({stats['outside_envelope']:,} outside the envelope)" if stats.get("within_envelope") else ""
    line = (f"enumerated {stats['enumerated']:,}, feasible {stats['feasible']:,}, fitting memory "
            f"{stats['fits']:,}{outside}, {stats['seconds']:.2f} s, method {method}{auto} ({how}), "
            f"memory headroom {stats['memory_headroom'] * 100:g}%")
    from costmodel.layout import IMPLEMENTATION_DEFAULTS

    impl = {k: v for k, v in (stats.get("implementation") or {}).items() if v != IMPLEMENTATION_DEFAULTS.get(k)}
    if impl and stats.get("model") and not _is_moe(stats["model"]):
        impl = {k: v for k, v in impl.items() if not k.startswith("moe_")}  # moot on a dense model
    if stats.get("recompute_modules"):
        impl["recompute_modules"] = "+".join(stats["recompute_modules"])
    if impl:
        line += "\npriced with " + ", ".join(f"{k}={v}" for k, v in impl.items())
    from planner.reports.evaluate import bf16_caveat_of

    caveats = [bf16_caveat_of(gpu) for gpu in stats.get("gpu_types") or ()]
    if stats.get("precision", "bf16") == "bf16":
        line += "".join("\n" + c for c in caveats if c)
    if stats.get("calibration"):  # the profile and the constants it changed (planner.calibration_use)
        from planner.calibration_use import calibration_line

        line += "\n" + calibration_line(stats)
    if stats.get("framework"):
        from planner.reports.evaluate import framework_lines

        line += "\n" + "\n".join(framework_lines(stats["framework"]))
    domain = stats.get("domain")
    if domain and (domain["left_out"] or domain["rows_dropped"]):
        rules = sorted({**domain["rules"], **domain["rows_dropped"]}, key=lambda k: -(domain["rules"].get(k, 0)
                                                                                  + domain["rows_dropped"].get(k, 0)))
        dropped = sum(domain["rows_dropped"].values())
        line += (f"\nleft out {domain['left_out'] + dropped:,} fitting layouts that no format launching "
                 f"{domain['release']} ({', '.join(domain['formats'])}) writes (rules {', '.join(rules[:3])}"
                 f"{', ...' if len(rules) > 3 else ''})")
    return line


def format_nothing_fits(result) -> str:
    lines = [f"{getattr(result, 'headline', 'nothing fits')}: {result.message}"]
    if result.closest:
        lines.append("")
        lines.append("closest layouts (least memory per GPU):")
        multi = len(result.stats.get("gpu_types", [])) > 1 or len(result.stats.get("gpu_counts", [])) > 1
        lines.append(format_table(result.closest, multi))
        lines.append("")
        for rec in result.closest:
            lines.append(f"  #{rec['rank']}: {rec['exceeds_gib']:+.1f} GiB over the limit; stopped by {rec['stopped_by']}")
    removed = result.stats.get("removed_by_rule") or {}
    if removed:
        lines.append("")
        lines.append("candidates removed by rule:")
        for name, n in sorted(removed.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {name:<42}{n:>12,}")
    return "\n".join(lines)


def _csv_rows(records: list[dict]) -> tuple[list[str], list[list]]:
    from costmodel.result import MEMORY_TERMS, TIME_TERMS

    from costmodel.options import RECORDED_OPTIONS
    from planner.calibration_use import CONSTANTS_KEY, csv_constants

    lay_keys = ["gpus", "grad_accum"] + [o.name for o in RECORDED_OPTIONS]
    head = (["rank", "model", "gpu", "cluster"] + lay_keys
            + ["step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "fits", "largest_term"]
            + [f"mem_{k}_gib" for k in list(MEMORY_TERMS) + ["peak", "capacity"]]
            + [f"time_{k}_s" for k in TIME_TERMS]
            + ["cost_per_step_usd", "run_time_s", "run_cost_usd", "memory_limit_gib", "headroom_gib"]
            + ["goodput", "run_energy_mwh", "tokens_per_s_per_gpu_p10", "tokens_per_s_per_gpu_p90", "ties_best"]
            + ["calibration", CONSTANTS_KEY]  # what priced the row: --from reads it back
            + ["framework"])  # the --framework release that priced it (its launch formats, torchtitan's files)
    rows = []
    for r in records:
        lay = r["layout"]
        row = [r.get("rank"), r["model"], r["gpu"], r["cluster"]]
        row += [_csv_value(lay.get(k, r.get(k))) if k != "gpus" else r["gpus"] for k in lay_keys]
        row += [r["step_time_s"], r["tokens_per_s"], r["tokens_per_s_per_gpu"], r["mfu"], r["hfu"], r["fits"], r["largest_term"]]
        row += [r["memory_gib"].get(k) for k in list(MEMORY_TERMS) + ["peak", "capacity"]]
        row += [r["breakdown"].get(k) for k in TIME_TERMS]
        row += [r.get("cost_per_step_usd"), r.get("run_time_s"), r.get("run_cost_usd"), r.get("memory_limit_gib"),
                r.get("headroom_gib")]
        q = r.get("tokens_per_s_per_gpu_interval") or {}
        row += [r.get("goodput"), r.get("run_energy_mwh"), q.get("p10"), q.get("p90"), r.get("ties_best")]
        row += [r.get("calibration"), csv_constants(r.get(CONSTANTS_KEY))]
        row += [(r.get("framework") or {}).get("name") if isinstance(r.get("framework"), dict) else None]
        rows.append(row)
    return head, rows


def _csv_value(value):
    """A layout value as one CSV cell (a module list as core_attn+mlp)."""
    return "+".join(value) if isinstance(value, (list, tuple)) else value


def write_csv(path: Path, records: list[dict], flag: str = "--csv") -> None:
    """The records as CSV (one row each, every layout option in its ``Layout`` unit), written
    atomically."""
    import csv
    import io

    from planner.outputs import write_text_atomically

    head, rows = _csv_rows(records)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(head)
    w.writerows(rows)
    write_text_atomically(path, buf.getvalue(), flag)


def check_outputs(csv_file, export_dir, plot, force: bool) -> dict:
    """Every file the search will write, checked before it runs (``planner.outputs``)."""
    from planner.outputs import check_distinct, check_output_dir, check_output_file
    from planner.reports.plots import check_plot_path

    names = []
    if export_dir is not None:
        from planner.export import FILES

        names = [name for files in FILES.values() for name in files]
    check_distinct(("--csv", csv_file), ("--plot", plot))
    return {"csv": check_output_file(csv_file, "--csv", force),
            "export": check_output_dir(export_dir, "--export", force, names),
            "plot": check_output_file(check_plot_path(plot), "--plot", force)}


def json_default(o):
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def more_points(request, result) -> Optional[dict]:
    """What the search plot draws beyond the top rows, asked of the search by the command (the
    plot itself runs no search): per GPU type and count the fastest layouts (cloud and scaling
    curves), and the whole Pareto front. ``request``: the ``search.request.SearchRequest`` that
    gave ``result``. None when the search sampled (optuna: asking again would repeat the
    trials) or found nothing."""
    from dataclasses import replace

    from costmodel.goodput import parse_prices, price_for
    from planner.reports.plots import CLOUD_TOP, FRONT_TOP
    from search.api import search

    if not result.results or result.stats.get("method") != "exhaustive":
        return None
    stats = result.stats
    series = [(g, n) for g in stats.get("gpu_types", []) for n in stats.get("gpu_counts", [])]
    options = replace(request.options, method="exhaustive", progress=False)
    prices = parse_prices(request.ranking.price_per_gpu_hour)  # type -> USD; "*" for the rest
    per = {}
    for g, n in series:
        problem = replace(request.problem, gpus=n, **({"gpu": g} if request.problem.cluster is None else {}))
        # One GPU type per series: its own price, not the whole map (a price for another type is
        # refused by that search as naming a GPU type it does not price).
        price = price_for(prices, g) if prices else request.ranking.price_per_gpu_hour
        ranking = replace(request.ranking, pareto=False, top=max(CLOUD_TOP // len(series), 20),
                          price_per_gpu_hour=price)
        per[(g, n)] = search(replace(request, problem=problem, options=options, ranking=ranking)).results
    front = search(replace(request, options=options, ranking=replace(request.ranking, pareto=True, top=FRONT_TOP)))
    return {"per_series": per, "front": front.results}


def _is_moe(name: str) -> bool:
    """Whether the searched model (a catalog name, as the stats name it) has MoE layers."""
    from hardware_catalog import get_model
    from hardware_catalog.errors import PlannerInputError

    try:
        return get_model(name).moe is not None
    except (PlannerInputError, KeyError, ValueError):
        return True  # a model file: keep every setting shown
