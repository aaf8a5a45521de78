"""planner search: pins no layout can hold are bad input (exit 2, as evaluate says of them), and a
search where no layout obeys the rules writes no empty file."""

from __future__ import annotations

import subprocess
import sys

import pytest

from search.nearest import format_fewest


def run(*args, cwd=None):
    proc = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)
    return proc.returncode, proc.stdout, proc.stderr


def test_pinned_pp_past_the_layers_is_bad_input_as_in_evaluate():
    # Llama 3 8B has 32 layers: 64 pipeline stages cannot each hold one (pp = 64 also divides 64 GPUs,
    # so no GPU-count rule catches it first).
    code, out, err = run("search", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--pp", "64")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "pp=64 exceeds the 32 layers" in err
    code, _, err_eval = run("evaluate", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--pp", "64")
    assert code == 2 and "pp=64 exceeds the 32 layers" in err_eval


@pytest.mark.parametrize("mbs", ["3", "1000000"])
def test_pinned_micro_batch_that_does_not_divide_the_batch_is_bad_input(mbs):
    # gbs = dp * mbs * micro-batches: with gbs 512 only a divisor of 512 can be the micro-batch, whatever dp is.
    code, out, err = run("search", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--gbs", "512", "--mbs", mbs)
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0
    assert f"--mbs {mbs}" in err and "1, 2, 4, 8, 16, 32, 64, 128, 256, 512" in err


def test_a_micro_batch_that_divides_the_batch_still_searches():
    code, out, _ = run("search", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--gbs", "512", "--mbs", "4",
                       "--top", "1")
    assert code == 0
    assert "top 1 layout by" in out  # one layout: singular


def test_no_layout_obeys_the_rules_writes_no_empty_csv(tmp_path):
    # 1,000 GPUs: 175B's 96 layers and gbs 1,536 leave no tp*cp*pp*dp = 1,000 (the README's example).
    csv = tmp_path / "a.csv"
    code, out, err = run("search", "--model", "175b", "--gpus", "1000", "--gpu", "a100", "--csv", str(csv))
    assert code == 3
    assert "no layout obeys the rules" in out
    assert not csv.exists()
    assert f"--csv {csv}: not written, no layout obeys the rules" in out + err


def test_no_layout_obeys_the_rules_draws_no_plot(tmp_path):
    pytest.importorskip("matplotlib")
    csv, png = tmp_path / "a.csv", tmp_path / "a.png"
    code, out, err = run("search", "--model", "175b", "--gpus", "1000", "--gpu", "a100", "--csv", str(csv),
                         "--plot", str(png))
    assert code == 3, err  # was an internal error (exit 1) with the CSV header left behind
    assert "internal error" not in err
    assert not csv.exists() and not png.exists()
    assert f"--plot {png}: not written" in out + err


def test_fewest_gpus_wording_says_whole_nodes_only_at_a_node_or_more():
    # A job smaller than a node may take any GPU count of it (hardware_catalog.is_whole_nodes).
    assert format_fewest(2, True, 8) == "a layout fits from --gpus 2 (the fewest GPUs that fit)"
    assert format_fewest(104, True, 8) == "a layout fits from --gpus 104 (the fewest whole nodes that fit)"
    assert format_fewest(None, True, 8) == ""


def test_tokens_per_batch_takes_the_suffixes_of_train_tokens_in_search_and_sweep():
    # 4M = 4,000,000 tokens = 1,000 sequences of 4,000 (decimal suffixes, as --train-tokens 15T).
    code, out, err = run("search", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--seq-len", "4000",
                         "--tokens-per-batch", "4M", "--top", "1")
    assert code == 0, err
    assert out.startswith("llama3-8b, gbs 1000 x seq 4000")
    code, out, err = run("sweep", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--seq-len", "4000",
                         "--tokens-per-batch", "4M,2M", "--json")
    assert code == 0, err
    import json

    assert sorted(r["gbs_used"] for r in json.loads(out)["scenarios"]) == [500, 1000]


@pytest.mark.parametrize("command", ["evaluate", "export"])
def test_from_and_from_launch_together_are_refused(tmp_path, command):
    # Two sources of one layout: evaluate used to price the launch file and drop --from in silence.
    record = tmp_path / "r.json"
    record.write_text('{"layout": {"tp": 1}}')
    args = [command, "--from", str(record), "--rank", "1", "--from-launch",
            "tests/data/launch/train_llama3_8b_h100_fp8.sh", "--gpu", "h100"]
    if command == "export":
        args += ["--out", str(tmp_path / "out")]
    code, out, err = run(*args)
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "--from-launch" in err and "not both" in err
    assert not (tmp_path / "out").exists()


def test_export_header_names_the_priced_settings_no_file_carries(tmp_path):
    # --tp-overlap-rs-ring, --launch-blocking and --cudnn change the step time but no launch file
    # states them (a reader takes them from the command line): the header says so, and reading the
    # file back with them reproduces the header's step time.
    out = tmp_path / "x"
    code, _, err = run("export", "--model", "70b", "--gpus", "64", "--gpu", "h100", "--tp", "4", "--pp", "4",
                       "--vpp", "5", "--cp", "2", "--tp-comm-overlap", "--tp-overlap-rs-ring", "--launch-blocking",
                       "--cudnn", "2024", "--format", "megatron", "--out", str(out))
    assert code == 0, err
    text = (out / "megatron_args.sh").read_text()
    line = next(x for x in text.splitlines() if x.startswith("# Priced with what"))
    assert "--cudnn 2024" in line and "--launch-blocking" in line and "--tp-overlap-rs-ring" in line
    step = next(x for x in text.splitlines() if x.startswith("# Predicted: step")).split()[3]
    code, back, err = run("evaluate", "--from-launch", str(out / "megatron_args.sh"), "--gpu", "h100", "--gpus", "64",
                          "--tp-overlap-rs-ring", "--launch-blocking", "--cudnn", "2024")
    assert code == 0, err
    assert f"step time {step} s" in back
    # Without them nothing is said.
    plain = tmp_path / "y"
    code, _, err = run("export", "--model", "70b", "--gpus", "64", "--gpu", "h100", "--tp", "4", "--pp", "4", "--vpp",
                       "5", "--cp", "2", "--format", "megatron", "--out", str(plain))
    assert code == 0, err
    assert "Priced with what" not in (plain / "megatron_args.sh").read_text()


def test_pareto_title_says_how_many_points_of_the_front_are_shown():
    code, out, err = run("search", "--model", "70b", "--gpus", "64", "--gpu", "h100", "--pareto", "--top", "3")
    assert code == 0, err
    title = out.splitlines()[0]
    size = int(title.split("(")[1].split(" point")[0])
    rows = [x for x in out.splitlines()[2:] if x.strip() and x.split()[0].isdigit()]
    assert len(rows) == 3 < size and f"({size} points; 3 shown" in title


def test_a_recipe_row_and_its_identical_search_row_cost_the_same():
    # Both priced by costmodel.goodput.run_block (checkpoint interval in whole steps): the recipe's
    # row used the ranking's vectorized goodput and showed $2 more for the same layout and step.
    import json

    code, out, err = run("search", "--model", "70b", "--gpus", "64", "--gpu", "h100", "--objective", "cost",
                         "--price-per-gpu-hour", "2.5", "--train-tokens", "1T", "--top", "12", "--json")
    assert code == 0, err
    data = json.loads(out)
    same = [(r, rec["record"]) for rec in data["reference_recipes"] if rec.get("record")
            for r in data["results"] if r["layout"] == rec["record"]["layout"]]
    assert same
    for row, recipe in same:
        assert recipe["run_cost_usd"] == row["run_cost_usd"] and recipe["goodput"] == row["goodput"]


def test_evaluate_from_a_row_priced_over_a_run_prices_the_same_run(tmp_path):
    import json

    code, out, err = run("search", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--objective", "cost",
                         "--price-per-gpu-hour", "2.5", "--train-tokens", "1T", "--top", "2", "--json")
    assert code == 0, err
    (tmp_path / "r.json").write_text(out)
    row = json.loads(out)["results"][1]
    code, back, err = run("evaluate", "--from", str(tmp_path / "r.json"), "--rank", "2", "--json")
    assert code == 0, err
    assert "--train-tokens 1e+12 --price-per-gpu-hour 2.5" in err
    assert json.loads(back)["run"]["cost_usd"] == row["run"]["cost_usd"]
    code, back, err = run("evaluate", "--from", str(tmp_path / "r.json"), "--rank", "2", "--train-tokens", "2T",
                          "--json")
    assert code == 0 and "priced over a whole run" not in err  # a typed run flag prices another run
    assert json.loads(back)["run"]["train_tokens"] == 2e12


def test_sweep_marks_a_best_layout_outside_the_envelope_as_search_does():
    # 70B, 128 H100s, seq 4096, gbs 1024: the best layout runs CP 2 at 2,048 tokens per rank, below
    # the 4,096 the reference runs cover; search marks it [1], the sweep's table did not.
    args = ["--model", "70b", "--gpus", "128", "--gpu", "h100", "--seq-len", "4096", "--gbs", "1024"]
    code, out, err = run("search", *args, "--top", "1")
    assert code == 0, err
    row = next(x for x in out.splitlines() if x.strip().startswith("1 "))
    assert "[1]" in row and "CP 2 at 2,048 tokens per rank" in out
    code, out, err = run("sweep", *args)
    assert code == 0, err
    lines = out.splitlines()
    head = next(x for x in lines if x.startswith("model"))
    assert head.split()[-1] == "env"
    assert next(x for x in lines if x.startswith("llama3-70b")).rstrip().endswith("[1]")
    assert "  [1] CP 2 at 2,048 tokens per rank" in out


def test_evaluate_with_a_release_says_when_the_release_cannot_launch_the_layout():
    # Megatron-FSDP (ZeRO-3) under a pipeline: megatron-core-0.8's formats refuse it; priced all the same.
    args = ["evaluate", "--model", "70b", "--gpus", "64", "--gpu", "h100", "--tp", "4", "--pp", "4", "--vpp", "5",
            "--cp", "2", "--gbs", "128", "--framework", "megatron-core-0.8"]
    code, out, err = run(*args, "--zero", "3")
    assert code == 0 and "step time" in out
    assert "note: no format that launches megatron-core-0.8" in err
    code, out, err = run(*args, "--zero", "1")
    assert code == 0 and "no format that launches" not in err
