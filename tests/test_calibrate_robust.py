"""Bring-your-own-runs robustness (review of validate / calibrate): the verdict judged as the fit
counts errors, copies of one run held out together and counted once, stale profiles named, the
framework profile said, each moved constant credited with its own move only, and validate's
unit-slip warning (the one calibrate gives)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from costmodel.calibration import DEFAULT
from planner.validate.calibrate import calibrate
from planner.validate.fit import Predictor, prepare
from planner.validate.runs import map_run

# One H100 run of the review (Llama 3 8B, 32 GPUs, TP 2, 8,300 tokens/s/GPU).
H100_RUN = {"id": "l3-8b-32gpu", "source": "our cluster", "gpu": "H100 80GB HBM3", "num_gpus": 32, "model": "llama3-8b",
            "framework": "Megatron-LM", "seq_len": 8192, "gbs": 256, "mbs": 1, "tp": 2, "pp": 1, "cp": 1, "zero": 1,
            "recompute": "none", "precision": "bf16", "tokens_per_s_per_gpu": 8300}


def run_cli(*args):
    proc = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def _synthetic_runs():
    from test_calibrate import TRUTH, _runs

    return _runs(TRUTH)


# ------------------------------------------------------------------------------- 1: the verdict


def test_the_verdict_is_judged_on_the_capped_error_not_one_unit_slip():
    """Two good runs and one 50x off (a unit slip). Plain MAPE: shipped (10 + 8 + 5000) / 3 =
    1672.7%, held out (0 + 0 + 5200) / 3 = 1733.3%: 'no better', decided by the slip alone. As the
    fit counts errors (each up to 20%): (10 + 8 + 20) / 3 = 12.7% -> (0 + 0 + 20) / 3 = 6.7%."""
    from planner.validate.calibrate import _stats
    from planner.validate.calibrate_report import verdict

    stats = {"shipped": _stats(np.array([0.10, -0.08, 50.0])), "held_out": _stats(np.array([0.0, 0.0, 52.0])),
             "loo_unit": "run"}
    said = verdict(stats)
    assert "capped at 20%" in said and "12.7% -> 6.7%" in said and "better than the shipped constants" in said
    assert "no better" not in said
    stats["held_out"] = _stats(np.array([0.15, -0.12, 52.0]))  # (15 + 12 + 20) / 3 = 15.7%: worse
    assert "12.7% -> 15.7%: no better" in verdict(stats)


def test_the_header_counts_the_rows_not_mapped(tmp_path):
    runs = _synthetic_runs()
    h900 = {**runs[1], "id": "h900", "gpu": "H900"}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(runs + [h900]))
    code, out, err = run_cli("calibrate", "--runs", str(path))
    assert code == 0, err
    assert out.splitlines()[0].startswith(f"calibrating on 3 of 4 runs of {path} (high-confidence, 1 not mapped)")


# ---------------------------------------------------------------------------- 2: copies of a run


@pytest.fixture(scope="module")
def three():
    return calibrate(Predictor(prepare([map_run(r) for r in _synthetic_runs()])))


def test_a_copied_run_changes_neither_the_fit_nor_its_intervals(three):
    """Each configuration weighs as one run: with the first run measured twice more, the capped
    mean over (r1/3 + r1/3 + r1/3 + r2 + r3) / 3 is the mean over (r1, r2, r3), so the fit, the
    intervals and the held-out predictions are those of the three runs."""
    runs = _synthetic_runs()
    copies = runs + [{**runs[0], "id": f"{runs[0]['id']}-try{i}"} for i in (2, 3)]
    res = calibrate(Predictor(prepare([map_run(r) for r in copies])))
    assert res.calib == three.calib and res.configurations == 3
    assert [(m.name, m.value, m.interval) for m in res.moved] == [(m.name, m.value, m.interval) for m in three.moved]
    held = {rid: h for rid, *_, h in res.rows}
    assert res.stats["loo_unit"] == "configuration"
    # a copy is held out with its twin: all three get the first run's held-out prediction alone
    first = three.rows[0][5]
    assert [held[runs[0]["id"]], held[f"{runs[0]['id']}-try2"], held[f"{runs[0]['id']}-try3"]] == [first] * 3


def test_copies_of_one_run_are_one_run(tmp_path):
    """Three copies of one run used to give 'leave one run out 0.0%', a confident verdict, no
    warning and an interval narrower than the single run's."""
    one = calibrate(Predictor(prepare([map_run(H100_RUN)])))
    copies = [{**H100_RUN, "id": f"try{i}"} for i in (1, 2, 3)]
    res = calibrate(Predictor(prepare([map_run(r) for r in copies])))
    assert res.stats["held_out"] is None and res.stats["loo_unit"] is None
    assert [(m.name, m.interval) for m in res.moved] == [(m.name, m.interval) for m in one.moved]
    from planner.validate.calibrate_report import verdict, warnings

    assert verdict(res.stats).startswith("one configuration: no leave-one-out estimate")
    assert any(w.startswith("fitted to 1 run (3 runs of one configuration") for w in warnings(res))


