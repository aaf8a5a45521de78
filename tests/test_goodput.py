"""The goodput model (costmodel/goodput.py): a case derived by hand, properties, the CLI's run
block and its bad values."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.goodput import (
    MTBF_GPU_HOURS, RunInputs, checkpoint_bytes, daly_interval_s, diminishing_from, goodput_fraction, job_mtbf_s,
    parse_tokens, write_time_s, young_interval_s,
)
from hardware_catalog.errors import PlannerInputError


# ------------------------------------------------------------------------------- by hand, one case


def test_interval_and_goodput_by_hand():
    """16,384 GPUs at 50,000 h MTBF each, a 60 s checkpoint, a 600 s restart.

    M = 3600 s x 50,000 / 16,384 = 10,986.33 s (3.05 h).
    Young: sqrt(2 x 60 x 10,986.33) = sqrt(1,318,359) = 1,148.20 s.
    Daly: x = C / 2M = 60 / 21,972.66 = 0.0027307, sqrt(x) = 0.052256;
          1,148.20 x (1 + 0.052256/3 + 0.0027307/9) - 60 = 1,148.20 x 1.017722 - 60 = 1,108.55 s.
    Goodput: R/M = 0.054613 -> e^(R/M) = 1.056132; (tau + C)/M = 1,168.55 / 10,986.33 = 0.106363
          -> e^0.106363 - 1 = 0.112225; 10,986.33 x 1.056132 x 0.112225 = 1,302.16;
          1,108.55 / 1,302.16 = 0.8513.
    First order (Young's own accounting): 1 - C/tau - (tau/2 + R)/M = 1 - 0.0541 - 0.1051 = 0.841,
    a little below the exact expression, as it should be for a first-order loss estimate."""
    m = float(job_mtbf_s(16_384, 8, 50_000.0))
    assert m == pytest.approx(10_986.33, rel=1e-6)
    assert float(young_interval_s(60.0, m)) == pytest.approx(1_148.20, rel=1e-5)
    tau = float(daly_interval_s(60.0, m))
    assert tau == pytest.approx(1_108.55, rel=1e-5)
    g = float(goodput_fraction(tau, 60.0, 600.0, m))
    assert g == pytest.approx(0.8513, abs=1e-4)
    assert g == pytest.approx(0.841, abs=0.015)


def test_llama3_default_mtbf():
    """419 interruptions in 54 days on 16,384 GPUs: the job's MTBF is 54 x 24 / 419 = 3.093 h."""
    assert MTBF_GPU_HOURS == pytest.approx(16_384 * 54 * 24 / 419)
    assert float(job_mtbf_s(16_384, 8, MTBF_GPU_HOURS)) / 3600 == pytest.approx(3.093, abs=1e-3)


def test_node_failures_add_their_rate():
    """2 GPUs/h from 16 GPUs at 8 h plus 2 nodes at 2 h (1/h): 3 per hour -> 1,200 s."""
    assert float(job_mtbf_s(16, 8, 8.0, 2.0)) == pytest.approx(1200.0)


def test_checkpoint_size_and_write_time():
    """405.85B params x 14 B = 5.68 TB. 2,048 nodes at 40 GB/s each write it in 5.68e12 / 2048 /
    40e9 = 0.069 s; a 1,000 GB/s file system takes 5.68 s: the file system sets the time."""
    total = float(checkpoint_bytes(405.85e9))
    assert total == pytest.approx(5.6819e12, rel=1e-4)
    assert float(write_time_s(total, 16_384, 8, 1_000.0, 40.0)) == pytest.approx(5.6819, rel=1e-4)
    assert float(write_time_s(total, 16_384, 8, 1e6, 40.0)) == pytest.approx(total / 2048 / 40e9)


def test_daly_caps_at_mtbf():
    """A checkpoint longer than 2M: checkpoint every M (Daly 2006)."""
    assert float(daly_interval_s(5_000.0, 2_000.0)) == 2_000.0


@pytest.mark.parametrize("text", ["15T", "15e12", "1.5e13", "15000B", "15_000_000_000_000", "15t"])
def test_token_budgets(text):
    assert parse_tokens(text) == pytest.approx(15e12)


def test_300b():
    assert parse_tokens("300B") == 3e11


@pytest.mark.parametrize("text", ["abc", "15X", "", "1e16", "0", "-1", "1..2", "nan"])
def test_bad_token_budgets(text):
    with pytest.raises(PlannerInputError, match="--train-tokens"):
        parse_tokens(text)


# ------------------------------------------------------------------------------------- properties

_mtbf = st.floats(600.0, 1e7)
_save = st.floats(0.01, 2_000.0)
_restart = st.floats(0.0, 3_600.0)


def _optimum(save, restart, m):
    return float(goodput_fraction(daly_interval_s(save, m), save, restart, m))


@settings(max_examples=200, deadline=None)
@given(_save, _restart, _mtbf, st.floats(1.01, 10.0))
def test_more_mtbf_never_lowers_goodput(save, restart, m, k):
    assert _optimum(save, restart, m * k) >= _optimum(save, restart, m) - 1e-12


@settings(max_examples=200, deadline=None)
@given(_save, _restart, _mtbf, st.floats(1.01, 10.0))
def test_longer_save_or_restart_never_raises_goodput(save, restart, m, k):
    g = _optimum(save, restart, m)
    assert _optimum(save * k, restart, m) <= g + 1e-12
    assert _optimum(save, restart * k + 1.0, m) <= g + 1e-12
    assert 0.0 < g <= 1.0


@settings(max_examples=200, deadline=None)
@given(_save, _restart, _mtbf)
def test_daly_is_near_the_optimum(save, restart, m):
    """Daly's interval is within 0.5% of the best interval on a fine grid (while C < M / 2)."""
    if save > m / 2:
        return
    grid = np.geomspace(save / 100, 3 * m, 4000)
    best = float(np.max(goodput_fraction(grid, save, restart, m)))
    assert _optimum(save, restart, m) >= best * 0.995


@settings(max_examples=200, deadline=None)
@given(st.floats(0.1, 600.0), st.floats(0.0, 0.5), _restart, _mtbf)
def test_async_save_never_slower(write, snapshot_share, restart, m):
    """Async save blocks only for the snapshot (<= half the write here) but a failure during the
    background write costs about one write more: it never loses while the write is short
    against the MTBF (W <= M / 10), the case the model is for."""
    if write > m / 10:
        return
    snap = write * snapshot_share
    sync = _optimum(write, restart, m)
    tau = max(float(daly_interval_s(snap, m)), write) if snap > 0 else write
    asynchronous = float(goodput_fraction(tau, snap, restart + write, m))
    assert asynchronous >= sync - 1e-12


def test_more_gpus_lower_goodput():
    from costmodel.goodput import wall_factor
    from hardware_catalog import get_cluster, get_gpu, get_model

    w = wall_factor(np.array([1024, 4096, 16384, 65536]), get_model("405b"), get_cluster("dgx-h100"),
                    get_gpu("h100"), RunInputs())
    assert np.all(np.diff(w) > 0) and w[0] > 1.0


def test_diminishing_returns_by_hand():
    """Days 100 -> 52 (x1.92: 92% of the GPUs added turn into speed) -> 30 (x1.73: 73%) at
    doublings: the step to 4x stops paying at an 80% threshold, none at 70%."""
    assert diminishing_from([1, 2, 4], [100.0, 52.0, 30.0], 0.8) == 4
    assert diminishing_from([1, 2, 4], [100.0, 52.0, 30.0], 0.7) is None


def test_catalog_node_power_covers_its_gpus():
    """A node's system power (datasheet) is more than its GPUs' TDP."""
    from hardware_catalog import get_gpu, list_clusters

    with_power = [c for c in list_clusters() if c.node_power_watts]
    assert len(with_power) >= 5
    for c in with_power:
        assert c.node_power_watts > c.gpus_per_node * get_gpu(c.gpu).tdp_watts
        assert "node_power_watts" in c.sources


# -------------------------------------------------------------------------------------------- CLI

_JOB = ["--model", "405b", "--gpus", "16384", "--gpu", "h100", "--tp", "8", "--pp", "16", "--vpp", "8", "--cp", "2"]


def _cli(*args):
    from typer.testing import CliRunner

    from planner.cli.main import app

    return CliRunner().invoke(app, list(args))


def test_evaluate_run_block_matches_the_formulas():
    res = _cli("evaluate", *_JOB, "--train-tokens", "15T", "--json", "--mtbf-gpu-hours", "50000",
               "--checkpoint-write-gbps", "1000", "--price-per-gpu-hour", "2")
    assert res.exit_code == 0, res.output
    rec = json.loads(res.output)
    run, inp = rec["run"], rec["run"]["inputs"]
    m = 3600 * 50_000 / 16_384
    assert run["failures"]["job_mtbf_h"] * 3600 == pytest.approx(m)
    ck = run["checkpoint"]
    total = 14 * inp["params"]
    assert ck["total_tb"] * 1e12 == pytest.approx(total)
    # 1,000 GB/s for 5.68 TB; 2,048 nodes at 40 GB/s would take 0.07 s
    assert ck["write_s"] == pytest.approx(total / 1000e9)
    assert ck["blocking_s"] == ck["write_s"] and ck["mode"] == "sync"
    daly = math.sqrt(2 * ck["write_s"] * m) * (1 + math.sqrt(ck["write_s"] / (2 * m)) / 3
                                               + ck["write_s"] / (2 * m) / 9) - ck["write_s"]
    assert ck["daly_interval_min"] * 60 == pytest.approx(daly)
    assert ck["young_interval_min"] * 60 == pytest.approx(math.sqrt(2 * ck["write_s"] * m))
    # the interval taken: Daly's, rounded to whole steps
    assert abs(ck["interval_min"] * 60 - daly) <= rec["step_time_s"] / 2 + 1e-9
    rs = run["restart"]
    assert rs["total_s"] == pytest.approx(rs["relaunch_s"] + rs["nccl_init_s"] + rs["load_s"])
    tau = ck["interval_min"] * 60
    g = tau / (m * math.exp(rs["total_s"] / m) * math.expm1((tau + ck["write_s"]) / m))
    assert run["goodput"] == pytest.approx(g)
    days = 15e12 / rec["tokens_per_s"] / g / 86400
    assert run["days"] == pytest.approx(days)
    assert run["gpu_hours"] == pytest.approx(16_384 * days * 24)
    assert run["cost_usd"] == pytest.approx(run["gpu_hours"] * 2)
    # 2,048 DGX H100 at 10.2 kW, PUE 1.1
    assert run["energy_mwh"] == pytest.approx(2048 * 10.2e3 * 1.1 * days * 24 / 1e6)
    assert inp["train_tokens"] == 15e12 and inp["checkpoint_write_gbps"] == 1000


def test_evaluate_report_prints_the_run():
    res = _cli("evaluate", *_JOB, "--train-tokens", "15T", "--async-checkpoint")
    assert res.exit_code == 0, res.output
    text = res.output
    for needle in ("failures    one every", "checkpoint  ", "async: blocks", "goodput     ", "days for", "MWh"):
        assert needle in text
    plain = _cli("evaluate", *_JOB)
    assert "goodput" not in plain.output


@pytest.mark.parametrize("command", ["evaluate", "search", "sweep"])
@pytest.mark.parametrize("flag,value,needle", [
    ("--mtbf-gpu-hours", "0", "--mtbf-gpu-hours=0"),
    ("--mtbf-gpu-hours", "-5", "--mtbf-gpu-hours=-5"),
    ("--mtbf-node-hours", "0", "--mtbf-node-hours=0"),
    ("--checkpoint-write-gbps", "0", "--checkpoint-write-gbps=0"),
    ("--checkpoint-node-gbps", "0", "--checkpoint-node-gbps=0"),
    ("--pue", "0.5", "--pue=0.5"),
    ("--train-tokens", "abc", "--train-tokens 'abc'"),
    ("--train-tokens", "15Q", "--train-tokens '15Q'"),
])
def test_bad_run_values_one_line_exit_2(command, flag, value, needle):
    job = {"evaluate": _JOB, "search": ["--model", "8b", "--gpus", "8", "--gpu", "h100"],
           "sweep": ["--model", "8b", "--gpus", "8", "--gpu", "h100"]}[command]
    res = _cli(command, *job, flag, value)
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0], res.output


