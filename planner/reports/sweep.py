"""How ``planner sweep`` shows its table: aligned text, JSON, CSV, and a plot (matplotlib)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from hardware_catalog.errors import PlannerInputError
from planner.reports.run import three_figures  # small amounts: a run of 0.05 MWh or $0.80 is not "0" or "$0"

SCENARIO_COLUMNS = ("model", "GPU", "GPUs", "seq", "gbs")
LAYOUT_COLUMNS = ("DP", "TP", "PP", "VPP", "CP", "EP", "ZeRO", "mbs", "GA", "recompute")
LEFT = {"model", "GPU", "recompute", "env", "note", "scaling"}


def _scenario_cells(row: dict) -> list[str]:
    s = row["scenario"]
    seq = row.get("seq_len_used") or s["seq_len"]
    gbs = row.get("gbs_used") or s["gbs"]
    return [s["model"], s["gpu"], str(s["gpus"]), str(seq or "-"), str(gbs or "-")]


def _result_cells(row: dict, extra: list[str]) -> list[str]:
    from planner.reports.search import _fmt_duration, _fmt_seconds
    from planner.reports.evaluate import recompute_label

    best = row.get("best")
    if not best:
        return ["-"] * (len(LAYOUT_COLUMNS) + 4 + len(extra))
    lay, mem = best["layout"], best["memory_gib"]
    cells = [str(lay[k]) for k in ("dp", "tp", "pp", "vpp", "cp", "ep", "zero", "mbs", "grad_accum")]
    cells.append(recompute_label(lay) + (" fp8" if lay.get("precision") == "fp8" else ""))
    cells += [_fmt_seconds(best["step_time_s"]), f"{best['tokens_per_s_per_gpu']:,.0f}",
              f"{best['mfu'] * 100:.1f}%", f"{mem['peak']:.1f}/{mem['capacity']:.0f} GiB"]
    for c in extra:
        v = row.get(c)
        if v is None:
            cells.append("-")
        elif c == "run_time_s":
            cells.append(_fmt_duration(v))
        elif c == "usd_per_mtok":
            cells.append(f"${v:,.3f}" if v >= 1 else f"${three_figures(v)}")
        elif c == "goodput":
            cells.append(f"{v * 100:.1f}%")
        elif c == "energy_mwh":
            cells.append(f"{v:,.0f}" if v >= 100 else three_figures(v))
        else:
            cells.append(f"${v / 1e6:,.2f}M" if v >= 1e6 else f"${v:,.0f}" if v >= 100 else f"${three_figures(v)}")
    return cells


def _note(row: dict) -> str:
    """Why a scenario has no layout: the search's reason (it says 'no layout ...' already)."""
    reason = row.get("reason", "")
    return reason if row["status"] == "nothing fits" and reason else f"{row['status']}: {reason}"


EXTRA = {"goodput": "goodput", "run_time_s": "time to train", "energy_mwh": "MWh", "usd_per_mtok": "$/M tok",
         "run_cost_usd": "run cost"}
"""Columns shown where some row has them: the run (``costmodel.goodput``: wall time with failures,
checkpoints and restarts) and the cost."""


def _mark(row: dict) -> str:
    marks = []
    if row.get("optimum"):
        marks.append("* best")
    if row.get("diminishing"):
        marks.append("< stops paying")
    return ", ".join(marks)


