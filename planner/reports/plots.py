"""Pictures for ``--plot FILE`` (``evaluate``, ``search``, ``validate``; ``comm`` uses the helpers).

matplotlib (Agg backend) is imported inside the functions only, so ``planner --help`` stays fast.
A figure goes to FILE by its extension: ``.png``, ``.svg`` (text kept as text, searchable) or
``.html`` (one self-contained page around the SVG), written to a temporary file beside FILE and
renamed, so a failure never leaves half a picture. Each ``*_figure`` function returns the
matplotlib Figure (tests inspect it); each ``plot_*`` function draws and saves.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from hardware_catalog.errors import PlannerInputError

FORMATS = (".png", ".svg", ".html")
"""File extensions ``--plot`` writes."""
DPI = 150
FORWARD_COLOR = "#4C78A8"
BACKWARD_COLOR = "#F58518"
IDLE_COLOR = "#E4E4E4"
OTHER_COLOR = "#9D9D9D"
MEMORY_COLOR = "#54A24B"
STEADY_ROUNDS = 3
"""Steady-state rounds (one micro-batch forward + backward on the slowest stage) kept on each side of
the gap when a long schedule is shortened."""
MAX_BLOCKS_PER_STAGE = 96
"""Above this many blocks per stage the timeline hides the middle of the steady state."""


# --------------------------------------------------------------------------------------- helpers


def check_plot_path(path, flag: str = "--plot") -> Optional[Path]:
    """``path`` as a Path if a picture can be written there (None: no picture asked for), else
    ``PlannerInputError`` (one line naming the value and what is allowed). Called before any
    work is done."""
    if path is None:
        return None
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise PlannerInputError(f"{flag} {path}: the file must end in {', '.join(FORMATS)}")
    if path.is_dir():
        raise PlannerInputError(f"{flag} {path}: is a directory; give a file name ending in {', '.join(FORMATS)}")
    parent = path.parent
    if not parent.is_dir():
        raise PlannerInputError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise PlannerInputError(f"{flag} {path}: not writable")
    return path


def pyplot():
    """matplotlib.pyplot on the Agg backend (no screen needed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlannerInputError("--plot needs matplotlib: pip install 'matplotlib>=3.7'") from None
    return plt


def save_figure(fig, path, flag: str = "--plot") -> Path:
    """Write ``fig`` to ``path`` (format from the extension) atomically, then close it."""
    import matplotlib

    from planner.outputs import write_atomically

    path = Path(path)
    ext = path.suffix.lower()
    if ext not in FORMATS:
        raise PlannerInputError(f"{flag} {path}: the file must end in {', '.join(FORMATS)}")

    def write(fh) -> None:
        with matplotlib.rc_context({"svg.fonttype": "none"}):
            if ext == ".html":
                fh.write(_html_page(fig, path.stem).encode())
            else:
                fig.savefig(fh, format=ext[1:], dpi=DPI)

    try:
        return write_atomically(path, write, flag)
    finally:
        pyplot().close(fig)


def _html_page(fig, title: str) -> str:
    import html
    import io

    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and doctype: inline SVG
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title></head>\n"
            f"<body style=\"margin:0;background:#fff\">\n{svg}\n</body></html>\n")


def log_ticks(axis, lo: float, hi: float) -> None:
    """Plain-number ticks (1, 2, 5, 10, 20...; finer on a short range) on a log axis."""
    import math

    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    for mantissas in ((1, 2, 5), (1, 2, 3, 5), (1, 1.5, 2, 3, 4, 5, 6, 8)):
        ticks = [m * 10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
                 for m in mantissas if lo <= m * 10.0**k <= hi]
        if len(ticks) >= 4:
            break
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,g}"))
    axis.set_minor_locator(NullLocator())


def fmt_seconds(s: float) -> str:
    if s >= 100:
        return f"{s:,.0f} s"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} \u00b5s"


def short_layout(rec: dict, hardware: bool = False) -> str:
    """"TP2 PP32 VPP4 CP16" (degrees above 1; recompute when not none; GPU type and count
    when ``hardware``)."""
    lay = rec["layout"]
    parts = [f"{k.upper()}{lay[k]}" for k in ("tp", "pp", "vpp", "cp", "ep") if lay.get(k, 1) > 1]
    parts = parts or ["DP only"]
    if lay.get("recompute") not in (None, "none"):
        parts.append({"selective": "sel", "full": "full"}.get(lay["recompute"], lay["recompute"]))
    if hardware:
        parts.append(f"{rec['gpus']:,} \u00d7 {rec['gpu'].split('-')[0]}")
    return " ".join(parts)


# ------------------------------------------------------------------------------ evaluate: timeline


