"""Review of the run model (costmodel/goodput.py) and its sweep: inputs that crashed, were read
wrongly or priced one run two ways. Each expected value is derived by hand in the test."""

from __future__ import annotations

import json
import warnings

import pytest

from costmodel.goodput import goodput_fraction
from hardware_catalog.errors import PlannerInputError


def _cli(*args):
    from typer.testing import CliRunner

    from planner.cli.main import app

    return CliRunner().invoke(app, list(args))


_8B_64 = ["--model", "8b", "--gpus", "64", "--gpu", "h100", "--tp", "2", "--recompute", "none"]


# ------------------------------------------------------------------- a run that never finishes


def test_goodput_past_float_range_is_zero_without_a_warning():
    """M = 0.05625 s, R = 450 s: R / M = 8,000, past ln(DBL_MAX) = 709.78, so e^(R/M) overflows.
    Daly's wall time is then beyond a double: goodput 0 (no RuntimeWarning on the user's terminal)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert float(goodput_fraction(10.0, 1.0, 450.0, 0.05625)) == 0.0


@pytest.mark.parametrize("command,job", [
    ("evaluate", _8B_64),
    ("search", ["--model", "8b", "--gpus", "64", "--gpu", "h100", "--top", "1"]),
    ("sweep", ["--model", "8b", "--gpus", "64", "--gpu", "h100", "--no-progress"]),
])
def test_a_run_that_never_finishes_is_one_line_exit_2(command, job):
    """64 GPUs at 0.001 h (3.6 s) MTBF each: the job fails every 3.6 / 64 = 0.05625 s, against a
    restart of at least relaunch 300 s + NCCL init 150 s = 450 s: R / M >= 8,000 > 709.78, the
    expected wall time overflows a double. Was: ZeroDivisionError in run_block, exit 1."""
    res = _cli(command, *job, "--train-tokens", "1T", "--mtbf-gpu-hours", "0.001")
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1, res.output
    assert "never finishes" in lines[0] and "--mtbf-gpu-hours 0.001" in lines[0] and "0.0563 s" in lines[0]


# ----------------------------------------------------------------------------------------- sweep


def test_report_only_stores_no_token_budget_or_price(tmp_path):
    """--report-only 'runs nothing': a budget and a price given to it price that report only. Was:
    the first --report-only with --train-tokens 1T wrote 1T into a study started without one,
    and every later report (and worker) priced 1T without being asked."""
    from planner.sweep import build_spec, run_sweep

    url = f"sqlite:///{tmp_path / 's.db'}"
    run_sweep(build_spec("8b", "8", "h100"), storage=url)
    priced = run_sweep(None, storage=url, report_only=True, train_tokens=1e12, prices={"*": 2.0})
    assert priced.stats["train_tokens"] == 1e12 and "run_cost_usd" in priced.rows[0]
    again = run_sweep(None, storage=url, report_only=True)
    assert again.stats["train_tokens"] is None and again.stats["prices"] == {}
    assert "run" not in again.rows[0] and "usd_per_mtok" not in again.rows[0]


@pytest.mark.parametrize("text", ["h100=2.5 b200=3", "h100=2.5;b200=3", "h100=2.5=3"])
def test_prices_run_together_are_refused(text):
    """Per-type prices are a comma list. Was: 'h100=2.5 b200=3' lost its space, split at the last
    '=' into the GPU name 'h100=2.5b200' (which the catalog's loose match reads as h100-sxm) and
    price 3: H100 hours priced at $3, not $2.5, without a word."""
    from costmodel.goodput import parse_prices

    with pytest.raises(PlannerInputError, match="--price-per-gpu-hour .* is not understood") as err:
        parse_prices(text, ("b200", "h100-sxm"))
    assert "h100=2.5,b200=4.2" in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------------------------ token counts


@pytest.mark.parametrize("text,tokens", [("1,000B", 1e12), ("15,000,000,000,000", 15e12), ("2,500.5B", 2.5005e12),
                                         ("15 T", 15e12), ("1.5e13", 15e12)])
def test_thousands_separators_are_read(text, tokens):
    from costmodel.goodput import parse_tokens

    assert parse_tokens(text) == pytest.approx(tokens)


@pytest.mark.parametrize("text", ["1,5T", "15,0T", "1,50B", ",15T", "15,T"])
def test_a_comma_that_is_not_a_thousands_separator_is_refused(text):
    """'1,5T' is 1.5T written with a decimal comma. Was: every comma dropped, read as 15T (10x)."""
    from costmodel.goodput import parse_tokens

    with pytest.raises(PlannerInputError, match=f"--train-tokens '{text}': not a number of tokens"):
        parse_tokens(text)


# ------------------------------------------------------------------------------------------ energy


def test_a_job_on_part_of_a_node_is_priced_one_way():
    """4 H100s of an 8-GPU DGX H100 (10.2 kW, datasheet): 4 x 10,200 / 8 = 5,100 W of IT power,
    x PUE 1.1 over the wall time; the search's MWh column (joules_per_gpu_second: 10,200 / 8 x 1.1
    J per GPU-second) and the record's run block must agree. Was: the run block charged the whole
    node (10.2 kW), twice the search's figure in the same record."""
    res = _cli("search", "--model", "8b", "--gpus", "4", "--gpu", "h100", "--top", "1", "--train-tokens", "100B",
               "--json")
    assert res.exit_code == 0, res.output
    rec = json.loads(res.output)["results"][0]
    run = rec["run"]
    assert run["power"]["it_mw"] == pytest.approx(4 * 10_200 / 8 / 1e6)
    assert run["energy_mwh"] == pytest.approx(5_100 * 1.1 * run["days"] * 24 / 1e6)
    assert rec["run_energy_mwh"] == pytest.approx(run["energy_mwh"], rel=1e-4)