# ------------------------------------------------------------------------------ 3: stale profiles


def test_a_profile_fitted_against_other_shipped_constants_is_named_once(tmp_path, capsys):
    from planner.calibration_profile import load_profile

    now = DEFAULT.attention_efficiency
    old = round(now + 0.05, 4)
    profile = tmp_path / "old.toml"
    profile.write_text(f"[constants.attention_efficiency]\nvalue = 0.3\nshipped = {old}\n")
    assert load_profile(profile) == DEFAULT.with_(attention_efficiency=0.3)  # used as written: a warning, no refusal
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: --calibration")
    assert f"constants.attention_efficiency was fitted against shipped {old:g}" in err[0]
    assert f"the shipped value is now {now:g}" in err[0] and "re-run planner calibrate" in err[0]
    load_profile(profile)  # a search reads it many times: said once
    assert capsys.readouterr().err == ""
    current = tmp_path / "current.toml"
    current.write_text(f"[constants.attention_efficiency]\nvalue = 0.31\nshipped = {now}\n")
    load_profile(current)
    assert capsys.readouterr().err == ""


def test_a_shipped_value_that_is_not_a_number_is_refused(tmp_path):
    from hardware_catalog.errors import PlannerInputError
    from planner.calibration_profile import load_profile

    profile = tmp_path / "bad.toml"
    profile.write_text("[constants.attention_efficiency]\nvalue = 0.3\nshipped = 'old'\n")
    with pytest.raises(PlannerInputError, match=r"constants.attention_efficiency.shipped: expected a number, got 'old'"):
        load_profile(profile)


# ----------------------------------------------------------------------------- 4: the framework


def test_an_unknown_framework_says_the_defaults_priced_it():
    said = map_run({**H100_RUN, "framework": "SuperTrainer 3000"}).assumptions
    line = [a for a in said if a.startswith("framework 'SuperTrainer 3000'")]
    assert len(line) == 1 and "no framework profile matches" in line[0] and "planner catalog frameworks" in line[0]
    said = map_run({**H100_RUN, "framework": "Megatron-Core"}).assumptions
    assert "framework 'Megatron-Core': profile 'Megatron-Core r0.8+' applied" in said
    said = map_run({k: v for k, v in H100_RUN.items() if k != "framework"}).assumptions
    assert any(a.startswith("framework not stated: no framework profile matches") for a in said)


# --------------------------------------------------------------------- 5: what each move is credited


class _Row:
    def __init__(self, rid):
        self.id = rid


class _LinearPredictor:
    """One run, reported 110; predicted 100 + 120 x (attention_efficiency - 0.25) + 100 x
    (memory_bound_efficiency - 0.9): hand-checkable moves."""

    rows = [_Row("r")]
    reported = np.array([110.0])

    def __call__(self, calib):
        return np.array([100.0 + 120.0 * (calib.attention_efficiency - 0.25)
                         + 100.0 * (calib.memory_bound_efficiency - 0.9)])

    def errors(self, calib):
        return (self(calib) - self.reported) / self.reported