def _window(tl) -> Optional[tuple[float, float]]:
    """(T1, T2): the stretch of steady state to hide, or None when the schedule is short.

    Kept: the warm-up and ``STEADY_ROUNDS`` rounds after stage 1's first backward, and the
    last rounds before its last forward with the flush. Both cuts fall on stage 1's block edges."""
    if 2 * tl.micro_batches * tl.vpp <= MAX_BLOCKS_PER_STAGE:
        return None
    first = sorted((b for b in tl.blocks if b.stage == 0), key=lambda b: b.start)
    round_s = max(f + b for f, b in zip(tl.forward_s, tl.backward_s))  # the slowest stage sets the pace
    first_b = next(b.start for b in first if b.kind == "B")
    last_f = max(b.end for b in first if b.kind == "F")
    t1 = next((b.end for b in first if b.end >= first_b + STEADY_ROUNDS * round_s), None)
    t2 = max((b.start for b in first if b.start <= last_f - STEADY_ROUNDS * round_s), default=None)
    if t1 is None or t2 is None or t2 - t1 < round_s:
        return None
    return t1, t2


class _Axis:
    """Real time <-> drawn x when a stretch [t1, t2] is cut out and replaced by a gap."""

    def __init__(self, cut, gap):
        self.cut, self.gap = cut, gap

    def x(self, t: float) -> float:
        if self.cut is None or t <= self.cut[0]:
            return t
        t1, t2 = self.cut
        return t1 + self.gap + max(t - t2, 0.0)

    def t(self, x: float) -> float:
        if self.cut is None or x <= self.cut[0]:
            return x
        t1, t2 = self.cut
        return t2 + (x - t1 - self.gap) if x >= t1 + self.gap else float("nan")


def _visible(tl, axis: _Axis):
    """(block, x0, x1) of the blocks drawn: clipped to the kept stretches."""
    out = []
    for b in tl.blocks:
        if axis.cut is None:
            out.append((b, b.start, b.end))
            continue
        t1, t2 = axis.cut
        if b.end <= t1 or b.start >= t2:
            out.append((b, axis.x(b.start), axis.x(b.end)))
        elif b.start < t1:
            out.append((b, b.start, t1))
        elif b.end > t2:
            out.append((b, axis.x(t2), axis.x(b.end)))
    return out


def _block_color(b, vpp: int):
    """Forward blue, backward orange; with interleaving a lighter tone for earlier chunks."""
    from matplotlib.colors import to_rgb

    base = to_rgb(FORWARD_COLOR if b.kind == "F" else BACKWARD_COLOR)
    if vpp == 1:
        return base
    mix = 0.55 * (1 - b.chunk / (vpp - 1))  # chunk 0: 55% towards white
    return tuple(c + (1 - c) * mix for c in base)


def _draw_blocks(ax, tl, axis: _Axis, points_per_x: float) -> dict:
    """The forward and backward blocks (one collection each, gid forward / backward) and the
    micro-batch numbers that fit; returns the counts drawn."""
    from matplotlib.collections import PolyCollection

    drawn = _visible(tl, axis)
    counts = {}
    thin = min((b.end - b.start for b, _, _ in drawn), default=0.0) * points_per_x < 4  # white edges would hide them
    for kind, gid in (("F", "forward"), ("B", "backward")):
        mine = [(b, x0, x1) for b, x0, x1 in drawn if b.kind == kind]
        verts = [[(x0, b.stage - 0.4), (x1, b.stage - 0.4), (x1, b.stage + 0.4), (x0, b.stage + 0.4)] for b, x0, x1 in mine]
        coll = PolyCollection(verts, facecolors=[_block_color(b, tl.vpp) for b, _, _ in mine],
                              edgecolors="white", linewidths=0 if thin else 0.4, gid=gid)
        ax.add_collection(coll)
        counts[gid] = len(mine)
    fontsize = 7 if tl.pp <= 16 else 5.5
    width = len(str(tl.micro_batches)) * 0.62 * fontsize + 2
    for kind in ("F", "B"):
        whole = [(b, x0, x1) for b, x0, x1 in drawn if b.kind == kind and x1 - x0 >= (b.end - b.start) * 0.999]
        if not whole or min(x1 - x0 for _, x0, x1 in whole) * points_per_x < width:
            continue  # numbers on every block of this kind or on none
        counts[f"{kind}_numbered"] = len(whole)
        for b, x0, x1 in whole:
            dark = b.kind == "B" or tl.vpp == 1 or b.chunk > 0
            ax.text((x0 + x1) / 2, b.stage, str(b.micro_batch + 1), ha="center", va="center", fontsize=fontsize,
                    color="white" if dark else "#1a1a1a")
    return counts


def _stage_labels(ax, tl, record: dict) -> None:
    layers = record["layout"].get("stage_layers") or [record["layout"].get("num_layers", "")] * tl.pp
    step = 1 if tl.pp <= 24 else (2 if tl.pp <= 48 else 4)
    ticks = list(range(0, tl.pp, step))
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{s + 1}  ({layers[s]} L)" if layers[s] != "" else str(s + 1) for s in ticks], fontsize=8)
    ax.set_ylim(tl.pp - 0.4, -0.6)
    ax.set_ylabel("pipeline stage (layers)")