def test_sweep_objective_needs_a_token_budget():
    res = _cli("sweep", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--objective", "time-to-train")
    assert res.exit_code == 2 and "--train-tokens" in res.output


def test_sweep_marks_the_optimum_and_where_gpus_stop_paying(tmp_path):
    res = _cli("sweep", "--model", "8b", "--gpus", "8..64", "--gpu", "h100", "--train-tokens", "1T",
               "--objective", "time-to-train", "--min-scaling-efficiency", "0.99", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    rows = out["scenarios"]
    assert all(0 < r["goodput"] < 1 and r["run"]["days"] == pytest.approx(r["run_time_s"] / 86400) for r in rows)
    best = [r for r in rows if r.get("optimum")]
    assert len(best) == 1 and best[0]["run_time_s"] == min(r["run_time_s"] for r in rows)
    scaling = out["stats"]["scaling"][0]
    steps = scaling["marginal"]
    first_below = next((s["to"] for s in steps if s["efficiency"] < 0.99), None)
    assert scaling["diminishing_from_gpus"] == first_below
    for s in steps:
        a = next(r for r in rows if r["scenario"]["gpus"] == s["from"])
        b = next(r for r in rows if r["scenario"]["gpus"] == s["to"])
        assert s["efficiency"] == pytest.approx((a["run_time_s"] / b["run_time_s"] - 1) / (s["to"] / s["from"] - 1))


def test_search_ranks_time_to_train_in_wall_time():
    """Over GPU counts the wall-time ranking carries goodput: each row's run time is its
    training time over its goodput, and the rows are in that order."""
    from planner import search

    res = search("8b", "8,64", "h100", top=4, train_tokens=1e12, objective="time-to-train",
                 run=RunInputs(mtbf_gpu_hours=50.0))
    times = [r["run_time_s"] for r in res.results]
    assert times == sorted(times)
    for r in res.results:
        assert r["run_time_s"] == pytest.approx(1e12 / r["tokens_per_s"] / r["goodput"])
    # at 50 h per GPU, 64 GPUs fail every 47 min: goodput well below 8 GPUs' (6 h)
    by_gpus = {r["gpus"]: r["goodput"] for r in res.results}
    if len(by_gpus) == 2:
        assert by_gpus[64] < by_gpus[8]


def test_a_job_on_part_of_a_node_reads_its_checkpoint_over_that_share_of_the_link():
    """4 GPUs each holding 40 GB on one 8-GPU node with a 40 GB/s link: 4 x 40 / 40 = 4 s (it was
    8 x 40 / 40 = 8 s, as if the idle GPUs of the node read too); 16 GPUs on two nodes: 8 s each.
    The aggregate bound (1,000 GB/s here) is below both."""
    from costmodel.goodput import load_time_s

    gb = 1e9
    assert load_time_s(40 * gb, 4, 8, 1000.0, 40.0) == pytest.approx(4.0)
    assert load_time_s(40 * gb, 16, 8, 1000.0, 40.0) == pytest.approx(8.0)
