"""Ctrl-C: planner owns SIGINT. A command interrupted exits 130 with one line on stderr, writes
no partial file, and a sweep stores no interrupted scenario as done (issue 28)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def _interrupt(args: list[str], after_s: float, cwd) -> subprocess.CompletedProcess:
    """Run ``python -m planner ARGS``, send SIGINT ``after_s`` seconds after it started."""
    proc = subprocess.Popen([sys.executable, "-m", "planner", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd, env=ENV)
    time.sleep(after_s)
    assert proc.poll() is None, "finished before the interrupt: give it more work"
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    took = time.monotonic() - sent
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), took


def test_sigint_during_search_exits_130_with_one_line_and_no_file(tmp_path):
    csv = tmp_path / "out.csv"
    # 10^6 optuna trials never finish in the test's time: the interrupt lands in the search.
    res, took = _interrupt(["search", "--model", "8b", "--gpus", "64..4096", "--gpu", "h100",
                            "--method", "optuna", "--trials", "1000000", "--csv", str(csv)], 2.5, tmp_path)
    assert res.returncode == 130, res.stderr
    assert res.stderr.splitlines() == ["interrupted (Ctrl-C)"]
    assert took < 5  # within a second on an idle machine; slack for a loaded CI runner
    assert list(tmp_path.iterdir()) == []  # no csv, no temporary sibling


def test_sigint_during_import_is_interrupted_not_internal_error(tmp_path):
    # 0.05 s: Python and the planner package are still loading.
    res, _ = _interrupt(["search", "--model", "8b", "--gpus", "64", "--gpu", "h100"], 0.05, tmp_path)
    assert res.returncode == 130, res.stderr
    assert res.stderr.splitlines() == ["interrupted (Ctrl-C)"]


def test_sigint_during_sweep_stores_no_partial_scenario(tmp_path):
    optuna = pytest.importorskip("optuna")
    from optuna.trial import TrialState

    from planner.sweep import RESULT

    db = f"sqlite:///{tmp_path / 'sweep.db'}"
    args = ["sweep", "--model", "8b,70b", "--gpus", "64,128,256,512,1024,2048", "--gpu", "h100",
            "--storage", db]
    res, _ = _interrupt(args, 3.0, tmp_path)
    assert res.returncode == 130, res.stderr
    assert res.stderr.splitlines() == ["interrupted (Ctrl-C)"]
    study = optuna.load_study(study_name="planner-sweep", storage=db)
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    # Every scenario stored as done holds a whole result; the interrupted one is not COMPLETE.
    assert all(RESULT in t.user_attrs and t.user_attrs[RESULT]["status"] == "ok" for t in complete)
    assert len(complete) < 12
    assert not [t for t in trials if t.state == TrialState.RUNNING]