def _time_ticks(ax, axis: _Axis, end: float, unit: float) -> None:
    """Ticks at round real times on each kept stretch, labelled in real time."""
    from matplotlib.ticker import MaxNLocator

    spans = [(0.0, end)] if axis.cut is None else [(0.0, axis.cut[0]), (axis.cut[1], end)]
    ticks = []
    for lo, hi in spans:
        n = 6 if axis.cut is None else 3
        ticks += [t for t in MaxNLocator(n).tick_values(lo / unit, hi / unit) if lo / unit <= t <= hi / unit]
    ax.set_xticks([axis.x(t * unit) for t in ticks])
    ax.set_xticklabels([f"{t:g}" for t in ticks])


def _draw_gap(ax, tl, axis: _Axis) -> None:
    t1, t2 = axis.cut
    hidden = sum(b.stage == 0 and b.kind == "F" and b.start >= t1 and b.end <= t2 for b in tl.blocks) / tl.vpp
    ax.axvspan(t1, t1 + axis.gap, color="white", zorder=3)
    ax.text(t1 + axis.gap / 2, (tl.pp - 1) / 2, f"\u22ef\n{hidden:.0f}\nmicro-\nbatches\nnot\ndrawn\n\u22ef",
            ha="center", va="center", fontsize=8, color="0.3", zorder=4)


def draw_timeline(ax, tl, record: dict) -> dict:
    """The schedule on ``ax``: one row per stage, idle time grey, then the step's other terms."""
    from matplotlib.patches import Patch

    cut = _window(tl)
    end = tl.end
    axis = _Axis(cut, 0.05 * (end - (cut[1] - cut[0])) if cut else 0.0)
    other = record["step_time_s"] - sum(record["breakdown"][k] for k in _PIPELINE_TERMS)
    pipe_x = axis.x(end)
    total_x = pipe_x + max(other, 0.0)
    fig = ax.figure
    points_per_x = fig.get_figwidth() * 72 * 0.80 / total_x
    ax.barh(range(tl.pp), pipe_x, height=0.8, color=IDLE_COLOR, zorder=0)
    counts = _draw_blocks(ax, tl, axis, points_per_x)
    if other > 0:
        ax.barh(range(tl.pp), other, left=pipe_x, height=0.8, color=OTHER_COLOR, hatch="//", edgecolor="white", lw=0)
    if cut:
        _draw_gap(ax, tl, axis)
    ax.set_xlim(0, total_x * 1.005)
    unit = 1e-3 if record["step_time_s"] < 1 else 1.0
    _time_ticks(ax, axis, end + max(other, 0.0), unit)
    ax.set_xlabel(f"time within one step ({'ms' if unit < 1 else 's'})")
    _stage_labels(ax, tl, record)
    handles = [Patch(color=FORWARD_COLOR, label="forward"), Patch(color=BACKWARD_COLOR, label="backward (+ recompute)"),
               Patch(color=IDLE_COLOR, label="idle: pipeline bubble"),
               Patch(facecolor=OTHER_COLOR, hatch="//", edgecolor="white", label=f"other terms: {fmt_seconds(other)}")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False,
              title=f"model chunk 1\u2192{tl.vpp}:\nlight \u2192 dark" if tl.vpp > 1 else None, title_fontsize=8)
    kind = "interleaved 1F1B" if tl.vpp > 1 else ("1F1B" if tl.pp > 1 else "no pipeline: gradient accumulation")
    numbered = ", numbered" if any(k.endswith("_numbered") for k in counts) else ""
    short = f"; {STEADY_ROUNDS} steady-state rounds kept each side of the cut" if cut else ""
    ax.set_title(f"{kind} schedule: pp {tl.pp}, vpp {tl.vpp}, {tl.micro_batches} micro-batches{numbered}{short}",
                 fontsize=10, loc="left")
    return counts


_PIPELINE_TERMS = ("compute", "recompute", "bubble", "tp_comm", "cp_comm", "ep_comm")
"""The terms the schedule's blocks and bubble stand for; the others are drawn after the flush."""


# ----------------------------------------------------------------------- evaluate: breakdown panels


def _bar_labels(ax, values, texts, xmax) -> None:
    for i, (v, text) in enumerate(zip(values, texts)):
        ax.text(v + xmax * 0.01, i, text, va="center", fontsize=8)


def draw_time_breakdown(ax, record: dict) -> None:
    """Exposed seconds per step, one bar per term (terms at zero left out)."""
    from planner.reports.evaluate import TERM_LABELS

    step = record["step_time_s"]
    terms = [(t, v) for t, v in record["breakdown"].items() if v > 0 or t == "compute"]
    colors = {"compute": FORWARD_COLOR, "recompute": BACKWARD_COLOR, "bubble": "#B0B0B0"}
    values = [v for _, v in terms]
    ax.barh(range(len(terms)), values, color=[colors.get(t, OTHER_COLOR) for t, _ in terms], height=0.65)
    ax.set_yticks(range(len(terms)))
    ax.set_yticklabels([TERM_LABELS[t].split(" (")[0] for t, _ in terms], fontsize=8)
    ax.invert_yaxis()
    xmax = max(values) * 1.35
    ax.set_xlim(0, xmax)
    _bar_labels(ax, values, [f"{fmt_seconds(v)} ({v / step * 100:.1f}%)" for v in values], xmax)
    ax.set_xlabel("seconds per step (exposed, on the critical path)")
    ax.set_title(f"time per step: {fmt_seconds(step)}", fontsize=10, loc="left")
    ax.grid(True, axis="x", alpha=0.3)


