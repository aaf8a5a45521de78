"""--price-per-gpu-hour and the run-model flags mean the same on search, evaluate and sweep: one
declaration (planner.cli.options.run_options), one reader (costmodel.goodput.parse_prices), a
price per GPU type on every command, and a run flag that nothing would use refused, not dropped.
Each test is a command that answered otherwise before."""

from __future__ import annotations

import json

import pytest

from test_hostile_inputs import cli, one_error_line

JOB = ("--model", "8b", "--gpus", "64")
HOUR = 3600.0


def _json(res) -> dict:
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_search_costs_each_row_at_its_own_gpu_types_price():
    # Was: "--price-per-gpu-hour 'h100=2.5,b200=4': Input should be a valid number" (the sweep took it).
    prices = {"h100-sxm": 2.0, "b200": 4.0}
    out = _json(cli("search", *JOB, "--gpu", "h100,b200", "--price-per-gpu-hour", "h100=2,b200=4",
                    "--train-tokens", "1T", "--objective", "cost", "--top", "12", "--json"))
    rows = out["results"]
    assert {r["gpu"] for r in rows} == {"h100-sxm", "b200"}  # both types among the rows, each at its price
    for r in rows:
        price = prices[r["gpu"]]
        # $ per step = GPUs x step seconds x USD per GPU-hour / 3,600 s
        assert r["cost_per_step_usd"] == pytest.approx(r["gpus"] * r["step_time_s"] * price / HOUR, rel=1e-9)
        # the run: GPUs x wall seconds x price / 3,600 = its GPU-hours x price
        assert r["run_cost_usd"] == pytest.approx(r["gpus"] * r["run_time_s"] * price / HOUR, rel=1e-9)
        assert r["run"]["cost_usd"] == pytest.approx(r["run"]["gpu_hours"] * price, rel=1e-9)
        assert r["run"]["inputs"]["price_per_gpu_hour"] == price
    assert out["stats"]["prices"] == prices


@pytest.mark.parametrize("price, cheapest", [("h100=1,b200=20", "h100-sxm"), ("h100=20,b200=1", "b200")])
def test_cost_ranking_follows_each_types_price(price, cheapest):
    # A B200 has at most 2.3x an H100's dense BF16 rate (2,250 vs 989 TFLOPS, the datasheets in
    # hardware_catalog/data/gpus.toml), so at 20x the price per hour its tokens cost more, and at
    # 1/20 less, whatever the layout: the cheapest row is the other type's in each case.
    out = _json(cli("search", *JOB, "--gpu", "h100,b200", "--price-per-gpu-hour", price, "--objective", "cost",
                    "--top", "1", "--json"))
    assert out["results"][0]["gpu"] == cheapest


def test_a_bare_number_prices_the_types_not_named():
    out = _json(cli("search", *JOB, "--gpu", "h100,b200", "--price-per-gpu-hour", "h100=2,3", "--top", "40", "--json"))
    for r in out["results"]:
        price = 2.0 if r["gpu"] == "h100-sxm" else 3.0
        assert r["cost_per_step_usd"] == pytest.approx(r["gpus"] * r["step_time_s"] * price / HOUR, rel=1e-9)


def test_a_gpu_type_without_a_price_is_refused_on_search_and_sweep(tmp_path):
    csv = tmp_path / "out.csv"
    res = cli("search", *JOB, "--gpu", "h100,b200", "--price-per-gpu-hour", "h100=2", "--csv", csv)
    one_error_line(res, "--price-per-gpu-hour", "no price for b200")
    assert not csv.exists()
    # The sweep left that type's rows without a cost, without a word.
    res = cli("sweep", "--model", "8b", "--gpus", "8", "--gpu", "h100,a100", "--price-per-gpu-hour", "h100=2",
              "--csv", csv)
    one_error_line(res, "--price-per-gpu-hour", "no price for a100-80gb")
    assert not csv.exists()


def test_a_price_for_a_gpu_type_not_run_is_refused_on_every_command():
    # As the sweep refused it ("not a GPU type of this sweep"): the price would be dropped.
    one_error_line(cli("search", *JOB, "--gpu", "h100", "--price-per-gpu-hour", "h100=2,b200=3"),
                   "b200 is not a GPU type of this search", "h100-sxm")
    one_error_line(cli("evaluate", *JOB, "--gpu", "h100", "--tp", "2", "--price-per-gpu-hour", "b200=3"),
                   "b200 is not a GPU type of this evaluation", "h100-sxm")
    one_error_line(cli("evaluate", *JOB, "--gpu", "h100", "--tp", "2", "--price-per-gpu-hour", "h100=2 b200=3"),
                   "not understood")


def test_evaluate_takes_a_price_per_gpu_type_and_says_the_cost_per_step():
    # evaluate took only a number, and without --train-tokens printed no cost at all, though its
    # help said the price "adds the cost (per step ...)".
    job = ("evaluate", *JOB, "--gpu", "h100", "--tp", "2")
    per_type = _json(cli(*job, "--price-per-gpu-hour", "h100=2.5", "--json"))
    one_price = _json(cli(*job, "--price-per-gpu-hour", "2.5", "--json"))
    step, gpus = per_type["step_time_s"], per_type["gpus"]
    assert per_type["run"]["cost_per_step_usd"] == pytest.approx(gpus * step * 2.5 / HOUR, rel=1e-9)
    assert one_price["run"]["cost_per_step_usd"] == per_type["run"]["cost_per_step_usd"]
    text = cli(*job, "--price-per-gpu-hour", "h100=2.5")
    assert f"${gpus * step * 2.5 / HOUR:.3g} per step at $2.5/GPU-hour" in text.stdout
    run = _json(cli(*job, "--price-per-gpu-hour", "h100=2.5", "--train-tokens", "1T", "--json"))["run"]
    assert run["cost_usd"] == pytest.approx(run["gpu_hours"] * 2.5, rel=1e-9)