def format_table(rows: list[dict]) -> str:
    """One line per scenario: the scenario, its best layout, speed, memory, time to train and cost
    (where known); scenarios with no layout get a note (the reason)."""
    extra = [c for c in EXTRA if any(c in r for r in rows)]
    head = list(SCENARIO_COLUMNS) + list(LAYOUT_COLUMNS) + ["step time", "tok/s/GPU", "MFU", "mem/GPU"]
    reasons = _envelope_reasons(rows)
    if reasons:
        head.append("env")
    head += [EXTRA[c] for c in extra]
    scaling = any(r.get("optimum") or r.get("diminishing") for r in rows)
    if scaling:
        head.append("scaling")
    notes = any(not r.get("best") for r in rows)
    if notes:
        head.append("note")
    body = []
    for r in rows:
        cells = _scenario_cells(r) + _result_cells(r, extra)
        if reasons:  # as planner search's env column: the best layout's mechanisms outside the envelope
            marks = "".join(f"[{reasons.index(x) + 1}]" for x in _layout_flags(r))
            cells.insert(len(SCENARIO_COLUMNS) + len(LAYOUT_COLUMNS) + 4, marks)
        if scaling:
            cells.append(_mark(r))
        if notes:
            cells.append("" if r.get("best") else _note(r))
        body.append(cells)
    table = [head] + body
    widths = [max(len(line[i]) for line in table) for i in range(len(head) - notes)]
    lines = []
    for line in table:
        cells = [c.ljust(w) if h in LEFT else c.rjust(w) for c, w, h in zip(line, widths, head)]
        if notes:
            cells.append(line[-1])
        lines.append("  ".join(cells).rstrip())
    if reasons:
        lines.append("env: the best layout lies outside what the reference runs cover (search/data/envelope.json), "
                     "as planner search marks it")
        lines += [f"  [{i}] {x}" for i, x in enumerate(reasons, 1)]
    return "\n".join(lines)


def _layout_flags(row: dict) -> list[str]:
    """The reasons of the best layout's envelope flags of layout scope (``search.envelope.flags``)."""
    return [f["reason"] for f in ((row.get("best") or {}).get("envelope") or []) if f.get("scope") == "layout"]


def _envelope_reasons(rows: list[dict]) -> list[str]:
    """Each distinct reason of the rows' layout flags, in order of first appearance."""
    return list(dict.fromkeys(x for r in rows for x in _layout_flags(r)))


_OBJECTIVE_WORDS = {"step-time": "step time", "tokens-per-gpu": "tokens/s/GPU", "time-to-train": "time to train",
                   "cost": "cost of the run", "energy": "energy of the run"}


def format_scaling(stats: dict) -> str:
    """Per series: the best GPU count by the objective and where adding GPUs stops paying (the
    share of the GPUs added that turned into speed, step by step)."""
    lines = [""]
    pairs = [(sc["model"], sc["gpu"]) for sc in stats["scaling"]]
    for sc in stats["scaling"]:
        word = _OBJECTIVE_WORDS[sc["objective"]]
        best = f"{sc['optimum_gpus']:,} GPUs" if sc["optimum_gpus"] else "none"
        # Series of one model and GPU at several sequences or batches: named as the plot's legend does.
        which = (f" (seq {sc['seq_len']}, gbs {sc['gbs']})"
                 if pairs.count((sc["model"], sc["gpu"])) > 1 and sc.get("seq_len") else "")
        line = f"{sc['model']} on {sc['gpu']}{which}: best by {word} at {best}"
        if sc.get("marginal"):
            if sc["diminishing_from_gpus"]:
                line += (f"; adding GPUs stops paying from {sc['diminishing_from_gpus']:,} (less than "
                         f"{sc['threshold'] * 100:.0f}% of the GPUs added turn into speed)")
            else:
                line += f"; every step up still turns at least {sc['threshold'] * 100:.0f}% of the GPUs added into speed"
            steps = ", ".join(f"{m['from']:,}->{m['to']:,} {m['speedup']:.2f}x ({m['efficiency'] * 100:.0f}%)"
                              for m in sc["marginal"])
            what = "step time, count by count" if sc.get("timed_by") == "step" else "time to train, step by step"
            line += f"\n  {what} (speed-up, share of the added GPUs it is worth): {steps}"
        lines.append(line)
    return "\n".join(lines)


def constants_line(spec: dict) -> str:
    """Which constants priced every scenario: the shipped ones, or a calibration profile's (those it changed)."""
    cal = spec.get("calibration")
    if not cal:
        return "constants: shipped (costmodel/calibration.py)"
    from planner.calibration_use import calibration_line

    return calibration_line({"calibration": cal["profile"], "calibration_constants": cal["constants"],
                             "calibration_warning": "\n".join(calibration_warnings(spec)) or None})


def calibration_warnings(spec: dict) -> list[str]:
    """One line per GPU type of the sweep that the calibration profile's runs did not use (its
    constants were fitted to other GPUs' kernels); empty without a profile or when it covers them all."""
    if not spec.get("calibration"):
        return []
    from planner.sweep import SweepSpec

    applied = SweepSpec.from_dict(spec).applied_calibration()
    return [w for w in map(applied.gpu_warning, spec.get("gpu") or ()) if w]


