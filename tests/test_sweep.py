"""`planner sweep`: scenario grid, table/CSV/JSON/plot, shared studies, every scenario done exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from costmodel.goodput import parse_prices
from hardware_catalog.errors import PlannerInputError
from planner import sweep as sw
from planner.sweep import SweepSpec, build_spec, parse_int_list, run_sweep

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(model="8b", gpus="8,16", gpu="h100,a100")  # 4 quick scenarios


def small_spec(**kw) -> SweepSpec:
    return build_spec(**{**SMALL, **kw})


def once_each(result) -> None:
    """Every scenario of the grid has exactly one complete result."""
    spec = SweepSpec.from_dict(result.stats["spec"])
    assert result.stats["done"] == spec.size == len(result.rows)
    assert result.stats["duplicates"] == 0
    keys = [tuple(sorted(r["scenario"].items(), key=lambda kv: kv[0])) for r in result.rows]
    assert len(set(keys)) == len(keys)


# ---------------------------------------------------------------------------------------- parsing


def test_axes_are_parsed_canonical_and_sorted():
    spec = build_spec("70b,8b,llama3-8b", "1024..4096", "b200,h100", seq_len="8192,4096", tokens_per_batch="4e6")
    assert spec.model == ("llama3-70b", "llama3-8b") and spec.gpu == ("b200", "h100-sxm")
    assert spec.gpus == (1024, 2048, 4096) and spec.seq_len == (4096, 8192)
    assert spec.tokens_per_batch == (4_000_000,) and spec.gbs == (None,)
    assert spec.size == 2 * 2 * 3 * 2
    assert SweepSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert "24 scenarios (2 models x 2 GPU types x 3 GPU counts x 2 sequence lengths x 1 batch size)" == spec.describe()
    assert parse_int_list("--gbs", None) == [None]
    assert parse_prices("2.5") == {"*": 2.5}
    assert parse_prices("h100=2.5,b200=4,1") == {"h100-sxm": 2.5, "b200": 4.0, "*": 1.0}


@pytest.mark.parametrize("kw,needle", [
    (dict(gpus="x"), "--gpus 'x' is not understood"),
    (dict(seq_len="4096,abc"), "--seq-len '4096,abc' is not understood"),
    (dict(gbs="0"), "--gbs '0' is not understood"),
    (dict(gbs="512", tokens_per_batch="4e6"), "give --gbs or --tokens-per-batch, not both"),
    (dict(tokens_per_batch="1000"), "--tokens-per-batch 1000 is smaller than one sequence"),
    (dict(model="nope"), "unknown model 'nope'"),
    (dict(gpu="h100,tpu"), "unknown gpu 'tpu'"),
    (dict(memory_headroom=1.5), "--memory-headroom=1.5"),
])
def test_bad_axes_name_the_value(kw, needle):
    with pytest.raises(PlannerInputError, match=None) as err:
        small_spec(**kw)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("text", ["h100=-1", "abc", "tpu=2"])
def test_bad_prices(text):
    with pytest.raises(PlannerInputError):
        parse_prices(text)


# ------------------------------------------------------------------------------ one process, output


def test_in_memory_sweep_table_csv_json_plot(tmp_path):
    from planner.reports import sweep as sweep_report

    spec = build_spec("8b,405b", "8", "h100", seq_len="4096")
    res = run_sweep(spec, train_tokens=1e12, prices={"h100-sxm": 2.0})
    once_each(res)
    ok = {r["scenario"]["model"]: r for r in res.rows}
    good, bad = ok["llama3-8b"], ok["llama3-405b"]
    assert bad["status"] == "nothing fits" and "no layout fits in memory" in bad["reason"] and bad["best"] is None
    tps = good["best"]["tokens_per_s"]
    # The run's wall time: the training time over the goodput (failures, checkpoints, restarts).
    assert 0 < good["goodput"] < 1
    assert good["run_time_s"] == pytest.approx(1e12 / tps / good["goodput"])
    assert good["run_cost_usd"] == pytest.approx(8 * good["run_time_s"] / 3600 * 2.0)
    # With a token budget, $/M tok is the run's cost over its tokens (goodput included), so that
    # $/M tok x tokens = run cost; without one, the steady step rate's.
    assert good["usd_per_mtok"] == pytest.approx(good["run_cost_usd"] / 1e12 * 1e6)
    assert good["usd_per_mtok"] == pytest.approx(8 * 2.0 / 3600 / tps * 1e6 / good["goodput"])
    steady = run_sweep(build_spec("8b", "8", "h100", seq_len="4096"), prices={"h100-sxm": 2.0}).rows[0]
    assert steady["usd_per_mtok"] == pytest.approx(8 * 2.0 / 3600 / steady["best"]["tokens_per_s"] * 1e6)
    assert good["seq_len_used"] == 4096 and res.worker.ran == 2
    table = sweep_report.format_table(res.rows)
    assert "time to train" in table and "run cost" in table and "no layout fits in memory" in table
    sweep_report.write_csv(tmp_path / "s.csv", res.rows)
    lines = (tmp_path / "s.csv").read_text().splitlines()
    assert len(lines) == 3 and lines[0].startswith("scenario_model,scenario_gpu,scenario_gpus")
    json.dumps(sweep_report.to_json(res.rows, res.stats))
    multi = run_sweep(build_spec("8b", "8,16", "h100,a100"), prices={"*": 2.0})
    sweep_report.plot(tmp_path / "s.png", multi.rows)
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(PlannerInputError, match="nothing to plot"):
        sweep_report.plot(tmp_path / "t.png", [bad])


# ------------------------------------------------------------------ shared studies, exactly once


def journal(tmp_path) -> str:
    return f"journal://{tmp_path / 'sweep.log'}"


def test_duplicate_claims_run_once_and_overflow_trials_do_nothing(tmp_path):
    """Two queued trials claim grid point 0: the later one is pruned. A fresh trial past the grid
    (several workers racing at its end) is pruned without a search."""
    import optuna

    spec = small_spec()
    study, spec, _ = sw.open_sweep(spec, journal(tmp_path), "dup")
    sw.enqueue(study, spec, [0, 0, 1])
    stats = sw.run_worker(study, spec)
    assert stats.ran == spec.size and stats.skipped == 1
    stats2 = sw.WorkerStats()
    study.optimize(sw._objective(study, spec, stats2), n_trials=1)
    assert stats2.overflow == 1 and stats2.ran == 0
    rows, st = sw.collect(study, spec)
    assert st["done"] == spec.size and st["duplicates"] == 0
    assert st["trials_pruned"] == 2 and st["trials_complete"] == spec.size
    assert all(t.state != optuna.trial.TrialState.COMPLETE or sw.RESULT in t.user_attrs for t in study.trials)


def test_dead_worker_on_a_journal_is_waited_for_then_reclaimed(tmp_path):
    spec = small_spec()
    study, spec, _ = sw.open_sweep(spec, journal(tmp_path), "dead")
    study._storage.create_new_trial(study._study_id)  # trial #0, RUNNING, its worker "dies"
    stats = sw.run_worker(study, spec, wait_s=0.3)
    assert stats.gave_up_waiting and stats.ran == spec.size - 1
    res = run_sweep(None, storage=journal(tmp_path), study_name="dead", reclaim=True)
    assert res.worker.reclaimed == 1 and res.worker.queued == 1 and res.worker.ran == 1
    once_each(res)


def test_heartbeat_requeues_a_stale_trial_on_sqlite(tmp_path, monkeypatch):
    from search import storage

    monkeypatch.setattr(storage, "HEARTBEAT_INTERVAL_S", 1)
    monkeypatch.setattr(storage, "GRACE_PERIOD_S", 1)
    url = f"sqlite:///{tmp_path / 'sweep.db'}"
    spec = small_spec()
    study, spec, _ = sw.open_sweep(spec, url, "hb")
    tid = study._storage.create_new_trial(study._study_id)  # trial #0 of a worker that died
    study._storage.record_heartbeat(tid)
    time.sleep(2.2)
    res = run_sweep(spec, storage=url, study_name="hb")
    once_each(res)
    assert res.stats["trials_fail"] == 1 and res.worker.ran == spec.size
    retried = [t for t in study.trials if t.system_attrs.get("retry_of") == 0]
    assert len(retried) == 1 and retried[0].state.name == "COMPLETE"


def run_cli(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "planner", "sweep", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)


@pytest.mark.slow
def test_two_worker_processes_share_a_journal_study_each_scenario_once(tmp_path):
    args = ["--model", "8b,mcore-gpt-1.7b", "--gpus", "8..32", "--gpu", "h100,a100", "--storage",
            str(tmp_path / "sweep.log"), "--study-name", "two", "--json"]
    procs = [run_cli(*args) for _ in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(json.loads(out))
    n = 2 * 3 * 2
    assert sum(o["stats"]["worker"]["ran"] for o in outs) == n
    for o in outs:
        assert o["stats"]["done"] == n and o["stats"]["duplicates"] == 0
    by_worker = {o["stats"]["worker"]["worker"]: o["stats"]["worker"]["ran"] for o in outs}
    assert sorted(r["worker"] for r in outs[0]["scenarios"]) == sorted(
        w for w, k in by_worker.items() for _ in range(k))
    again = run_cli("--storage", str(tmp_path / "sweep.log"), "--study-name", "two", "--json")
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    rerun = json.loads(out)["stats"]
    assert rerun["worker"]["ran"] == 0 and rerun["done"] == n and rerun["trials"] == outs[0]["stats"]["trials"]


# ------------------------------------------------------------------------------------- CLI input


@pytest.mark.parametrize("args,needle", [
    (["--model", "8b", "--gpus", "8"], "--gpu missing"),
    ([], "give the scenario axes"),
    (["--model", "8b", "--gpus", "8", "--gpu", "h100", "--storage", "x.txt"], "--storage 'x.txt' is not understood"),
    (["--model", "8b", "--gpus", "8", "--gpu", "h100", "--price-per-gpu-hour", "h100=0"], "--price-per-gpu-hour"),
    (["--model", "8b", "--gpus", "8", "--gpu", "h100", "--train-tokens", "-1"], "--train-tokens=-1"),
    (["--model", "8b", "--gpus", "8", "--gpu", "h100", "--storage", "/no/such/dir/s.log"], "does not exist"),
])
def test_cli_bad_input_one_line_exit_2(args, needle):
    from typer.testing import CliRunner

    from planner.cli.main import app

    res = CliRunner().invoke(app, ["sweep", *args])
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0], res.output


def test_joining_a_study_with_other_axes_is_refused(tmp_path):
    url = journal(tmp_path)
    run_sweep(build_spec("8b", "8", "h100"), storage=url, study_name="s")
    with pytest.raises(PlannerInputError, match="already holds a different sweep .differs in: gpus"):
        run_sweep(build_spec("8b", "16", "h100"), storage=url, study_name="s")
    with pytest.raises(PlannerInputError, match="no such study"):
        run_sweep(None, storage=url, study_name="other")
    res = run_sweep(None, storage=url, study_name="s", report_only=True)
    assert res.worker is None and res.stats["done"] == 1


def test_search_optuna_shares_a_study(tmp_path):
    from planner import search

    url = journal(tmp_path)
    kw = dict(gbs=256, method="optuna", trials=25, top=3, storage=url, study_name="opt")
    a = search("8b", "32..64", "h100", **kw)
    b = search("8b", "32..64", "h100", **kw)  # the study already holds 25 trials: none more
    assert a.stats["study_trials"] == b.stats["study_trials"] == 25
    assert b.best["step_time_s"] == pytest.approx(a.best["step_time_s"])
    with pytest.raises(PlannerInputError, match="different search"):
        search("8b", "32..64", "h100", **{**kw, "gbs": 512})
    with pytest.raises(PlannerInputError, match="--method optuna"):
        search("8b", "32", "h100", storage=url, method="exhaustive")


@pytest.mark.slow
def test_workers_starting_together_on_a_new_sqlite_store_all_join(tmp_path):
    # Issue 28: Optuna's RDB set-up races on alembic_version (IntegrityError) when several
    # workers create one new SQLite file at once (2 of 4 paired starts failed before the fix);
    # each must join the one study, and the scenario is done once.
    import optuna

    db = tmp_path / "race.db"
    command = [sys.executable, "-m", "planner", "sweep", "--model", "8b", "--gpus", "8", "--gpu", "h100",
               "--storage", str(db), "--wait", "0"]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outs]
    study = optuna.load_study(study_name="planner-sweep", storage=f"sqlite:///{db}")
    assert len([t for t in study.trials if t.state.name == "COMPLETE" and sw.RESULT in t.user_attrs]) == 1


def test_report_only_on_a_missing_store_creates_nothing(tmp_path):
    for store in (tmp_path / "none.db", tmp_path / "none.log"):
        with pytest.raises(PlannerInputError, match="nothing was created"):
            sw.run_sweep(None, storage=str(store), report_only=True)
        assert not store.exists()


@pytest.mark.parametrize("url", ["postgresql://bob:s3cret@localhost:1/db", "mysql+pymysql://bob:s3cret@h/db",
                                 "postgresql://h/db?user=bob&password=s3cret"])
def test_a_storage_password_is_never_shown(url):
    from search.storage import open_storage, redact

    assert "s3cret" not in redact(url) and "***" in redact(url)
    with pytest.raises(PlannerInputError) as err:
        open_storage(url)
    assert "s3cret" not in str(err.value)


def test_a_sweep_where_no_scenario_fits_exits_3():
    """As search: exit 3 when nothing fits (405B on 8 H100s needs far more than 8 x 80 GB); a sweep
    where one scenario fits is answered (exit 0)."""
    from typer.testing import CliRunner

    from planner.cli.main import app

    runner = CliRunner()
    res = runner.invoke(app, ["sweep", "--model", "405b", "--gpus", "8", "--gpu", "h100"])
    assert res.exit_code == 3, res.output
    assert "nothing fits" in res.output or "no layout fits" in res.output
    assert runner.invoke(app, ["sweep", "--model", "8b,405b", "--gpus", "8", "--gpu", "h100"]).exit_code == 0


def test_a_worker_that_finds_the_study_done_says_so():
    # Re-running a finished sweep printed '2 of 2 scenarios done' over 'ran 0 searches in 0.0 s;
    # skipped 0 done or held by others', as if it had found nothing to do for another reason.
    from planner.reports.sweep import format_summary

    stats = {"spec": {"memory_headroom": 0.05}, "scenarios": 2, "done": 2, "study": "t1", "storage": "s.log"}
    idle = {"worker": "vm:1", "ran": 0, "skipped": 0, "seconds": 0.0}
    assert format_summary(stats, idle).splitlines()[1] == (
        "this worker (vm:1) ran no search: every scenario was done before it started")
    busy = {**idle, "ran": 1, "skipped": 1, "seconds": 0.2}
    assert "ran 1 search in 0.2 s; skipped 1 done or held by others" in format_summary(stats, busy)


def test_every_scenario_invalid_is_bad_input_and_the_plot_format_is_checked_first(tmp_path):
    """A batch no scenario can take (search: exit 2) made sweep exit 3, 'nothing fits'; and --plot
    x.pdf failed only after every search had run and the CSV was written."""
    from typer.testing import CliRunner

    from planner.cli.main import app

    runner = CliRunner()
    csv = tmp_path / "y.csv"
    res = runner.invoke(app, ["sweep", "--model", "8b", "--gpus", "16", "--gpu", "h100", "--tokens-per-batch",
                              "1000000", "--seq-len", "8192", "--csv", str(csv), "--no-progress"])
    assert res.exit_code == 2 and "every scenario is invalid: --tokens-per-batch=1,000,000" in res.output
    assert not csv.exists()
    res = runner.invoke(app, ["sweep", "--model", "8b", "--gpus", "64,128", "--gpu", "h100", "--csv", str(csv),
                              "--plot", str(tmp_path / "x.pdf"), "--no-progress"])
    assert res.exit_code == 2 and "the file must end in .png, .svg, .html" in res.output and not csv.exists()


def test_scaling_marks_use_the_step_time_without_a_token_budget_and_name_each_series():
    """--min-scaling-efficiency with --objective step-time and no --train-tokens was ignored (no
    'stops paying' line, diminishing_from_gpus null); two sequence lengths of one model and GPU
    printed the same 'llama3-8b on h100-sxm' line twice."""
    def row(gpus, step, seq=8192, gbs=512):
        return {"scenario": {"model": "m", "gpu": "g", "gpus": gpus}, "seq_len_used": seq, "gbs_used": gbs,
                "best": {"step_time_s": step, "tokens_per_s_per_gpu": 1.0}}

    # 1,024 -> 2,048 GPUs: 10 s -> 5.3 s, 1.89x for 2x the GPUs (89% of the added GPUs); 2,048 ->
    # 4,096: 5.3 -> 3.05 s, 1.74x (74%): below 0.8 from 4,096.
    rows = [row(1024, 10.0), row(2048, 10.0 / 1.89), row(4096, 10.0 / 1.89 / 1.74)]
    (summary,) = sw.mark_scaling(rows, "step-time", 0.8)
    assert summary["diminishing_from_gpus"] == 4096 and summary["timed_by"] == "step"
    assert [round(m["efficiency"], 2) for m in summary["marginal"]] == [0.89, 0.74]
    from planner.reports.sweep import format_scaling

    two = sw.mark_scaling([row(16, 2.0, 4096, 1024), row(32, 1.0, 4096, 1024), row(16, 8.0, 16384, 256),
                           row(32, 4.0, 16384, 256)], "step-time")
    text = format_scaling({"scaling": two})
    assert "m on g (seq 4096, gbs 1024): best" in text and "m on g (seq 16384, gbs 256): best" in text
    assert "step time, count by count" in text


def test_joining_with_a_price_for_a_type_the_sweep_lacks_stores_nothing(tmp_path):
    """An h100-only stored sweep joined with --price-per-gpu-hour b200=4: refused (b200 is not one
    of its GPU types) before the price is stored, so a later --report-only has no price to read."""
    url = journal(tmp_path)
    run_sweep(build_spec("8b", "8", "h100"), storage=url, study_name="s")
    with pytest.raises(PlannerInputError, match="b200 is not a GPU type of this sweep"):
        run_sweep(None, storage=url, study_name="s", train_tokens=1e12, prices={"b200": 4.0})
    res = run_sweep(None, storage=url, study_name="s", report_only=True)
    assert res.stats["prices"] == {} and res.stats["train_tokens"] is None