def test_a_near_zero_bandwidth_is_one_line_without_warnings():
    """--checkpoint-node-gbps 1e-300 (allowed: > 0): 0.11 TB over 8 nodes at 1e-291 B/s each is
    ~1.4e301 s a save, 2 C M overflows a double in Young's / Daly's sqrt (no RuntimeWarning may
    reach the terminal) and the run never finishes: one line, exit 2."""
    res = _cli("evaluate", *_8B_64, "--train-tokens", "1T", "--checkpoint-node-gbps", "1e-300")
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "never finishes" in lines[0] and "--checkpoint-*-gbps" in lines[0], res.output


def test_an_interval_far_past_the_mtbf_is_one_line_not_a_day_count_of_many_digits():
    """--checkpoint-interval-min 100000 (69 days) on 1,024 GPUs (a job MTBF of 50,677 GPU-hours /
    1,024 = 49.5 h): Daly's wall time per useful second is ~e^(tau / M) = e^(6e6 s / 1.78e5 s) = e^34,
    a goodput of ~1e-13 and a run of 1e15 days. Refused as never finishing, not printed."""
    res = _cli("evaluate", "--model", "8b", "--gpus", "1024", "--gpu", "h100", "--recompute", "full", "--gbs", "1024",
               "--train-tokens", "100T", "--checkpoint-interval-min", "100000")
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "never finishes" in lines[0] and "lower --checkpoint-interval-min" in lines[0]
    # An interval of a day on the same job is an answer.
    ok = _cli("evaluate", "--model", "8b", "--gpus", "1024", "--gpu", "h100", "--recompute", "full", "--gbs", "1024",
              "--train-tokens", "100T", "--checkpoint-interval-min", "1440")
    assert ok.exit_code == 0 and "days for 100T tokens" in ok.output


# ------------------------------------------------------------------------------ async interval


def test_async_interval_rounded_to_steps_still_covers_the_write():
    """Async save: the next snapshot waits for the previous write, so tau >= W (goodput_model's own
    rule; DCP async_save / Megatron --async-save finish one save before the next starts).
    1e9 params -> 14 GB; 1.4 GB/s aggregate -> W = 10 s (a node at 40 GB/s: 0.35 s).
    Snapshot: 1.75 GB per GPU over 64 GB/s = 0.027 s; 8 GPUs at 1,000 s x 8 / 3,600 h each: M = 1,000 s;
    Daly(0.027 s, 1,000 s) ~ sqrt(2 x 0.027 x 1,000) = 7.4 s < W, so tau = W = 10 s. With 7 s steps,
    round(10 / 7) = 1 step = 7 s < W (was); whole steps covering W: ceil(10 / 7) = 2 steps = 14 s."""
    from costmodel.goodput import Hardware, RunInputs, goodput_model

    hw = Hardware(gpus_per_node=8, host_link_gbps=64.0, gpu_watts=700.0, node_watts=10_200.0, node_watts_source="test")
    inputs = RunInputs(async_checkpoint=True, checkpoint_write_gbps=1.4, mtbf_gpu_hours=8 * 1_000 / 3_600)
    g = goodput_model(8, 1e9, 1.75e9, hw, inputs, step_s=7.0)
    assert float(g.write_s) == pytest.approx(10.0)
    assert float(g.daly_s) < 10.0
    assert float(g.interval_s) == pytest.approx(14.0)