def draw_memory_breakdown(ax, record: dict) -> None:
    """GiB per GPU on the fullest stage, one bar per part, the peak and the HBM capacity."""
    from costmodel.result import MEMORY_TERMS
    from planner.reports.evaluate import MEMORY_LABELS

    mem = record["memory_gib"]
    names = ["peak"] + list(MEMORY_TERMS)
    values = [mem[k] for k in names]
    cap = mem["capacity"]
    colors = ["#2F6B2A" if record["fits"] else "#C0392B"] + [MEMORY_COLOR] * len(MEMORY_TERMS)
    ax.barh(range(len(names)), values, color=colors, height=0.65)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(["peak (sum)"] + [MEMORY_LABELS[k].split(" (")[0] for k in MEMORY_TERMS], fontsize=8)
    ax.invert_yaxis()
    xmax = max(cap, mem["peak"]) * 1.3
    ax.set_xlim(0, xmax)
    ax.axvline(cap, color="0.2", ls="--", lw=1)
    ax.text(cap, len(names) - 1, f" HBM {cap:.1f} GiB", fontsize=8, va="center", ha="left")
    _bar_labels(ax, values, [f"{v:.1f} GiB" for v in values], xmax)
    where = f", fullest stage: {record['fullest_stage']}" if record.get("fullest_stage") else ""
    verdict = f"fits, {cap - mem['peak']:.1f} GiB free" if record["fits"] else f"DOES NOT FIT ({mem['peak'] - cap:.1f} GiB over)"
    ax.set_xlabel("GiB per GPU")
    ax.set_title(f"memory per GPU: {verdict}{where}", fontsize=10, loc="left")
    ax.grid(True, axis="x", alpha=0.3)


def evaluation_figure(record: dict, timeline):
    """Timeline on top, time and memory breakdowns below; ``fig.timeline_counts`` holds the
    forward / backward blocks drawn."""
    from planner.reports.evaluate import layout_summary

    plt = pyplot()
    rows = timeline.pp
    top_h = max(2.2, 0.28 * rows + 1.3)
    fig = plt.figure(figsize=(15, top_h + 3.6), layout="constrained")
    grid = fig.add_gridspec(2, 2, height_ratios=[top_h, 3.2], width_ratios=[1.15, 1])
    ax_t = fig.add_subplot(grid[0, :])
    fig.timeline_counts = draw_timeline(ax_t, timeline, record)
    draw_time_breakdown(fig.add_subplot(grid[1, 0]), record)
    draw_memory_breakdown(fig.add_subplot(grid[1, 1]), record)
    lay = record["layout"]
    fig.suptitle(
        f"{record['model']} on {record['gpus']:,} \u00d7 {record['gpu']}: {layout_summary(lay)}\n"
        f"step {fmt_seconds(record['step_time_s'])}, {record['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, "
        f"MFU {record['mfu'] * 100:.1f}%", fontsize=11)
    model_pipe = sum(record["breakdown"][k] for k in _PIPELINE_TERMS)
    caption = (
        "Blocks: one micro-batch's forward / backward on each stage from the cost model's per-layer costs (backward "
        "includes recompute; exposed TP/CP/EP comm split over the passes; an interleaved chunk takes stage time / vpp), "
        "scheduled in Megatron-Core's order with P2P taking no time. "
        f"Simulated pipeline {fmt_seconds(timeline.end)}; cost model (m \u00d7 slowest stage + bubble) "
        f"{fmt_seconds(model_pipe)}. Other terms (exposed P2P, DP comm, optimizer...) drawn after the flush.")
    import textwrap

    fig.supxlabel(textwrap.fill(caption, 200), fontsize=7, color="0.35", x=0.005, ha="left")
    return fig


def plot_evaluation(record: dict, setup, path) -> Path:
    """``planner evaluate --plot``: rebuild the layout from the record, simulate, draw, save."""
    from costmodel.options import Layout
    from planner.reports.timeline import layout_timeline

    layout = Layout.from_values(record["layout"])
    timeline = layout_timeline(setup.model, setup.cluster, setup.gpu, layout)
    return save_figure(evaluation_figure(record, timeline), path)


# ------------------------------------------------------------------------------------------ search

CLOUD_TOP = 300
"""Layouts drawn as the scatter's cloud: the search asked again with ``top=CLOUD_TOP`` (split
over the GPU types and counts), for the plot only."""
FRONT_TOP = 400
"""Most Pareto-front points asked for when drawing the front."""
LABELS = 8
"""Top layouts labelled on the scatter."""


