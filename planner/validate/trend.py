"""Error trend with GPU count: does a series' error drift as the same job scales out?

A series is the rows of one source with the same model and framework text (``RowTraits.series``):
the same job at several GPU counts, as in a strong-scaling study (MegaScale Table 2) or a sweep
of cluster sizes (MLPerf rounds). The trend is the least-squares slope of the signed error
against log10(GPUs), in points per tenfold GPUs, with its standard error; a slope more than
twice its standard error is called a trend. A model whose collectives or per-step costs miss a
term that grows (or shrinks) relative to the step as a job scales shows one here, whatever its
median error.
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
        out.append({"series": series, "rows": len(rows), "confidence": sorted({r.confidence for r in rows}),
                    "gpus_min": min(gpus), "gpus_max": max(gpus), "slope_per_decade": slope, "slope_se": se,
                    "trend": bool(abs(slope) > 2 * se), "error_min": min(errors), "error_max": max(errors)})
    return sorted(out, key=lambda t: t["series"])


def format_trend_line(t: dict) -> str:
    source, model, framework = (t["series"].split(" | ") + ["", ""])[:3]
    label = f"{source}: {model[:22]}, {framework}"
    verdict = "trend" if t["trend"] else "no clear trend"
    return (f"  {label[:66]:<67}{t['rows']:>3} rows {t['gpus_min']:>6,}-{t['gpus_max']:<7,} GPUs "
            f"{t['slope_per_decade'] * 100:+5.1f} +/- {t['slope_se'] * 100:.1f} pts per 10x GPUs ({verdict}); "
            f"errors {t['error_min'] * 100:+.1f}% .. {t['error_max'] * 100:+.1f}%")
