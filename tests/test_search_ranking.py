"""The search's top rows: intervals, ties, folding, the objective, --rank-by, --within-envelope,
and the same interval and flags on `planner evaluate`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from planner import search
from search.ranking import FOLD_MIN, RERANK_POOL, pool_size


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def main_job():
    return search("405b", 16384, "h100")


def test_pool_sizes():
    assert pool_size(10, "median") == FOLD_MIN == 40
    assert pool_size(20, "median") == 80
    assert pool_size(10, "p10") == RERANK_POOL == 256


def test_every_row_has_an_interval_ties_and_envelope(main_job):
    best = main_job.results[0]
    for rec in main_job.results:
        q, t = rec["tokens_per_s_per_gpu_interval"], rec["step_time_s_interval"]
        assert q["p10"] < rec["tokens_per_s_per_gpu"] < q["p90"]
        assert t["p10"] < rec["step_time_s"] < t["p90"]
        assert isinstance(rec["envelope"], list)
        # ≈ exactly where the step-time intervals overlap #1's.
        overlap = t["p10"] <= best["step_time_s_interval"]["p90"]
        assert rec["ties_best"] == (rec is not best and overlap)
    # The job itself lies outside what the reference runs cover (16,384 GPUs > 6,144).
    assert any(f["mechanism"] == "gpus" and f["scope"] == "job" for f in best["envelope"])
    assert main_job.stats["interval"]["quantiles"] == [10, 50, 90]


def test_flags_match_the_envelope_file(main_job):
    from search.envelope import load

    lo = load()["mechanisms"]["cp_tokens_per_rank"]["min"]
    for rec in main_job.results:
        lay = rec["layout"]
        short = lay["cp"] > 1 and lay["seq_len"] // lay["cp"] < lo
        flagged = [f for f in rec["envelope"] if f["mechanism"] == "cp_tokens_per_rank"]
        assert bool(flagged) == short
        if flagged:
            assert flagged[0]["reason"].startswith(f"CP {lay['cp']} at {lay['seq_len'] // lay['cp']:,} tokens per rank")


def test_within_envelope_keeps_only_supported_layouts(main_job):
    res = search("405b", 16384, "h100", within_envelope=True)
    assert res.results and res.stats["outside_envelope"] > 0
    assert res.stats["fits"] == main_job.stats["fits"]  # counted before the envelope
    for rec in res.results:
        assert not [f for f in rec["envelope"] if f["scope"] == "layout"]
    assert res.results[0]["step_time_s"] >= main_job.results[0]["step_time_s"]


def test_rank_by_p10_orders_by_the_pessimistic_end():
    res = search("llama3-70b", 256, "h100", rank_by="p10", top=8)
    pessimistic = [r["step_time_s_interval"]["p90"] for r in res.results]
    assert pessimistic == sorted(pessimistic)
    assert res.stats["rank_by"] == "p10"


def test_equal_prices_fold_into_one_row():
    # Llama 3 8B on 8 H100s at TP8: one data-parallel replica, so ZeRO 0 and 1 shard nothing
    # and are priced identically: one row, the other listed, the simplest (ZeRO-0) shown. ZeRO-2 is
    # Megatron-FSDP's optim_grads, whose hook copies every micro-batch's gradient into its
    # bucket even with one replica (megatron_fsdp.py _grad_acc: main_grad_copy), and flat ZeRO-3
    # (DeepSpeed's, FSDP1's) adds each micro-batch's gradient into its shard, here the whole of it
    # (autograd): dearer, rows of their own.
    res = search("llama3-8b", 8, "h100", top=3, pins={"tp": 8})
    seen = set()
    for rec in res.results:
        key = (round(rec["step_time_s"], 9), round(rec["memory_gib"]["peak"], 6))
        assert key not in seen
        seen.add(key)
    first = res.results[0]
    assert first["layout"]["zero"] == 0  # the simplest shown
    assert [a["layout"]["zero"] for a in first["alternatives"]] == [1]
    for zero, value in ((2, "main_grad_copy"), (3, "autograd")):
        rows = [r for r in res.results if r["layout"]["zero"] == zero]
        assert rows and rows[0]["layout"]["grad_accum_pass"] == value
        assert rows[0]["step_time_s"] > first["step_time_s"]
    assert first["alternatives"][0]["peak_gib"] == pytest.approx(first["memory_gib"]["peak"])


@pytest.mark.parametrize("objective,metric,lower_is_better", [
    ("step-time", "step_time_s", True),
    ("tokens-per-gpu", "tokens_per_s_per_gpu", False),
])
def test_objective_over_a_gpu_count_range(objective, metric, lower_is_better):
    res = search("llama3-70b", "256..1024", "h100", objective=objective, top=5)
    values = [r[metric] for r in res.results]
    assert values == sorted(values, reverse=not lower_is_better)
    assert res.stats["objective"] == objective


def test_objective_step_time_and_tokens_per_gpu_disagree_over_a_range():
    fast = search("llama3-70b", "256..1024", "h100", top=1).results[0]
    lean = search("llama3-70b", "256..1024", "h100", objective="tokens-per-gpu", top=1).results[0]
    assert fast["gpus"] == 1024 and lean["gpus"] == 256
    assert lean["tokens_per_s_per_gpu"] > fast["tokens_per_s_per_gpu"]


def test_bad_ranking_options_are_one_line_errors():
    for args, needle in ((["--rank-by", "p5"], "--rank-by 'p5' is not allowed"),
                         (["--objective", "speed"], "--objective 'speed' is not allowed"),
                         (["--pareto", "--rank-by", "p10"], "--pareto shows a front")):
        code, _, err = run("search", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--no-progress", *args)
        assert code == 2 and err.startswith("error: ") and needle in err and len(err.strip().splitlines()) == 1


def test_search_table_shows_interval_ties_and_envelope():
    code, out, err = run("search", "--model", "405b", "--gpus", "16384", "--gpu", "h100", "--top", "3", "--no-progress")
    assert code == 0, err
    head = next(line for line in out.splitlines() if line.lstrip().startswith("rank"))
    assert "80% range" in head and "env" in head
    assert "≈: range overlaps #1's" in out
    assert "the job itself: 16,384 GPUs: reference runs cover" in out


def test_evaluate_text_and_json_carry_interval_and_envelope():
    args = ("evaluate", "--model", "405b", "--gpus", "16384", "--gpu", "h100", "--tp", "2", "--pp", "32", "--cp", "16",
            "--vpp", "4", "--mbs", "1", "--recompute", "none")
    code, out, err = run(*args)
    assert code == 0, err
    assert "80% interval  tokens/s/GPU" in out and "envelope      OUTSIDE" in out
    assert "CP 16 at 512 tokens per rank: reference runs cover" in out
    code, out, _ = run(*args, "--json")
    rec = json.loads(out)
    q = rec["tokens_per_s_per_gpu_interval"]
    assert q["p10"] < rec["tokens_per_s_per_gpu"] < q["p90"]
    assert {f["mechanism"] for f in rec["envelope"]} >= {"cp_tokens_per_rank", "gpus"}
    assert set(rec["envelope"][0]) == {"mechanism", "scope", "value", "supported", "reason"}