def search_plot_data(result, again: Optional[dict] = None) -> dict:
    """What the search plot draws: cloud, front, labelled top layouts, best per series
    (``again``: the search's extra points, ``planner.reports.search.more_points``; None: the
    result's rows alone)."""
    from search.exhaustive import pareto_mask

    top = result.results or result.closest
    again = again if result.results else None
    cost = any("cost_per_step_usd" in r for r in top)
    xkey = (lambda r: r["cost_per_step_usd"]) if cost else (lambda r: r["memory_gib"]["peak"])
    if again:
        per, front = again["per_series"], again["front"]
        cloud = [r for rs in per.values() for r in rs]
    else:
        per = {}
        for r in top:
            per.setdefault((r["gpu"], r["gpus"]), []).append(r)
        cloud = list(top)
        keep = pareto_mask([r["step_time_s"] for r in cloud], [xkey(r) for r in cloud]) if cloud else []
        front = [r for r, k in zip(cloud, keep) if k] if result.results else []
    front = sorted(front, key=xkey)
    best = {k: min(rs, key=lambda r: r["step_time_s"]) for k, rs in per.items() if rs}
    return {"cloud": cloud, "front": front, "top": top[:LABELS], "best": best, "x": xkey, "cost": cost,
            "researched": again is not None, "fits": bool(result.results)}


def _spread_positions(ys: list[float], gap: float, top: float = 0.98) -> list[float]:
    """Label heights (axes fraction) near ``ys`` (ascending) but at least ``gap`` apart, below ``top``."""
    pos = []
    for y in ys:
        pos.append(max(y, pos[-1] + gap) if pos else max(y, 0.02))
    over = pos[-1] - top if pos else 0
    if over > 0:
        pos = [p - over for p in pos]
        for i in range(len(pos) - 2, -1, -1):
            pos[i] = min(pos[i], pos[i + 1] - gap)
    return pos


def _label_top(ax, label_ax, top: list, xkey, hardware: bool, below: float) -> None:
    """'#1 TP2 PP32 CP16  5.79 s' for the top layouts in a column (``label_ax``, right of the
    plot, under height ``below``), each with a line to its point."""
    to_axes = ax.transAxes.inverted()
    fracs = [to_axes.transform(ax.transData.transform((xkey(r), r["step_time_s"])))[1] for r in top]
    order = sorted(range(len(top)), key=lambda i: (fracs[i], -top[i]["rank"]))
    heights = _spread_positions([fracs[i] for i in order], 0.06, below)
    for i, h in zip(order, heights):
        r = top[i]
        text = ax.annotate(f"#{r['rank']} {short_layout(r, hardware)}  {fmt_seconds(r['step_time_s'])}",
                           xy=(xkey(r), r["step_time_s"]), xycoords="data", xytext=(0.0, h),
                           textcoords=label_ax.transAxes, fontsize=8, va="center", color=TOP_COLOR,
                           arrowprops=dict(arrowstyle="-", color=TOP_COLOR, lw=0.6, alpha=0.6), annotation_clip=False)
        text.set_in_layout(False)  # the label column's own axes holds the room for it


def _y_range(ax, data: dict) -> str:
    """Step-time axis up to ``Y_SPAN`` x the slowest series' best (log when wide); returns a note
    on the front points left above it."""
    points = data["cloud"] + data["front"] + data["top"]
    bests = [r["step_time_s"] for r in data["best"].values()] or [min(r["step_time_s"] for r in points)]
    ymax = min(Y_SPAN * max(bests), max(r["step_time_s"] for r in points))
    ymin = min(r["step_time_s"] for r in points if r["step_time_s"] <= ymax)
    ymax = max(ymax * 1.04, ymin * 1.1)  # some room above the slowest point drawn
    log = ymax / ymin > 5
    ax.set_yscale("log" if log else "linear")
    ax.set_ylim(ymin * (0.9 if log else 0.97), ymax)
    if log:
        log_ticks(ax.yaxis, ymin * 0.9, ymax)
    above = [r for r in data["front"] if r["step_time_s"] > ymax]
    if not above:
        return ""
    far = max(above, key=lambda r: r["step_time_s"])
    return f"\n{len(above)} slower points above the chart, up to {fmt_seconds(far['step_time_s'])}"


Y_SPAN = 3.0
"""The step-time axis ends at this multiple of the (slowest GPU count's) best step time; the
front's slower, smaller layouts beyond are counted in the legend."""
TOP_COLOR = "#B22222"
MARKERS = "os^Dv<>ph*"
"""One marker per GPU count (several counts: the colour is the GPU type)."""


def _type_colors(types) -> dict:
    import matplotlib

    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    return {g: cycle[i % len(cycle)] for i, g in enumerate(sorted(types))}