def format_summary(stats: dict, worker: Optional[dict]) -> str:
    spec = stats["spec"]
    n, done = stats["scenarios"], stats["done"]
    line = f"study {stats['study']!r} ({stats['storage']}): {done} of {n} scenarios done"
    if stats.get("duplicates"):
        line += f", {stats['duplicates']} done twice"
    line += f"; memory headroom {spec['memory_headroom'] * 100:g}%"
    if stats.get("train_tokens"):
        from planner.reports.evaluate import human_count

        line += f"; {human_count(stats['train_tokens'])} training tokens"
    if stats.get("prices"):
        prices = stats["prices"]
        # "*" is the price of every GPU type not named: "others" only beside named ones.
        line += "; $/GPU-hour " + ", ".join(
            f"{('others' if len(prices) > 1 else 'every GPU type') if k == '*' else k} {v:g}" for k, v in prices.items())
    if worker and not worker["ran"] and not worker["skipped"] and done == n:
        line += f"\nthis worker ({worker['worker']}) ran no search: every scenario was done before it started"
    elif worker:
        line += (f"\nthis worker ({worker['worker']}) ran {worker['ran']} search{'' if worker['ran'] == 1 else 'es'} in {worker['seconds']:.1f} s; "
                 f"skipped {worker['skipped']} done or held by others")
        if worker.get("queued"):
            line += f"; queued {worker['queued']} left undone"
        if worker.get("reclaimed"):
            line += f"; failed {worker['reclaimed']} RUNNING trials (--reclaim-running)"
    if done < n:
        line += (f"\n{n - done} scenarios not done: {stats.get('trials_running', 0)} running in other workers; "
                 f"run the same command again to finish them (with --reclaim-running if their workers died)")
    return line + "\n" + constants_line(spec)


def to_json(rows: list[dict], stats: dict) -> dict:
    """``{"scenarios": [...], "stats": {...}}``; the stats state ``calibration_warning`` (as ``search
    --json``'s do) when the profile's runs used other GPU types than some of the sweep's."""
    warnings = calibration_warnings(stats["spec"]) if stats.get("spec") else []
    if warnings:
        stats = {**stats, "calibration_warning": "\n".join(warnings)}
    return {"scenarios": rows, "stats": stats}


def write_csv(path: Path, rows: list[dict]) -> None:
    """One CSV row per scenario (``csv_text``) written to ``path`` atomically."""
    from planner.outputs import write_text_atomically

    write_text_atomically(path, csv_text(rows), "--csv")


def csv_text(rows: list[dict]) -> str:
    """One CSV row per scenario: the axes, status and reason, then ``planner search --csv``'s
    columns for its best layout (empty when none), and the time / cost columns."""
    import csv
    import io

    from planner.reports.search import _csv_rows

    fake = {"layout": {}, "memory_gib": {}, "breakdown": {}}
    head, _ = _csv_rows([])
    scen = ["scenario_model", "scenario_gpu", "scenario_gpus", "seq_len_used", "gbs_used", "tokens_per_batch",
            "status", "reason"]
    out = []
    for r in rows:
        s = r["scenario"]
        best = dict(r["best"] or fake)
        # The run's figures in the search's own columns (goodput, run_time_s, run_cost_usd), once.
        for k in ("run_time_s", "run_cost_usd", "goodput"):
            best[k] = r.get(k)
        cells = _csv_rows([best])[1][0] if r.get("best") else [None] * len(head)
        out.append([s["model"], s["gpu"], s["gpus"], r.get("seq_len_used"), r.get("gbs_used"),
                    s["tokens_per_batch"], r["status"], r.get("reason", "")] + cells
                   + [r.get("usd_per_mtok"), r.get("energy_mwh")])
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(scen + head + ["usd_per_mtok", "energy_mwh"])
    w.writerows(out)
    return buf.getvalue()


def not_plotted(rows: list[dict]) -> Optional[str]:
    """Why ``plot`` would draw nothing for ``rows`` (no scenario found a layout), or None."""
    if _series(rows):
        return None
    if rows:
        return "no scenario found a layout that fits"
    return "no scenario is done yet"


