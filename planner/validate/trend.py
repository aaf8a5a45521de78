"""Error trend with GPU count: does a series' error drift as the same job scales out?

A series is the rows of one source with the same model and framework text (``RowTraits.series``):
the same job at several GPU counts, as in a strong-scaling study (MegaScale Table 2) or a sweep
of cluster sizes (MLPerf rounds). The trend is the least-squares slope of the signed error
against log10(GPUs), in points per tenfold GPUs, with its standard error; a slope more than
twice its standard error is called a trend. A model whose collectives or per-step costs miss a
term that grows (or shrinks) relative to the step as a job scales shows one here, whatever its
median error.

A row that leaves the virtual-stage count or the micro-batch size unstated is priced at the
fastest choice the search finds. In a strong-scaling study that choice matters more as the GPU
count grows (fewer micro-batches per step, a larger bubble share), so an optimistic choice can
itself make a trend. For a trend the report therefore also holds those knobs at one value across
the series (each value every row can run) and gives the range of slopes: a trend that vanishes
at some fixed choice lies within what the unstated knobs allow.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

MIN_GPU_COUNTS = 3
"""A series needs rows at this many distinct GPU counts..."""
MIN_SPAN = 4.0
"""...spanning at least this ratio of largest to smallest."""


def slope_per_decade(gpus, errors) -> tuple[float, float]:
    """(slope, standard error) of ``errors`` against log10(``gpus``), least squares; the
    standard error is nan with fewer than three rows (no residual degree of freedom)."""
    x = np.log10(np.asarray(gpus, dtype=np.float64))
    y = np.asarray(errors, dtype=np.float64)
    dx = x - x.mean()
    sxx = float(np.sum(dx * dx))
    slope = float(np.sum(dx * (y - y.mean())) / sxx)
    if len(x) < 3:
        return slope, float("nan")
    resid = y - y.mean() - slope * dx
    return slope, float(np.sqrt(np.sum(resid * resid) / (len(x) - 2) / sxx))


def scale_trends(results) -> list[dict]:
    """Per series with rows at >= ``MIN_GPU_COUNTS`` GPU counts spanning >= ``MIN_SPAN`` x:
    rows, GPU range, slope and standard error, error range. ``results``: ``RowResult``s."""
    by_series = defaultdict(list)
    for r in results:
        if r.error is not None and r.traits.get("series"):
            by_series[r.traits["series"]].append(r)
    out = []
    for series, rows in by_series.items():
        gpus = [r.gpus for r in rows]
        if len(set(gpus)) < MIN_GPU_COUNTS or max(gpus) < MIN_SPAN * min(gpus):
            continue
        errors = [r.error for r in rows]
        slope, se = slope_per_decade(gpus, errors)
        trend = bool(abs(slope) > 2 * se)
        out.append({"series": series, "rows": len(rows), "confidence": sorted({r.confidence for r in rows}),
                    "gpus_min": min(gpus), "gpus_max": max(gpus), "slope_per_decade": slope, "slope_se": se,
                    "trend": trend, "error_min": min(errors), "error_max": max(errors),
                    "held": held_choice_slopes(rows, slope) if trend else None})
    return sorted(out, key=lambda t: t["series"])


def held_choice_slopes(rows, slope: float | None = None) -> dict | None:
    """The series' slope with its searched schedule knobs held at one value in every row: for
    each value all rows can run (``RowResult.alternatives``), the slope and whether it is a
    trend. None when the rows search no such knob alike, or when the one value they share is
    what every row ran anyway (its slope is the series' ``slope``)."""
    keys = set(rows[0].alternatives)
    for r in rows[1:]:
        keys &= set(r.alternatives)
    if not keys:
        return None
    gpus = [r.gpus for r in rows]
    fits = []
    for key in sorted(keys):
        fits.append((key, *slope_per_decade(gpus, [r.alternatives[key] / r.reported - 1.0 for r in rows])))
    if len(fits) == 1 and slope is not None and abs(fits[0][1] - slope) < 1e-9:
        return None
    flat = [(k, s, e) for k, s, e in fits if not abs(s) > 2 * e]
    example = min(flat or fits, key=lambda f: abs(f[1]))
    return {"knobs": [k for k, _ in example[0]], "choices": len(fits), "without_trend": len(flat),
            "slope_min": min(s for _, s, _ in fits), "slope_max": max(s for _, s, _ in fits),
            "flattest": {"choice": dict(example[0]), "slope_per_decade": example[1], "slope_se": example[2]}}


def format_trend_line(t: dict) -> str:
    source, model, framework = (t["series"].split(" | ") + ["", ""])[:3]
    label = f"{source}: {model[:22]}, {framework}"
    verdict = "trend" if t["trend"] else "no clear trend"
    line = (f"  {label[:66]:<67}{t['rows']:>3} rows {t['gpus_min']:>6,}-{t['gpus_max']:<7,} GPUs "
            f"{t['slope_per_decade'] * 100:+5.1f} +/- {t['slope_se'] * 100:.1f} pts per 10x GPUs ({verdict}); "
            f"errors {t['error_min'] * 100:+.1f}% .. {t['error_max'] * 100:+.1f}%")
    held = t.get("held")
    if not held:
        return line
    flat = held["flattest"]
    choice = " ".join(f"{k} {v}" for k, v in flat["choice"].items())
    return line + (f"\n      {' and '.join(held['knobs'])} unstated (the fastest taken); held at one value in every row: "
                   f"{held['slope_min'] * 100:+.1f} .. {held['slope_max'] * 100:+.1f} pts per 10x, no trend at "
                   f"{held['without_trend']} of {held['choices']} (e.g. {choice}: {flat['slope_per_decade'] * 100:+.1f} "
                   f"+/- {flat['slope_se'] * 100:.1f})")