def _memory_limits(ax, records: list, colors: dict) -> None:
    """The usable-memory limit (HBM less the headroom) of each GPU type, as vertical lines."""
    limits = {}
    for r in records:
        limits.setdefault(r["gpu"], (r.get("memory_limit_gib"), r["memory_gib"]["capacity"]))
    for gpu, (limit, cap) in sorted(limits.items()):
        if limit is None:
            continue
        name = f"{gpu.split('-')[0]} " if len(limits) > 1 else ""
        ax.axvline(limit, color=colors.get(gpu, "#C0392B") if len(limits) > 1 else "#C0392B", ls="--", lw=1.2,
                   label=f"{name}memory limit {limit:.1f} GiB ({(1 - limit / cap) * 100:.0f}% of {cap:.0f} GiB kept free)")


def _draw_cloud(ax, data: dict, multi: bool, colors: dict) -> None:
    x = data["x"]
    groups = {}
    for r in data["cloud"]:
        groups.setdefault((r["gpu"], r["gpus"]), []).append(r)
    counts = sorted({n for _, n in groups})
    for (gpu, n), rs in sorted(groups.items()):
        ax.scatter([x(r) for r in rs], [r["step_time_s"] for r in rs], s=14, alpha=0.5, lw=0,
                   color=colors[gpu] if multi else "0.5", marker=MARKERS[counts.index(n) % len(MARKERS)],
                   label=f"{n:,} \u00d7 {gpu.split('-')[0]}" if multi else
                   f"layouts that fit ({len(rs)} fastest)" if data["researched"] else f"layouts the search returned ({len(rs)})")


def draw_search_scatter(ax, label_ax, data: dict, multi: bool) -> None:
    """Step time vs memory (or cost) per layout, the Pareto front, the top layouts labelled."""
    x, top = data["x"], data["top"]
    colors = _type_colors({r["gpu"] for r in data["cloud"] + top})
    _draw_cloud(ax, data, multi, colors)
    note = _y_range(ax, data)
    if data["front"]:
        fr = data["front"]
        ax.step([x(r) for r in fr], [r["step_time_s"] for r in fr], where="post", color="black", lw=1.2, marker="o",
                ms=3, label=f"Pareto front: nothing is both faster\nand {'cheaper' if data['cost'] else 'smaller'}{note}")
    ax.scatter([x(r) for r in top], [r["step_time_s"] for r in top], s=44, facecolor="none", edgecolor=TOP_COLOR,
               lw=1.4, zorder=5, label=f"top {len(top)} of the table" if data["fits"] else "closest layouts (none fit)")
    for rec, label in data.get("recipes", []):  # the published recipe row (planner.recipes), as the table shows it
        ax.scatter([x(rec)], [rec["step_time_s"]], marker="*", s=180, color="#d62728", edgecolor="black", lw=0.6,
                   zorder=6, label=f"published recipe: {label}")
    if not data["cost"]:
        _memory_limits(ax, top + data["cloud"], colors)
    ax.set_xlabel("cost per step (USD)" if data["cost"] else "peak memory per GPU (GiB)")
    ax.set_ylabel("step time (s)")
    ax.grid(True, alpha=0.3, which="both")
    handles, labels = ax.get_legend_handles_labels()
    label_ax.axis("off")
    legend = label_ax.legend(handles, labels, loc="upper left", fontsize=8, frameon=False, borderaxespad=0)
    ax.figure.canvas.draw()  # settle the layout: data -> axes fractions, the legend's height
    box = legend.get_window_extent().transformed(label_ax.transAxes.inverted())
    if top:
        _label_top(ax, label_ax, top, x, multi, below=box.y0 - 0.05)