def test_a_constant_is_credited_only_with_its_own_move():
    """Fit: attention 0.25 -> 0.35, memory-bound 0.9 -> 0.875. Shipped: 100 vs 110, -9.1%.
    Attention alone: 112, +1.8%; memory-bound alone: 97.5, -11.4% (further off); both: 109.5, -0.5%."""
    from planner.validate.calibrate import _why

    assert DEFAULT.attention_efficiency == 0.25 and DEFAULT.memory_bound_efficiency == 0.9  # the hand figures' base
    p = _LinearPredictor()
    fit = DEFAULT.with_(attention_efficiency=0.35, memory_bound_efficiency=0.875)
    att = _why(p, fit, "attention_efficiency")
    assert "predicted 9.1% slow with the shipped 0.25" in att and att.endswith("this constant's move alone: +1.8%")
    mem = _why(p, fit, "memory_bound_efficiency")
    assert "predicted 9.1% slow with the shipped 0.9" in mem and "now" not in mem
    assert mem.endswith("alone does not bring it closer (-11.4%): it moved with the others "
                        "(all the moves together: -0.5%)")


# ----------------------------------------------------------- 6, 7: validate's unit-slip warning


def test_the_shared_check_flags_throughput_past_the_cap_and_memory_past_a_factor_two():
    from planner.validate.measure import suspect_runs_warning

    assert suspect_runs_warning([("a", 0.19), ("b", -0.2)], 0.2, [("m", 10.0, 19.9)]) is None
    said = suspect_runs_warning([("a", 0.19), ("b", -0.25)], 0.2, [("m", 10.0, 25.0), ("n", 0.062, 40.0)])
    assert "1 run off by more than 20% in throughput (b -25%)" in said
    assert "2 runs whose peak memory is off by more than a factor of 2 (m 10 GiB reported, 25.0 predicted, " \
           "n 0.062 GiB reported, 40.0 predicted)" in said
    assert said.endswith("peak_memory_gib in GiB)") and "check the measurement and units" in said


def test_validate_warns_of_unit_slips_and_keeps_large_errors_apart(tmp_path):
    runs = _synthetic_runs()
    slip = {**runs[0], "id": "ms-as-s", "step_time_s": runs[0]["step_time_s"] * 1000}
    tiny = {**runs[1], "id": "tiny-mem", "peak_memory_gib": 0.062}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([slip, tiny]))
    code, out, err = run_cli("validate", "--runs", str(path))
    assert code == 0, err
    warning = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warning) == 1 and "1 run off by more than 20% in throughput (ms-as-s +" in warning[0]
    assert "tiny-mem 0.062 GiB reported" in warning[0] and "check the measurement and units" in warning[0]
    row = next(line for line in out.splitlines() if line.startswith("ms-as-s"))
    assert re.search(r"\d \+\d+%", row) and not re.search(r"\d[+-]\d", row)  # prediction, space, error
    assert "peak memory: 1 row with published peak" in out


def test_calibrate_says_a_peak_memory_is_not_fitted(tmp_path):
    runs = _synthetic_runs()
    runs[2]["peak_memory_gib"] = 40.0
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(runs))
    code, out, err = run_cli("calibrate", "--runs", str(path))
    assert code == 0, err
    assert f"peak memory given for 1 run ({runs[2]['id']}): not fitted" in out