def test_min_scaling_efficiency_without_objective_is_refused():
    """--min-scaling-efficiency only moves the '< stops paying' mark that --objective draws. Was:
    accepted and ignored without --objective (a threshold the user set, silently unused)."""
    res = _cli("sweep", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--train-tokens", "1T",
               "--min-scaling-efficiency", "0.5")
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "--min-scaling-efficiency 0.5 needs --objective" in lines[0], res.output


def test_a_small_run_is_not_printed_as_zero():
    """8 H100s (one DGX H100, 10.2 kW) for 1B tokens at $0.01/GPU-hour: ~8e3 tok/s/GPU -> ~4.4 h,
    10.2 kW x 1.1 x 4.4 h ~ 0.05 MWh, 8 x 4.4 h x $0.01 ~ $0.35, $0.01 / 3,600 / 8e3 x 1e6 ~ $3.5e-4
    per million tokens. Was printed '0', '$0' and '$0.000': now three significant figures."""
    res = _cli("sweep", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--no-progress", "--train-tokens", "1B",
               "--price-per-gpu-hour", "0.01", "--json")
    row = json.loads(res.output)["scenarios"][0]
    assert 0.03 < row["energy_mwh"] < 0.07 and 0.2 < row["run_cost_usd"] < 0.5
    from planner.reports.sweep import format_table

    cells = format_table([row]).splitlines()[1].split()
    assert f"{row['energy_mwh']:.3g}" in cells and f"${row['run_cost_usd']:.3g}" in cells
    assert f"${row['usd_per_mtok']:.3g}" in cells
    assert not {"0", "$0", "$0.000"} & set(cells)


def test_run_lines_round_to_what_the_model_knows():
    """The run model's inputs (an MTBF per GPU, a relaunch time, a power per node) hold two or three
    significant figures, so evaluate prints three: 3,553 GPU-hours was '0.00M GPU-hours', 0.07
    expected failures '0', a 64-GPU job's 0.0816 MW '0.08 MW'."""
    from planner.reports.run import _usd, three_figures

    assert three_figures(3553) == "3,550" and three_figures(28.40e6) == "28.4M" and three_figures(791.83) == "792"
    assert three_figures(0.0749) == "0.0749" and three_figures(39827) == "39,800" and three_figures(4.98) == "4.98"
    assert _usd(9493) == "$9,490" and _usd(56.79e6) == "$56.8M"


def test_search_columns_come_from_the_run_block_it_prints():
    """search ranks with a vectorized goodput (the checkpoint interval not rounded to whole steps);
    its table showed that one beside the record's run block (94.5% against 94.4% for 405B on
    16,384 H100). The columns now come from the run block."""
    import json

    from typer.testing import CliRunner

    from planner.cli.main import app

    res = CliRunner().invoke(app, ["search", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--train-tokens", "1T",
                                   "--price-per-gpu-hour", "2", "--top", "3", "--json"])
    assert res.exit_code == 0, res.output
    for rec in json.loads(res.stdout)["results"]:
        run = rec["run"]
        assert rec["goodput"] == run["goodput"] and rec["run_time_days"] == run["days"]
        assert rec["run_cost_usd"] == run["cost_usd"] and rec["run_energy_mwh"] == run["energy_mwh"]


def test_a_zero3_rank_checkpoints_its_shard_not_the_layers_it_gathers():
    # Llama 3 8B fully sharded over 64 GPUs: a rank holds 1/64 of the 2 + 4 + 4 + 4 = 14 bytes per
    # parameter (BF16 weights, FP32 master, Adam m and v), exactly what it writes. "each GPU holds"
    # counted the current and prefetched layers ZeRO-3 gathers for a moment (2.44 GiB vs 1.64).
    from costmodel.params import count_params
    from hardware_catalog import get_model

    job = ("evaluate", "--model", "llama3-8b", "--gpus", "64", "--gpu", "h100", "--tp", "1", "--pp", "1",
           "--mbs", "1", "--recompute", "none", "--train-tokens", "1T", "--json")
    res = _cli(*job, "--zero", "3")
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)
    own = 14 * count_params(get_model("llama3-8b")).total / 64
    assert rec["checkpoint_state_gib"] * 2**30 == pytest.approx(own, rel=1e-9)
    assert rec["memory_gib"]["weights"] + rec["memory_gib"]["optimizer"] > rec["checkpoint_state_gib"] * 1.2
    # ZeRO-1 keeps the whole BF16 weights on every rank: 2 bytes per parameter + 12 / 64.
    res1 = _cli(*job, "--zero", "1")
    rec1 = json.loads(res1.stdout)
    whole = (2 + 12 / 64) * count_params(get_model("llama3-8b")).total
    assert rec1["checkpoint_state_gib"] * 2**30 == pytest.approx(whole, rel=1e-9)