def draw_scaling(ax_tok, ax_step, best: dict) -> None:
    """Best tokens/s/GPU and step time against the GPU count, one line per GPU type."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    types = sorted({g for g, _ in best})
    colors = _type_colors(types)
    for gpu in types:
        pts = sorted((n, r) for (g, n), r in best.items() if g == gpu)
        ns = [n for n, _ in pts]
        line = ax_tok.plot(ns, [r["tokens_per_s_per_gpu"] for _, r in pts], marker="o", label=gpu, color=colors[gpu])[0]
        ax_step.plot(ns, [r["step_time_s"] for _, r in pts], marker="o", color=line.get_color(), label=gpu)
        ideal = [pts[0][1]["step_time_s"] * ns[0] / n for n in ns]
        ax_step.plot(ns, ideal, ls=":", color=line.get_color(), lw=1, label=f"{gpu}: linear scaling from {ns[0]:,}")
        if len(pts) <= 8:
            for n, r in pts:
                ax_tok.annotate(short_layout(r), (n, r["tokens_per_s_per_gpu"]), xytext=(0, 6), textcoords="offset points",
                                ha="center", fontsize=7, color=line.get_color())
    counts = sorted({n for _, n in best})
    for ax in (ax_tok, ax_step):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(counts))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("GPUs")
        ax.margins(x=0.15)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    ax_tok.set_ylim(0, max(r["tokens_per_s_per_gpu"] for r in best.values()) * 1.2)
    ax_tok.set_ylabel("tokens/s per GPU (best layout)")
    ax_tok.set_title("scaling: throughput per GPU of the fastest layout", fontsize=10, loc="left")
    ax_step.set_yscale("log")
    steps = [r["step_time_s"] for r in best.values()]
    ax_step.set_ylim(min(steps) / 1.25, max(steps) * 1.25)
    log_ticks(ax_step.yaxis, min(steps) / 1.25, max(steps) * 1.25)
    ax_step.set_ylabel("step time (s), log scale")
    ax_step.set_title("scaling: step time of the fastest layout", fontsize=10, loc="left")


def search_figure(result, data: dict):
    """The scatter (and, for several GPU counts, the scaling curves below it)."""
    plt = pyplot()
    stats = result.stats
    counts, types = stats.get("gpu_counts", []), stats.get("gpu_types", [])
    scaling = len(counts) > 1 and len(data["best"]) > 1
    fig = plt.figure(figsize=(13, 10.5 if scaling else 6.5), layout="constrained")
    grid = fig.add_gridspec(2 if scaling else 1, 2, height_ratios=[1.25, 1] if scaling else [1])
    top_row = grid[0, :].subgridspec(1, 2, width_ratios=[3, 1])
    draw_search_scatter(fig.add_subplot(top_row[0]), fig.add_subplot(top_row[1]), data,
                        multi=len(counts) > 1 or len(types) > 1)
    if scaling:
        draw_scaling(fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1]), data["best"])
    hw = f"{', '.join(f'{n:,}' for n in counts)} \u00d7 {', '.join(types)}"
    what = "cost per step" if data["cost"] else "peak memory per GPU"
    how = (f"cloud: the fastest layouts of each GPU type and count (the search asked again with --top up to {CLOUD_TOP}, "
           "for this plot only); front: the whole Pareto front") if data["researched"] else \
        "points: the layouts the search returned (front drawn over them)"
    fig.suptitle(f"{stats.get('model')}, gbs {stats.get('gbs')} \u00d7 seq {stats.get('seq_len')} on {hw}: "
                 f"step time vs {what}\n{how}", fontsize=10)
    return fig


def plot_search(result, path, again: Optional[dict] = None, recipes: Optional[list] = None) -> Path:
    """``planner search --plot``: ``again`` the search's extra points
    (``planner.reports.search.more_points``);
    ``recipes``: the published recipe rows the table shows (``planner.recipes.reference_recipes``),
    marked as stars."""
    data = search_plot_data(result, again)
    data["recipes"] = [(r["record"], r["recipe"]["id"]) for r in (recipes or []) if r.get("record")]
    return save_figure(search_figure(result, data), path)


# ---------------------------------------------------------------------------------------- validate

BAND = 0.10
"""Relative error band drawn around y = x; rows outside it are labelled."""
SHORT_ID = 30
"""Characters of a row id kept in its label."""
LABEL_ROOM = 6.0
"""The log-log panel's x axis runs this factor past the largest value: room for labels."""


def short_id(run_id: str) -> str:
    """A row id cut to ``SHORT_ID`` characters (an ellipsis where cut)."""
    return run_id if len(run_id) <= SHORT_ID else run_id[:SHORT_ID - 1] + "\u2026"


def _in_summary(r, confidence: str) -> bool:
    return confidence == "all" or r.confidence == confidence or (confidence == "medium" and r.confidence == "high")


def _place_labels(ax, items: list, obstacles: list) -> None:
    """Put each (x, y, text) near its point: the first of a few spots around it that stays in
    the axes and covers no label placed before (nor the legend) and none of the points
    ``obstacles`` (x, y); else the least bad one."""
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    points = [ax.transData.transform(xy) for xy in obstacles]
    placed = [ax.get_legend().get_window_extent(renderer)] if ax.get_legend() else []
    spots = [(6, 3, "left", "bottom"), (6, -3, "left", "top"), (-6, 3, "right", "bottom"), (-6, -3, "right", "top")]
    spots += [(sx * dx, sy * dy, "left" if sx > 0 else "right", "bottom" if sy > 0 else "top")
              for dx, dy in ((10, 14), (16, 28), (30, 10), (24, 44)) for sy in (1, -1) for sx in (1, -1)]
    for x, y, text in sorted(items, key=lambda it: (it[1], it[0])):
        best = None
        for dx, dy, ha, va in spots:
            t = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha, va=va, fontsize=7,
                            color="0.2", arrowprops=dict(arrowstyle="-", color="0.5", lw=0.5) if abs(dy) > 5 else None)
            box = t.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            bad = 10 * sum(box.overlaps(p) for p in placed) + sum(box.contains(*pt) for pt in points) + (0 if inside else 100)
            if best is None or bad < best[0]:
                if best is not None:
                    best[1].remove()
                best = (bad, t, box)
            else:
                t.remove()
            if bad == 0:
                break
        placed.append(best[2])


def _source_styles(rows: list) -> dict:
    sources = sorted({r.source for r in rows})
    colors = _type_colors(sources)
    return {src: (colors[src], MARKERS[i % len(MARKERS)]) for i, src in enumerate(sources)}


