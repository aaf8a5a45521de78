"""A first-time user's review of search / evaluate / sweep / comm (cli-review): each test is a
command that answered wrongly or unhelpfully before its fix."""

from __future__ import annotations

import pytest

from test_hostile_inputs import cli, one_error_line


def test_unparsable_number_names_the_value_typed():
    # typer's own message said only "Invalid value for '--tp': Input should be a valid integer".
    res = cli("evaluate", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--tp", "4.5")
    one_error_line(res, "--tp", "'4.5'", "integer")
    # --tokens-per-batch reads token counts as --train-tokens does (1e6, 4M): 1e6 is 1,000,000 tokens,
    # which is no whole number of 8,192-token sequences.
    res = cli("search", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--tokens-per-batch=1e6")
    one_error_line(res, "--tokens-per-batch", "1,000,000", "8,192-token sequences")
    res = cli("search", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--tokens-per-batch=4.5")
    one_error_line(res, "--tokens-per-batch", "'4.5'", "not a whole number")


def test_search_rejects_a_setting_no_gpu_of_the_search_can_run():
    # MXFP8 needs Blackwell's block-scaled tensor cores: evaluate said so (exit 2); search priced
    # every H100 layout with the default delayed recipe and printed it as the answer.
    job = ("search", "--model", "8b", "--gpus", "8", "--precision", "fp8", "--fp8-recipe", "mxfp8", "--top", "1")
    one_error_line(cli(*job, "--gpu", "h100"), "block_scaling_needs_blackwell", "mxfp8")
    # Where one GPU type of the search can run it, the search goes on (the setting applies there).
    res = cli(*job, "--gpu", "h100,b200", "--json")
    assert res.exit_code == 0, res.output
    import json

    best = json.loads(res.stdout)["results"][0]
    assert best["gpu"] == "b200" and best["layout"]["fp8_recipe"] == "mxfp8"


def test_a_pinned_value_that_breaks_a_rule_everywhere_is_bad_input(tmp_path):
    # FP8 pinned on an A100 (no FP8 tensor cores) or TP 16 past an 8-GPU NVLink domain leaves
    # nothing to search: one line naming the pinned value, exit 2 and no file written, as evaluate
    # answers the same input (it used to be 'nothing fits', exit 3, with a header-only CSV).
    csv = tmp_path / "y.csv"
    res = cli("search", "--model", "8b", "--gpus", "8", "--gpu", "a100", "--precision", "fp8", "--csv", str(csv))
    assert res.exit_code == 2, res.output
    assert "precision_supported" in res.output and "precision=fp8" in res.output and not csv.exists()
    res = cli("search", "--model", "8b", "--gpus", "16", "--gpu", "h100", "--tp", "16")
    assert res.exit_code == 2, res.output
    assert "tp=16 exceeds the scale-up domain of 8 GPUs" in res.output
    # Where one GPU type of the search can run it, the search goes on there.
    res = cli("search", "--model", "8b", "--gpus", "8", "--gpu", "a100,h100", "--precision", "fp8", "--top", "1")
    assert res.exit_code == 0, res.output


RANGE = dict(model="405b", gpus="1024..16384:256", gpu="h100,b200,a100", pins={"tp": 8}, top=2)
"""183 problems (61 GPU counts x 3 GPU types): enumerated in about 2 s."""


def test_sampled_search_never_calls_layouts_under_the_limit_closest_over_it():
    # The optuna search neither offered ZeRO-2 under a pipeline when nothing else fitted (the
    # exhaustive search does) nor kept such layouts from steering its trials: here every trial
    # ended on them, and it answered "nothing fits: the smallest needs 49.7 GiB, -25.5 GiB over
    # the 75.2 GiB limit".
    import planner

    res = planner.search(**RANGE, method="optuna")
    assert res.results, res.message
    for c in res.closest:
        assert c["exceeds_gib"] > 0, c


def test_auto_enumerates_a_gpu_count_range_that_takes_seconds():
    # auto extrapolated from the first problem alone (the smallest H100 count, with one-off
    # set-up) to 24 s and sampled; enumerating takes about 2 s, and the sampled best (A100, 4,096
    # GPUs, 79.5 s) was 24x slower than the optimum (B200, 16,384 GPUs, 3.4 s).
    import planner

    res = planner.search(**RANGE)
    assert res.stats["method"] == "exhaustive", res.stats.get("auto")
    assert res.results[0]["gpu"] == "b200" and res.results[0]["gpus"] == 16384


def test_sweep_refuses_a_price_it_would_drop():
    # A price for a GPU type the sweep does not run was kept aside without a word (no cost column),
    # and a type priced twice silently took the last price.
    grid = ("sweep", "--model", "8b", "--gpus", "8", "--gpu", "h100")
    one_error_line(cli(*grid, "--price-per-gpu-hour", "b200=3"), "b200", "not a GPU type of this sweep", "h100-sxm")
    one_error_line(cli(*grid, "--price-per-gpu-hour", "h100=2,h100-sxm=3"), "twice")


def test_sweep_summary_says_whom_a_single_price_covers():
    # One price for all ("--price-per-gpu-hour 2") was summarised as "$/GPU-hour others 2".
    res = cli("sweep", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--price-per-gpu-hour", "2")
    assert res.exit_code == 0, res.output
    line = next(x for x in res.stdout.splitlines() if "$/GPU-hour" in x)
    assert line.endswith("$/GPU-hour every GPU type 2") and "others" not in line, line


def test_comm_gpu_count_error_states_the_range_comm_takes():
    # "--gpus 0" answered "from 1 to 1,048,576", and then "--gpus 1" was refused (needs 2).
    for n in ("0", "1"):
        one_error_line(cli("comm", "all-reduce", "--size", "1MiB", "--cluster", "dgx-h100", "--gpus", n),
                       f"--gpus={n}", "from 2 to")


def test_fp8_recipe_without_fp8_is_refused():
    # evaluate priced BF16 and printed "bf16 SP fp8-mxfp8" on the layout line; search dropped it.
    job = ("--model", "8b", "--gpus", "8", "--gpu", "h100", "--fp8-recipe", "current")
    one_error_line(cli("evaluate", *job), "--fp8-recipe current", "bf16", "--precision fp8")
    one_error_line(cli("search", *job), "--fp8-recipe current", "--precision fp8")
    assert cli("evaluate", *job, "--precision", "fp8").exit_code in (0, 3)


def test_export_that_writes_nothing_says_so(tmp_path):
    # Every format refused the search's best layout (ZeRO-3 priced as FSDP1 flat parameters, which
    # no Megatron launcher has; the unfused loss torchtitan does not run; Ulysses CP under TP in
    # DeepSpeed): 'skipped' lines, no file. search --export printed the same on stdout and exited 0
    # as if the launch files were there: the table is the answer, the missing files an error (exit 2).
    job = ("--model", "70b", "--gpus", "64", "--gpu", "h100", "--tp", "2", "--cp", "2", "--zero", "3")
    res = cli("export", *job, "--out", tmp_path / "launch")
    line = one_error_line(res, "no launch file written", "every format refused")
    assert not (tmp_path / "launch").exists(), line
    res = cli("search", *job, "--top", "1", "--export", tmp_path / "launch")
    assert res.exit_code == 2, res.output
    assert "llama3-70b" in res.stdout and not (tmp_path / "launch").exists()
    assert res.stderr.strip().splitlines()[-1].startswith("error: --export: no launch file written to")


def test_catalog_without_a_subject_lists_the_subjects():
    # typer said only "Missing argument 'what'."
    one_error_line(cli("catalog"), "gpus", "models", "clusters", "interconnects", "frameworks")


def test_dp_shard_error_names_only_what_is_wrong():
    # "dp_shard=3 must divide dp=8 and needs zero >= 1 to shard anything (got zero=3)": ZeRO-3 read
    # as part of the fault.
    job = ("evaluate", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--dp-shard", "3")
    line = one_error_line(cli(*job, "--zero", "3"), "dp_shard=3 must divide dp=8")
    assert "zero" not in line.split("[")[0], line
    one_error_line(cli(*job[:-1], "2", "--zero", "0"), "needs zero >= 1", "got zero=0")


def test_top_one_has_no_empty_tie_count():
    # "--top 1" printed "≈: ... 0 of 0 rows below #1", and the legend with no row marked '≈'.
    for gpus, marked in (("104", False), ("64", True)):  # 70B's recipes do not split 104 GPUs; one ties #1 at 64
        res = cli("search", "--model", "70b", "--gpus", gpus, "--gpu", "h100", "--top", "1")
        assert res.exit_code == 0, res.output
        rows = [line for line in res.stdout.splitlines() if line.lstrip().startswith(("1", "("))]
        assert "0 of 0 rows" not in res.stdout
        assert any("≈" in line for line in rows) == marked == ("≈: range overlaps #1's" in res.stdout), res.stdout


def test_sweep_report_only_needs_a_stored_sweep():
    # Without --storage it printed an empty table, "0 of 1 scenarios done", and advised running
    # the same command again (which, in memory, reports nothing again).
    res = cli("sweep", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--report-only")
    one_error_line(res, "--report-only", "--storage")


def test_tp_typed_next_to_from_is_judged_like_evaluate(tmp_path):
    # --from FILE priced every layout with cross-node TP allowed, so a --tp 16 typed next to it
    # ran TP over two 8-GPU NVLink domains without --allow-cross-node-tp (plain evaluate: exit 2).
    res = cli("search", "--model", "8b", "--gpus", "32", "--gpu", "h100", "--top", "1", "--json")
    assert res.exit_code == 0, res.output
    (tmp_path / "r.json").write_text(res.stdout)
    res = cli("evaluate", "--from", tmp_path / "r.json", "--rank", "1", "--tp", "16")
    assert res.exit_code == 2 and "tp_within_scaleup_domain" in res.stderr, res.output
    res = cli("evaluate", "--from", tmp_path / "r.json", "--rank", "1", "--tp", "16", "--allow-cross-node-tp")
    assert res.exit_code in (0, 3), res.output


def test_expert_tp_is_shown_where_it_is_not_one():
    # ETP is searched (1 or tp) and priced (mixtral EP8 TP2: ETP 1 13.5 s, ETP 2 14.3 s), yet the
    # table and evaluate's layout line left it out, so ETP 1 and ETP 2 read the same (and Megatron's
    # --expert-tensor-parallel-size defaults to tp, not to 1).
    moe = ("--model", "mixtral-8x7b", "--gpus", "16", "--gpu", "h100", "--tp", "2", "--ep", "8", "--etp", "2")
    res = cli("evaluate", *moe)
    assert res.exit_code in (0, 3), res.output
    assert " EP8 ETP2 " in res.stdout.splitlines()[1], res.stdout.splitlines()[1]
    res = cli("search", *moe, "--top", "1")
    assert res.exit_code == 0, res.output
    head, row = res.stdout.splitlines()[1:3]
    cells = dict(zip(head.split()[:8], row.split()[:8]))
    assert cells["EP"] == "8" and cells["ETP"] == "2", (head, row)
    dense = cli("search", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--top", "1")
    assert "ETP" not in dense.stdout.splitlines()[1]



def test_a_two_stage_pipeline_has_no_middle_stage_in_words():
    # PP 2 printed 'stages 1 + 79 layers (first + middle + last)', and its rule error
    # 'stages 30/30/30' for a 30 + 30 split of 80 layers.
    from planner.reports.evaluate import stage_summary

    assert stage_summary({"stage_layers": [1, 79]}) == "stages 1 + 79 layers (first + last)"
    assert stage_summary({"stage_layers": [18, 21, 21, 20]}) == "stages 18 + 2x21 + 20 layers (first + middle + last)"
    job = ("evaluate", "--model", "70b", "--gpus", "64", "--gpu", "h100", "--tp", "8", "--pp", "2")
    one_error_line(cli(*job, "--pp-first-layers", "30", "--pp-last-layers", "30"), "(stages 30/30, first/last)")


def test_counts_agree_in_number_and_cp_time_names_its_exchange():
    # "1 micro-batches/step", "(1 steps)", "1 rows"; and "context-parallel KV ring (exposed)" for a
    # layout whose CP exchange is an all-gather (gpt-oss at 128K tokens takes allgather: its window).
    from planner.reports import counted

    assert (counted(1, "row"), counted(117, "row"), counted(1024, "step")) == ("1 row", "117 rows", "1,024 steps")
    assert counted(1, "micro-batch", "micro-batches") == "1 micro-batch"
    res = cli("evaluate", "--model", "gpt-oss-120b", "--gpus", "64", "--gpu", "h100", "--seq-len", "131072", "--gbs",
              "32", "--tp", "2", "--pp", "1", "--cp", "16", "--ep", "32", "--recompute", "none")
    assert "cp-allgather" in res.stdout and "context-parallel KV all-gather (exposed)" in res.stdout, res.stdout
    assert "KV ring" not in res.stdout


def test_a_price_pareto_at_one_gpu_count_says_why_it_has_one_point():
    # At one GPU type and count, cost = GPUs x time x price: the time/cost front is one layout,
    # printed as '(1 points)' with no word on why.
    res = cli("search", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--gbs", "256", "--pareto",
              "--train-tokens", "1T", "--price-per-gpu-hour", "2")
    assert res.exit_code == 0, res.output
    head = res.stdout.splitlines()
    assert head[0].endswith("(1 point)") and "cost is proportional to time" in head[1]


def test_search_export_with_a_framework_writes_only_that_frameworks_formats(tmp_path):
    # Megatron-Core r0.8 has no ZeRO-3 (no FSDP flag in core_r0.8.0 arguments.py), yet without
    # --framework the #1 for 70B on 64 H100s is flat ZeRO-3, which Megatron's formats refuse; the
    # search used to write DeepSpeed's config instead, for a Megatron release. With --framework the
    # search ranks only what the release's formats write (planner.export.domain), and --export
    # writes those formats and no other.
    out = tmp_path / "o"
    res = cli("search", "--model", "70b", "--gpus", "64", "--gpu", "h100", "--gbs", "128", "--top", "3",
              "--framework", "megatron-core-0.8", "--export", out)
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["launch.sbatch", "launch_torchrun.sh", "megatron_args.sh"]
    assert "launch: no format" not in res.stdout
    assert "skipped deepspeed" not in res.output


def test_search_export_headers_name_the_installed_version(tmp_path):
    # 'Generated by planner unknown version': a search record carries no version.
    from planner.common import planner_version

    # --fsdp megatron: a ZeRO-3 row is then Megatron's own flavour; with the default flat buffers the #1 here
    # is flat ZeRO-3, which no Megatron format writes (rule megatron_fsdp_flat) and --export refuses.
    out = tmp_path / "o"
    res = cli("search", "--model", "8b", "--gpus", "16", "--gpu", "h100", "--gbs", "64", "--top", "1",
              "--fsdp", "megatron", "--export", out)
    assert res.exit_code == 0, res.output
    first = (out / "megatron_args.sh").read_text().splitlines()[1]
    assert first == f"# Generated by planner {planner_version()} (planner export).", first


def test_search_refuses_a_framework_recompute_it_cannot_price_as_evaluate_does():
    # torchtitan's selective is per-op SAC, priced as full recompute of half the layers: search took
    # the flag, priced Megatron's selective instead (18.95 s, where evaluate says 20.6 s) and then
    # its export refused the layout, suggesting the very flags typed.
    res = cli("search", "--model", "70b", "--gpus", "64", "--gpu", "h100", "--gbs", "128",
              "--framework", "torchtitan-0.2", "--recompute", "selective", "--top", "1")
    one_error_line(res, "--framework torchtitan-0.2 --recompute selective", "per-op SAC", "planner evaluate")


def test_sampler_flags_with_an_exhaustive_search_and_the_pareto_and_p10_legends():
    # --trials / --sampler / --seed under --method exhaustive ran and were ignored (--storage there
    # is refused); a Pareto front marked rows '≈' without the legend (a front is not a ranking);
    # --rank-by p10 with --top 300 said it re-ranked 'the 256 best' of a pool of 1,200.
    job = ("search", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--no-progress")
    one_error_line(cli(*job, "--method", "exhaustive", "--trials", "10"), "--trials sets the optuna sampler")
    res = cli(*job, "--pareto", "--top", "4")
    rows = [line for line in res.stdout.splitlines()[2:6]]
    assert res.exit_code == 0 and not any("≈" in line for line in rows), res.stdout
    res = cli("search", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--top", "300", "--rank-by", "p10")
    assert "(the 1,200 best by the point prediction, re-ranked)" in res.stdout.splitlines()[0]


def test_search_csv_carries_the_ranked_run_figures_and_the_interval(tmp_path):
    # Ranked by energy, the CSV had no MWh, goodput or interval column: the quantity ranked was missing.
    import csv

    out = tmp_path / "c.csv"
    res = cli("search", "--model", "8b", "--gpus", "16", "--gpu", "h100", "--top", "2", "--objective", "energy",
              "--train-tokens", "1T", "--csv", out, "--json")
    assert res.exit_code == 0, res.output
    import json

    records = json.loads(res.stdout)["results"]
    rows = list(csv.DictReader(out.open()))
    for rec, row in zip(records, rows):
        assert float(row["run_energy_mwh"]) == pytest.approx(rec["run_energy_mwh"])
        assert float(row["goodput"]) == pytest.approx(rec["goodput"])
        assert float(row["tokens_per_s_per_gpu_p10"]) == pytest.approx(rec["tokens_per_s_per_gpu_interval"]["p10"])
