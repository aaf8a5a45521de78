"""Error trend with GPU count (planner.validate.trend) and the measured-order ceiling of
ablation groups (planner.validate.ranking.replicated_pairs), on values worked by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from planner.validate.ranking import replicated_pairs
from planner.validate.trend import format_trend_line, held_choice_slopes, scale_trends, slope_per_decade


def _row(gpus, error, series="src | model | fw", confidence="medium", alternatives=None):
    return SimpleNamespace(gpus=gpus, error=error, confidence=confidence, traits={"series": series},
                           reported=100.0, alternatives=alternatives or {})


def test_slope_per_decade_by_hand():
    # log10 GPUs 1, 2, 3 with errors 0, +5%, +10%: 5 points per tenfold GPUs, no residual.
    slope, se = slope_per_decade([10, 100, 1000], [0.0, 0.05, 0.10])
    assert slope == pytest.approx(0.05) and se == pytest.approx(0.0, abs=1e-12)
    # Errors 0, +10%, 0: no slope. Residuals -1/30, +2/30, -1/30 (SSE 6/900); x deviations -1, 0, 1
    # (Sxx 2); se = sqrt(SSE / (3 - 2) / Sxx) = sqrt(1/300).
    slope, se = slope_per_decade([10, 100, 1000], [0.0, 0.10, 0.0])
    assert slope == pytest.approx(0.0, abs=1e-12) and se == pytest.approx(math.sqrt(1 / 300))
    assert math.isnan(slope_per_decade([10, 100], [0.0, 0.1])[1])


def test_scale_trends_keep_series_that_scale_out():
    rows = [_row(256, 0.04), _row(1024, 0.09), _row(4096, 0.14),          # a trend: +8.3 pts per decade
            _row(8, 0.0, "a | m | f"), _row(16, 0.1, "a | m | f"), _row(24, 0.0, "a | m | f"),  # spans 3x only
            _row(64, 0.0, "b | m | f"), _row(512, 0.1, "b | m | f"),      # two GPU counts only
            _row(64, None, "c | m | f")]
    trends = scale_trends(rows)
    assert [t["series"] for t in trends] == ["src | model | fw"]
    t = trends[0]
    # log10 GPUs steps by log10(4) = 0.602 per row while the error steps by 0.05: 0.05 / 0.602 per decade.
    assert t["slope_per_decade"] == pytest.approx(0.05 / math.log10(4))
    assert t["trend"] and (t["gpus_min"], t["gpus_max"], t["rows"]) == (256, 4096, 3)
    assert "src: model, fw" in format_trend_line(t) and "+8.3" in format_trend_line(t)


def test_a_noisy_series_is_no_clear_trend():
    t = scale_trends([_row(10, 0.0), _row(100, 0.10), _row(1000, 0.0), _row(10000, 0.10)])[0]
    # x deviations -1.5, -0.5, 0.5, 1.5 (Sxx 5); slope = (0.05 + 0.15 ... ) : sum(dx*dy) = 0.1 x (-0.5 + 1.5) = 0.1.
    assert t["slope_per_decade"] == pytest.approx(0.1 / 5)
    assert not t["trend"]


def _lay(stated, measured, predicted=None):
    return {"stated": stated, "measured": measured, "predicted": measured if predicted is None else predicted}


def test_replicated_pairs_by_hand():
    # Two groups of one job (e.g. two kernel settings) measure layouts A and B. Group 1: A 110, B 100
    # (A faster, decisive); group 2: A 100, B 120 (B faster). Group 3 (another job) measures A and C.
    # The A-B pair has one vote each way: a ranking that orders it one way gets one of the two.
    # Predictions follow the measurements except in g2, where A is predicted faster than B.
    g1 = {"id": "g1", "job": "j", "layouts": [_lay("A", 110), _lay("B", 100)]}
    g2 = {"id": "g2", "job": "j", "layouts": [_lay("A", 100, 130), _lay("B", 120), _lay("C", 101)]}
    g3 = {"id": "g3", "job": "k", "layouts": [_lay("A", 100), _lay("C", 150)]}
    r = replicated_pairs([g1, g2, g3])
    # Decisive pairs: g1 A-B; g2 A-B, B-C (120 vs 101); A-C in g2 is 1% apart; g3 A-C. Four in all.
    assert r["decisive"] == 4
    assert (r["repeated_pairs"], r["repeated_measurements"], r["repeated_agreeing"]) == (1, 2, 1)
    assert r["reachable"] == 3
    # Contested: the A-B pair (measured both ways), two instances, planner right in g1 only.
    # Uncontested: B-C in g2 (predicted 120 > 101, right) and A-C in g3 (predicted 100 < 150, right).
    assert (r["contested"], r["contested_right"], r["uncontested"], r["uncontested_right"]) == (2, 1, 2, 2)
    # The same layout measured twice, decisively apart: a pair no ranking can order.
    same = {"id": "g4", "job": "j", "layouts": [_lay("A", 100), _lay("A", 110)]}
    assert replicated_pairs([same])["reachable"] == 0 and replicated_pairs([same])["decisive"] == 1


def test_a_trend_held_at_one_unstated_choice():
    # Three rows at 10, 100, 1000 GPUs, each measured at 100 tokens/s/GPU. The search took the
    # fastest virtual-stage count: errors 0, +5%, +10% (5 points per decade, a trend). Held at
    # vpp 2 every row predicts 100 (slope 0, no trend); at vpp 4, 100 / 102 / 104 (+2 points per
    # decade, residual-free: a trend). A choice only some rows can run (vpp 8) is not tried.
    alts = [{(("vpp", 2),): 100.0, (("vpp", 4),): 100.0},
            {(("vpp", 2),): 100.0, (("vpp", 4),): 102.0, (("vpp", 8),): 105.0},
            {(("vpp", 2),): 100.0, (("vpp", 4),): 104.0, (("vpp", 8),): 110.0}]
    rows = [_row(g, e, alternatives=a) for g, e, a in zip((10, 100, 1000), (0.0, 0.05, 0.10), alts)]
    t = scale_trends(rows)[0]
    assert t["trend"] and t["slope_per_decade"] == pytest.approx(0.05)
    held = t["held"]
    assert (held["knobs"], held["choices"], held["without_trend"]) == (["vpp"], 2, 1)
    assert held["slope_min"] == pytest.approx(0.0, abs=1e-12) and held["slope_max"] == pytest.approx(0.02)
    assert held["flattest"]["choice"] == {"vpp": 2}
    assert "held at one value in every row" in format_trend_line(t) and "vpp 2" in format_trend_line(t)
    # One shared choice that every row ran anyway says nothing new: not reported.
    same = [_row(g, e, alternatives={(("vpp", 1),): 100.0 * (1 + e)}) for g, e in zip((10, 100, 1000), (0.0, 0.05, 0.10))]
    assert held_choice_slopes(same, 0.05) is None
    # One shared choice other than what the rows ran is reported (its slope differs from the series').
    other = [_row(g, e, alternatives={(("vpp", 1),): 100.0}) for g, e in zip((10, 100, 1000), (0.0, 0.05, 0.10))]
    assert held_choice_slopes(other, 0.05)["slope_min"] == pytest.approx(0.0, abs=1e-12)