def _scatter_rows(ax, rows: list, summary: dict, y, legend: bool) -> None:
    """One colour and marker per source; hollow where the row is outside the summary."""
    conf = summary.get("confidence", "high")
    for src, (color, marker) in _source_styles(rows).items():
        mine = [r for r in rows if r.source == src]
        st = summary["per_source"].get(src) or {}
        med = f", median |err| {st['median_abs_error'] * 100:.1f}%" if st.get("median_abs_error") is not None else ""
        labelled = False
        for used in (True, False):
            pts = [r for r in mine if _in_summary(r, conf) == used]
            if pts:
                ax.scatter([r.reported for r in pts], [y(r) for r in pts], marker=marker, s=36, lw=1.2, zorder=3,
                           facecolor=color if used else "none", edgecolor=color,
                           label=None if labelled or not legend else f"{src} ({len(mine)} row{'' if len(mine) == 1 else 's'}{med})")
                labelled = True


def draw_validation(ax, results: list, summary: dict) -> None:
    """Predicted against measured tokens/s/GPU, log-log, y = x with the band, one colour and
    marker per source; rows outside the band labelled by id."""
    rows = [r for r in results if r.predicted is not None]
    _scatter_rows(ax, rows, summary, lambda r: r.predicted, legend=True)
    values = [v for r in rows for v in (r.reported, r.predicted)]
    lo, hi = min(values) / 1.6, max(values) * 1.6
    xs = [lo, hi * LABEL_ROOM]
    ax.plot(xs, xs, color="0.2", lw=1, label="predicted = measured")
    ax.fill_between(xs, [x * (1 - BAND) for x in xs], [x * (1 + BAND) for x in xs], color="0.5", alpha=0.25, lw=0,
                    label=f"\u00b1{BAND * 100:.0f}%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi * LABEL_ROOM)  # room right of the diagonal's top for labels
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    ax.set_xlabel("measured tokens/s per GPU")
    ax.set_ylabel("predicted tokens/s per GPU (planner)")
    ax.grid(True, which="major", alpha=0.3)
    ax.scatter([], [], marker="o", facecolor="none", edgecolor="0.3",
               label=f"hollow: not in the summary (below {summary.get('confidence', 'high')} confidence)")
    ax.legend(loc="upper left", fontsize=7.5, framealpha=0.9)


def draw_errors(ax, results: list, summary: dict) -> None:
    """The same rows as error (predicted / measured - 1) against measured: the band made wide."""
    from matplotlib.ticker import FuncFormatter

    rows = [r for r in results if r.predicted is not None]
    _scatter_rows(ax, rows, summary, lambda r: r.error * 100, legend=False)
    ax.axhspan(-BAND * 100, BAND * 100, color="0.5", alpha=0.25, lw=0)
    ax.axhline(0, color="0.2", lw=1)
    ax.set_xscale("log")
    top = max(abs(r.error) for r in rows) * 100 * 1.25
    ax.set_ylim(-max(top, 15), max(top, 15))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:+.0f}%"))
    ax.set_xlabel("measured tokens/s per GPU")
    ax.set_ylabel("error of the prediction (predicted / measured - 1)")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(f"error per run; grey band \u00b1{BAND * 100:.0f}%, runs outside it labelled", fontsize=10)


def _label_outside(axes: list, results: list, ys: list) -> None:
    rows = [r for r in results if r.predicted is not None]
    axes[0].figure.canvas.draw()
    for ax, y in zip(axes, ys):
        _place_labels(ax, [(r.reported, y(r), f"{short_id(r.id)} {r.error * 100:+.0f}%") for r in rows if abs(r.error) > BAND],
                      [(r.reported, y(r)) for r in rows])


def validation_figure(results: list, summary: dict, whose: str = "published"):
    """``whose``: what the runs are ("published" for the reference set, "your" for a --runs file)."""
    plt = pyplot()
    fig, (ax, ax_err) = plt.subplots(1, 2, figsize=(17, 8.5), layout="constrained", width_ratios=[1, 1.05])
    draw_validation(ax, results, summary)
    draw_errors(ax_err, results, summary)
    _label_outside([ax, ax_err], results, [lambda r: r.predicted, lambda r: r.error * 100])
    rows = sum(r.predicted is not None for r in results)
    s = summary
    line = (f"{s['rows']} {s['confidence']}-confidence {'row' if s['rows'] == 1 else 'rows'}: median |error| {s['median_abs_error'] * 100:.1f}%, "
            f"p90 {s['p90_abs_error'] * 100:.1f}%, mean signed {s['mean_signed_error'] * 100:+.1f}%") if s.get("rows") else ""
    ax.set_title(f"predicted vs measured, log-log; runs outside \u00b1{BAND * 100:.0f}% labelled", fontsize=10)
    fig.suptitle(f"planner validate: predicted vs measured training throughput of {rows} {whose} runs\n{line}",
                 fontsize=11)
    return fig


def plot_validation(results: list, summary: dict, path, whose: str = "published") -> Path:
    """``planner validate --plot`` (``whose``: see ``validation_figure``)."""
    return save_figure(validation_figure(results, summary, whose), path)