def _series(rows: list[dict]) -> dict:
    """(model, gpu, seq, gbs) -> sorted [(gpus, row)] of the rows that found a layout."""
    out: dict = {}
    for r in rows:
        if not r.get("best"):
            continue
        s = r["scenario"]
        key = (s["model"], s["gpu"], r.get("seq_len_used"), r.get("gbs_used"))
        out.setdefault(key, []).append((s["gpus"], r))
    return {k: sorted(v, key=lambda p: p[0]) for k, v in sorted(out.items(), key=lambda kv: str(kv[0]))}


def _right_metric(rows: list[dict]) -> tuple[str, str, float]:
    if any("run_cost_usd" in r for r in rows):
        return "run_cost_usd", "cost of the run (million USD)", 1e-6
    if any("usd_per_mtok" in r for r in rows):
        return "usd_per_mtok", "USD per million tokens", 1.0
    if any("run_time_s" in r for r in rows):
        return "run_time_s", "time to train (days)", 1 / 86400
    return "step_time_s", "step time (s)", 1.0


def plot(path: Path, rows: list[dict], title: str = "", objective: Optional[str] = None) -> None:
    """Panels against the GPU count: tokens/s per GPU, and cost (or time to train, or step
    time); with a run (``--train-tokens``): days to train and goodput, each series' optimum
    by ``objective`` starred and the count where adding GPUs stops paying dashed. One line per
    model / GPU type / sequence length / batch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator

    series = _series(rows)
    if not series:
        raise PlannerInputError(f"--plot {path}: no scenario found a layout that fits; nothing to plot")
    key, label, scale = _right_metric(rows)
    run = any("goodput" in r for r in rows)
    multi_seq = len({k[2:] for k in series}) > 1
    if run:
        fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 5.2))
        key, label, scale = "run_time_s", "time to train with goodput (days)", 1 / 86400
    else:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 5.2))
        ax3 = None
    for (model, gpu, seq, gbs), points in series.items():
        name = f"{model} on {gpu}" + (f", seq {seq}, gbs {gbs}" if multi_seq else "")
        xs = [g for g, _ in points]
        line, = ax1.plot(xs, [r["best"]["tokens_per_s_per_gpu"] for _, r in points], marker="o", label=name)
        ys = [(r.get(key) if key != "step_time_s" else r["best"]["step_time_s"]) for _, r in points]
        ax2.plot(xs, [y * scale if y is not None else float("nan") for y in ys], marker="o", color=line.get_color())
        if ax3 is not None:
            ax3.plot(xs, [r.get("goodput", float("nan")) * 100 for _, r in points], marker="o", color=line.get_color())
        for g, r in points:
            for ax, y in ((ax2, (r.get(key) or float("nan")) * scale),
                          (ax3, r.get("goodput", float("nan")) * 100 if ax3 is not None else None)):
                if ax is None:
                    continue
                if r.get("optimum"):
                    ax.plot([g], [y], marker="*", markersize=18, color=line.get_color(), zorder=5,
                            label=f"best by {objective}" if ax is ax2 else None)
                if r.get("diminishing"):
                    ax.axvline(g, color=line.get_color(), linestyle="--", alpha=0.6,
                               label="adding GPUs stops paying" if ax is ax2 else None)
    counts = sorted({g for points in series.values() for g, _ in points})
    panels = [(ax1, "tokens/s per GPU (best layout)", True), (ax2, label, True)]
    if ax3 is not None:
        panels.append((ax3, "goodput: training / wall time (%)", False))
    for ax, ylabel, logy in panels:
        ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}"))
        ax.set_xticks(counts, [f"{g:,}" for g in counts], rotation=45 if len(counts) > 6 else 0)
        ax.minorticks_off()
        ax.set_xlabel("GPUs")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
    if any(r.get("optimum") or r.get("diminishing") for r in rows):
        ax2.legend(fontsize=8, loc="best")
    ncol = min(len(series), 4)
    handles, labels = ax1.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    fig.suptitle(title or "planner sweep: best layout per scenario")
    rows_legend = -(-len(series) // ncol)
    fig.tight_layout(rect=(0, 0.04 + 0.035 * rows_legend, 1, 1))
    from planner.reports.plots import save_figure

    save_figure(fig, Path(path))  # .png, .svg or .html, as every --plot (it closes the figure)