def test_the_error_table_weighs_each_configuration_once_as_the_fit_does():
    """Errors +10% (run a), -30% three times (copies of run b), +5% (run c). Each configuration counts
    once, copies 1/3 each: MAPE (10 + 30 + 5) / 3 = 15%, mean signed (10 - 30 + 5) / 3 = -5%, capped
    at 20% (10 + 20 + 5) / 3 = 11.67%, median of |10|, |30|, |5| = 10%, p90 (type 7 over 5, 10, 30: position
    0.9 x 2 = 1.8) = 10 + 0.8 x 20 = 26%; counted per run instead, MAPE would be 105 / 5 = 21%."""
    from planner.validate.calibrate import _stats

    s = _stats(np.array([0.10, -0.30, -0.30, -0.30, 0.05]), np.array([0, 1, 1, 1, 2]))
    assert s["rows"] == 5
    assert s["mape"] == pytest.approx(0.15) and s["mean_signed_error"] == pytest.approx(-0.05)
    assert s["capped_mape"] == pytest.approx(0.35 / 3) and s["median_abs_error"] == pytest.approx(0.10)
    assert s["p90_abs_error"] == pytest.approx(0.26)
    # two measurements of one configuration that differ (8% and 12%) share its weight: 1/2 each
    s = _stats(np.array([0.08, 0.12, 0.30]), np.array([0, 0, 1]))
    assert s["mape"] == pytest.approx((0.04 + 0.06 + 0.30) / 2) and s["capped_mape"] == pytest.approx(0.15)


def test_copies_of_a_run_move_neither_the_error_table_nor_the_verdict(three):
    """The review's case: six more copies of one run left the fit as it was but moved the shipped MAPE
    and the held-out error (each copy counted as a run). Counted by configuration, the table and the
    verdict's figures are those of the runs without the copies."""
    from planner.validate.calibrate_report import verdict

    runs = _synthetic_runs()
    copies = runs + [{**runs[1], "id": f"{runs[1]['id']}-copy{i}"} for i in range(6)]
    res = calibrate(Predictor(prepare([map_run(r) for r in copies])))
    assert res.calib == three.calib and res.configurations == 3
    for key in ("shipped", "fitted", "held_out"):
        got, want = res.stats[key], three.stats[key]
        assert got["rows"] == 9 and want["rows"] == 3
        for m in ("median_abs_error", "p90_abs_error", "mape", "capped_mape", "mean_signed_error"):
            assert got[m] == pytest.approx(want[m], abs=1e-12), (key, m)
    assert verdict(res.stats) == verdict(three.stats).replace("one run out", "one configuration out")


def test_sources_linked_into_one_fold_leave_one_configuration_out():
    """Source A measured configurations X and Y, source B measured X again: X links A and B, so
    holding out by source leaves one fold and no estimate. With 2 configurations the estimate
    leaves one configuration out instead (X's two runs together), and no verdict says "one
    configuration"."""
    from planner.validate.calibrate import _fold_keys, configuration_keys
    from planner.validate.calibrate_report import verdict

    x, y = _synthetic_runs()[:2]
    runs = [{**x, "id": "x-a", "source": "A"}, {**y, "id": "y-a", "source": "A"}, {**x, "id": "x-b", "source": "B"}]
    predictor = Predictor(prepare([map_run(r) for r in runs]))
    configs = configuration_keys(predictor)
    keys, unit = _fold_keys(predictor, configs)
    assert unit == "configuration" and keys[0] == keys[2] != keys[1]
    res = calibrate(predictor)
    assert res.configurations == 2 and res.stats["loo_unit"] == "configuration"
    held = {rid: h for rid, *_, h in res.rows}
    assert None not in held.values() and held["x-a"] == held["x-b"]
    said = verdict(res.stats, res.configurations)
    assert said.startswith("leaving one configuration out") and "one configuration:" not in said


def test_no_held_out_estimate_is_worded_from_the_configurations():
    """Without a held-out estimate the verdict names what there is: one run, one configuration
    (its copies), never one configuration when the runs hold more."""
    from planner.validate.calibrate import _stats
    from planner.validate.calibrate_report import verdict

    two = {"shipped": _stats(np.array([0.1, 0.2])), "held_out": None, "loo_unit": None}
    assert verdict(two, 1).startswith("one configuration: no leave-one-out estimate")
    assert verdict(two, 2).startswith("2 configurations: no leave-one-out estimate")
    one = {"shipped": _stats(np.array([0.1])), "held_out": None, "loo_unit": None}
    assert verdict(one, 1).startswith("one run: no leave-one-out estimate")