@pytest.mark.parametrize("flag", [("--mtbf-gpu-hours", "50000"), ("--async-checkpoint",), ("--pue", "1.3")])
def test_a_run_flag_nothing_uses_is_refused(flag, tmp_path):
    # Without a token budget (or a whole-run objective) search and sweep compute no goodput, time
    # or energy: the flag was accepted and the table came out the same, without a word.
    csv = tmp_path / "out.csv"
    one_error_line(cli("search", *JOB, "--gpu", "h100", *flag, "--top", "2", "--csv", csv),
                   flag[0], "--train-tokens")
    one_error_line(cli("sweep", "--model", "8b", "--gpus", "8", "--gpu", "h100", *flag, "--csv", csv),
                   flag[0], "--train-tokens")
    assert not csv.exists()


def test_a_run_flag_is_used_where_a_run_figure_is():
    out = _json(cli("search", *JOB, "--gpu", "h100", "--mtbf-gpu-hours", "50000", "--train-tokens", "1T",
                    "--top", "1", "--json"))
    assert out["results"][0]["run"]["inputs"]["mtbf_gpu_hours"] == 50000
    # evaluate prints its run block (failures, goodput, power) whenever a run flag is given
    run = _json(cli("evaluate", *JOB, "--gpu", "h100", "--tp", "2", "--mtbf-gpu-hours", "50000", "--json"))["run"]
    # the job's MTBF: 50,000 GPU-hours / 64 GPUs
    assert run["failures"]["job_mtbf_h"] == pytest.approx(50_000 / 64, rel=1e-9)


def test_search_ranks_time_to_train_with_the_typed_failure_rate():
    # The table's run time used --mtbf-gpu-hours, the ranking its default (the CLI left the run
    # settings out of the search request): 512 GPUs came first at 20 GPU-hours MTBF each.
    # By hand: at 512 GPUs the job fails every 20/512 h = 141 s, under a third of the 450 s
    # relaunch + NCCL init alone, so goodput < e^(-450/141) = 4% (Daly 2006's expected wall
    # time); 8x the GPUs of 64 run at most 8x faster: 8 x 4% = 33% of 64 GPUs' useful rate,
    # where 64 GPUs fail every 1,125 s and keep more than half their time (e^(-462/1125) = 66%,
    # less the checkpoints). So 64 GPUs finish sooner.
    out = _json(cli("search", "--model", "8b", "--gpus", "64,512", "--gpu", "h100", "--train-tokens", "1T",
                    "--objective", "time-to-train", "--mtbf-gpu-hours", "20", "--top", "1", "--json"))
    best = out["results"][0]
    assert best["gpus"] == 64 and best["run"]["inputs"]["mtbf_gpu_hours"] == 20


def test_the_time_cost_front_counts_the_typed_failure_rate():
    # The front was drawn in useful time (no failures) while its rows reported wall time with
    # --mtbf-gpu-hours: at 20 GPU-hours each, 512 and 256 GPUs took longer (106 and 36 days) and
    # cost more than 128 (28 days), yet stood on the front. A front is a set of rows none of
    # which another row beats on both its reported time and its reported cost.
    out = _json(cli("search", "--model", "8b", "--gpus", "64..512", "--gpu", "h100", "--pareto",
                    "--price-per-gpu-hour", "2", "--train-tokens", "1T", "--mtbf-gpu-hours", "20", "--json"))
    front = [(r["run_time_s"], r["run_cost_usd"]) for r in out["results"]]
    assert front and out["stats"]["objectives"] == ["run_time_s", "run_cost_usd"]
    for t, c in front:
        assert not any(t2 <= t and c2 <= c and (t2, c2) != (t, c) for t2, c2 in front), (t, c, front)
    assert 512 not in {r["gpus"] for r in out["results"]}


def test_joining_a_stored_sweep_checks_the_price_against_its_gpu_types(tmp_path):
    # Without axes the sweep's GPU types come from the study: a price given then was not checked
    # against them, and a type without one was left without its cost.
    store = tmp_path / "sweep.log"
    res = cli("sweep", "--model", "8b", "--gpus", "8", "--gpu", "h100,a100", "--storage", store)
    assert res.exit_code == 0, res.output
    one_error_line(cli("sweep", "--storage", store, "--report-only", "--price-per-gpu-hour", "h100=2"),
                   "no price for a100-80gb")
    one_error_line(cli("sweep", "--storage", store, "--report-only", "--mtbf-gpu-hours", "9000"),
                   "--mtbf-gpu-hours", "--train-tokens")
    res = cli("sweep", "--storage", store, "--report-only", "--price-per-gpu-hour", "h100=2,a100=1")
    assert res.exit_code == 0 and "$/GPU-hour h100-sxm 2, a100-80gb 1" in res.stdout, res.output
