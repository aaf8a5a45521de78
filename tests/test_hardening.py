"""Issue 16: every input answered, every output reusable. One test per case a hostile tester hit.

Exit codes (planner.cli.errors): 0 done, 2 bad input (one line on stderr), 3 nothing fits, 1 an
internal error (one line naming the saved traceback). In-process with typer's CliRunner where
the case allows; as a real process where it is about the process (pipes, closed stdout).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.main import app

ROOT = Path(__file__).absolute().parents[1]
runner = CliRunner()


def cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def refused(res, *needles):
    """Exit 2 with one error line naming what is wrong (and nothing else on stderr but notes)."""
    assert res.exit_code == 2, (res.exit_code, res.output)
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.output, res.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def shell(command: str, cwd=None) -> subprocess.CompletedProcess:
    """``command`` in bash with ``planner`` running this checkout (python -m planner)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    prelude = f'planner() {{ "{sys.executable}" -m planner "$@"; }}\n'
    return subprocess.run(["bash", "-c", prelude + command], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


EVAL_8B = ("evaluate", "--model", "8b", "--gpus", "64", "--gpu", "h100")


# ------------------------------------------------------------------ numbers at the boundary


@pytest.mark.parametrize("args,needles", [
    (("search", "--model", "8b", "--gpus", "4294967296", "--gpu", "h100"), ("--gpus=4294967296", "1,048,576")),
    (("evaluate", "--model", "8b", "--gpus", "4294967296", "--gpu", "h100"), ("--gpus=4294967296",)),
    (EVAL_8B + ("--tp", "99999999999999999999"), ("--tp=99999999999999999999", "from 1 to")),
    (EVAL_8B + ("--gbs", "99999999999999999999999"), ("--gbs=99999999999999999999999", "16,777,216")),
    (EVAL_8B + ("--mbs", "1000000000", "--gbs", "8000000000"), ("must be an integer from 1 to 16,777,216",)),
    (("search", "--model", "8b", "--gpus", "64,,128", "--gpu", "h100"), ("--gpus '64,,128'", "comma list")),
    (("search", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--price-per-gpu-hour", "inf"),
     ("--price-per-gpu-hour=inf", "> 0 and <= 1,000")),
    (("search", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--price-per-gpu-hour", "1e300"),
     ("--price-per-gpu-hour=1e+300",)),
    (("search", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--method", "optuna", "--seed", "-1"), ("--seed=-1",)),
    (EVAL_8B + ("--zero", "4"), ("--zero=4", "from 0 to 3")),
])
def test_numbers_out_of_range_are_one_line_exit_2(args, needles):
    refused(cli(*args), *needles)


def test_tokens_per_batch_must_hold_whole_sequences_and_errors_blame_what_was_typed():
    # 1,000,001 tokens at 8,192 per sequence is not a whole batch: the error names the flag the
    # user typed and the two nearest whole batches (122 x 8192 = 999,424; 123 x 8192 = 1,007,616).
    line = refused(cli(*EVAL_8B, "--tokens-per-batch", "1000001"), "--tokens-per-batch=1,000,001")
    assert "999,424" in line and "1,007,616" in line and "gbs=122" not in line
    # A sequence longer than the model's default batch blames --seq-len, not --tokens-per-batch.
    refused(cli(*EVAL_8B, "--seq-len", "10000000"), "--seq-len=10,000,000", "give --gbs")
    refused(cli(*EVAL_8B, "--seq-len", "100000000"), "--seq-len=100000000", "16,777,216")
    # A global batch the user never typed is explained when a rule breaks on it: 8B's default is
    # 4,194,304 tokens / 8,192 = 512 sequences, which 48 data-parallel GPUs do not divide. (With
    # no layout flag at all, evaluate explains the search's best layout instead: tests/test_job.py.)
    refused(cli("evaluate", "--model", "8b", "--gpus", "48", "--gpu", "h100", "--tp", "1"), "gbs=512",
            "default batch of 4,194,304")


def test_model_files_outside_what_the_catalog_can_mean_name_every_error(tmp_path):
    moe = tmp_path / "moe.json"
    moe.write_text(json.dumps({"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32,
                               "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                               "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 12}))
    refused(cli("evaluate", "--model", moe, "--gpus", "8", "--gpu", "h100"), "top_k=12", "num_experts=8")
    wide = tmp_path / "wide.toml"
    wide.write_text('num_layers = 2\nhidden_size = 1000000000\nnum_attention_heads = "x"\nffn = 3\n')
    line = refused(cli("evaluate", "--model", wide, "--gpus", "8", "--gpu", "h100"))
    # every problem named, none summarised as "+N more errors"
    for needle in ("unknown field 'ffn'", "hidden_size", "1000000000", "num_attention_heads", "'ffn_hidden_size'",
                   "'vocab_size'"):
        assert needle in line, needle
    assert "more error" not in line


def test_cluster_file_with_an_unknown_gpu_names_it_with_the_missing_fields(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('gpu = "x999"\ngpus_per_node = 8\n')
    refused(cli("evaluate", "--model", "8b", "--gpus", "8", "--cluster", path), "unknown gpu 'x999'",
            "missing required field 'nic'")


@pytest.mark.parametrize("content", [b"[1, 2, 3]", b"\xff\xfe\x00bad", b'{"runs": "sixty-four"}'])
def test_unreadable_runs_files_are_one_line(tmp_path, content):
    path = tmp_path / "runs.json"
    path.write_bytes(content)
    refused(cli("validate", "--runs", path), str(path))  # one line naming the file (and the row where there is one)


# ------------------------------------------------------------------ recompute layers: one unit


def test_recompute_layers_are_layers_per_stage_a_multiple_of_vpp_within_the_stage(tmp_path):
    # 8B: 32 layers; pp 2 -> 16 a stage; vpp 4 -> chunks of 4 layers.
    base = ("evaluate", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--tp", "2", "--pp", "2", "--vpp", "4",
            "--recompute", "full", "--gbs", "256", "--json")
    refused(cli(*base, "--recompute-layers", "999"), "recompute_layers_fit_stage", "16 layers")
    for n in (1, 2, 3, 6):
        refused(cli(*base, "--recompute-layers", n), "multiple of vpp=4")
    four, eight = (json.loads(cli(*base, "--recompute-layers", n).stdout) for n in (4, 8))
    assert four["layout"]["recompute_layers"] == 4 and eight["layout"]["recompute_layers"] == 8
    # Recomputing more layers costs more time and keeps fewer activations.
    assert four["breakdown"]["recompute"] < eight["breakdown"]["recompute"]
    assert four["memory_gib"]["activations"] > eight["memory_gib"]["activations"]
    out = tmp_path / "o"
    res = cli("export", *base[1:-1], "--recompute-layers", "8", "--out", out, "--format", "megatron")
    assert res.exit_code == 0, res.output
    text = (out / "megatron_args.sh").read_text()
    # 8 layers per stage over 4 chunks: Megatron's --recompute-num-layers counts per chunk -> 2.
    assert "--recompute-method block" in text and "--recompute-num-layers 2\n" in text
    assert "8 layer(s) per stage: the first 2 of each of its 4 model chunks" in text


def test_search_records_state_recompute_layers_per_stage_and_evaluate_takes_them_back(tmp_path):
    res = cli("search", "--model", "70b", "--gpus", "64", "--gpu", "h100", "--pp", "4",
              "--vpp", "2", "--top", "10", "--json", "--no-progress")  # the mode left to the search
    assert res.exit_code == 0, res.output
    results = json.loads(res.stdout)["results"]
    partial = [r for r in results if r["layout"]["recompute_layers"]]
    assert partial, "the search explores partial recompute"
    for rec in partial:
        lay = rec["layout"]
        assert lay["recompute_layers"] > 0 and lay["recompute_layers"] % lay["vpp"] == 0
        assert lay["recompute_layers"] <= max(lay["stage_layers"])
    path = tmp_path / "s.json"
    path.write_text(res.stdout)
    assert cli("evaluate", "--from", path, "--rank", partial[0]["rank"]).exit_code == 0


# ------------------------------------------------------------------ --from: overrides and ranks


@pytest.fixture(scope="module")
def search_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("search")
    res = cli("search", "--model", "8b", "--gpus", "16", "--gpu", "h100", "--top", "4", "--json", "--no-progress",
              "--csv", tmp / "s.csv")
    assert res.exit_code == 0, res.output
    (tmp / "s.json").write_text(res.stdout)
    return tmp


def test_export_from_a_search_result_needs_a_rank(search_files, tmp_path):
    refused(cli("export", "--from", search_files / "s.json", "--out", tmp_path / "o"), "give --rank N")
    assert not (tmp_path / "o").exists()
    refused(cli("export", "--from", search_files / "s.json", "--rank", "9", "--out", tmp_path / "o"), "--rank 9",
            "ranks: 1 to 4")
    refused(cli("evaluate", "--rank", "2", "--model", "8b", "--gpus", "8", "--gpu", "h100"), "--rank", "--from")


def test_flags_given_with_from_override_with_a_note(search_files, tmp_path):
    res = cli("export", "--from", search_files / "s.json", "--rank", "1", "--tp", "8", "--pp", "2", "--zero", "1",
              "--out", tmp_path / "o", "--format", "megatron")
    assert res.exit_code == 0, res.output
    assert "note: --tp 8 replaces tp=" in res.stderr and "note: --pp 2 replaces pp=" in res.stderr
    text = (tmp_path / "o" / "megatron_args.sh").read_text()
    assert "--tensor-model-parallel-size 8" in text and "--pipeline-model-parallel-size 2" in text
    # Naming what the record already says changes nothing and says nothing.
    res = cli("evaluate", "--from", search_files / "s.json", "--rank", "1", "--model", "llama3-8b", "--gpu", "h100")
    assert res.exit_code == 0 and "note:" not in res.stderr


def test_search_table_headroom_is_the_json_headroom(search_files):
    results = json.loads((search_files / "s.json").read_text())["results"]
    res = cli("search", "--model", "8b", "--gpus", "16", "--gpu", "h100", "--top", "4", "--no-progress")
    rows = [line.split() for line in res.stdout.splitlines() if line.strip()[:1].isdigit()]
    for rec, row in zip(results, rows):
        assert f"{rec['headroom_gib']:.1f}" in row  # the table's headroom column, in GiB


# ------------------------------------------------------------------ files: one overwrite rule


@pytest.mark.parametrize("flag,name", [("--csv", "r.csv"), ("--plot", "p.png")])
def test_search_refuses_to_overwrite_without_force(tmp_path, flag, name):
    target = tmp_path / name
    target.write_bytes(b"keep")
    args = ("search", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--top", "1", "--no-progress", flag, target)
    refused(cli(*args), f"{flag} {target} already exists", "--force")
    assert target.read_bytes() == b"keep"
    assert cli(*args, "--force").exit_code == 0 and target.read_bytes() != b"keep"


def test_search_export_into_existing_files_says_force_and_force_works(tmp_path):
    # --fsdp megatron: the plain #1 is flat ZeRO-3, which no Megatron format writes (megatron_fsdp_flat)
    args = ("search", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--fsdp", "megatron", "--top", "1", "--no-progress",
            "--export", tmp_path)
    assert cli(*args).exit_code == 0
    before = (tmp_path / "megatron_args.sh").read_text()
    refused(cli(*args), "already exists", "--force")
    assert cli(*args, "--force").exit_code == 0
    after = (tmp_path / "megatron_args.sh").read_text()
    assert after.replace(" --force\n", "\n") == before  # the same files; the header names the command


@pytest.mark.parametrize("args", [
    ("sweep", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--csv"),
    ("comm", "all-reduce", "--topology", "ring", "--gpus", "8", "--bandwidth", "400GB/s", "--latency", "2us",
     "--sweep", "1KiB..1MiB", "--plot"),
    ("evaluate", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--tp", "2", "--plot"),
    ("validate", "--plot"),
])
def test_every_output_file_follows_the_same_rule(tmp_path, args):
    target = tmp_path / ("out.csv" if args[-1] == "--csv" else "out.png")
    target.write_text("keep")
    refused(cli(*args, target), "already exists", "--force")
    assert target.read_text() == "keep"


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs /proc")
def test_unwritable_outputs_are_refused_before_any_work(tmp_path):
    refused(cli("export", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--tp", "2", "--out", "/proc/planner-test"),
            "--out /proc/planner-test", "cannot write")
    res = cli("search", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--no-progress",
              "--export", "/proc/planner-test")
    refused(res, "--export /proc/planner-test")
    assert res.stdout == ""  # refused before searching
    refused(cli("search", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--csv", "/proc/x.csv"), "--csv /proc/x.csv")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_directory_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        refused(cli("export", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--tp", "2", "--out", ro), "cannot write")
    finally:
        ro.chmod(0o755)


# ------------------------------------------------------------------ exit codes and streams


def test_nothing_fits_is_exit_3_from_search_and_evaluate():
    res = cli("search", "--model", "405b", "--gpus", "8", "--gpu", "h100", "--no-progress")
    assert res.exit_code == 3 and "nothing fits" in res.stdout
    res = cli("evaluate", "--model", "405b", "--gpus", "8", "--gpu", "h100", "--tp", "8")
    assert res.exit_code == 3 and "DOES NOT FIT" in res.stdout  # the report is printed, then exit 3


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("head") is None, reason="needs bash and head")
def test_a_reader_that_stops_early_is_not_an_error():
    # Exit 0, quietly: scripts under `set -o pipefail` keep working (planner.cli.errors says why).
    proc = shell("set -o pipefail; planner search --model 8b --gpus 64 --gpu h100 --json | head -1")
    assert proc.returncode == 0 and proc.stdout == "{\n" and proc.stderr == ""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_closed_or_full_stdout_is_exit_2():
    proc = shell("planner catalog gpus >&-")
    assert proc.returncode == 2 and "standard output is closed" in proc.stderr
    if Path("/dev/full").exists():
        proc = shell("planner catalog models > /dev/full")
        assert proc.returncode == 2 and "No space left on device" in proc.stderr
        assert proc.stderr.count("\n") == 1


def test_an_internal_error_is_one_line_naming_the_saved_traceback(monkeypatch):
    import planner.reports.evaluate

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(planner.reports.evaluate, "format_evaluation", broken)
    res = cli("evaluate", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--tp", "2")
    assert res.exit_code == 1 and len(res.stderr.splitlines()) == 1
    line = res.stderr.strip()
    assert "internal error" in line and "RuntimeError: boom" in line and "--debug" in line
    path = Path(line.split("the traceback is in ")[1].split(";")[0])
    assert "Traceback" in path.read_text() and "boom" in path.read_text()
    path.unlink()
    res = cli("--debug", "evaluate", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--tp", "2")
    assert res.exit_code == 1 and "Traceback (most recent call last)" in res.stderr
    Path(res.stderr.split("the traceback is in ")[1].split(";")[0]).unlink()


def test_usage_errors_are_one_line():
    refused(cli("evaluate", "--model", "8b", "--gpus", "abc", "--gpu", "h100"), "--gpus")
    refused(cli("evaluate", "--nope"), "--nope")


# ------------------------------------------------------------------ the Command header


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_command_header_is_quoted_and_reproduces_the_files(tmp_path):
    cluster = tmp_path / "x$(touch pwned).toml"
    cluster.write_text('gpu = "h100"\ngpus_per_node = 8\nscaleup_domain_size = 8\nscaleup_latency_us = 3\n'
                       'scaleup_efficiency = 0.8\nnic = "ib-ndr"\nnics_per_node = 8\nnetwork_efficiency = 0.8\n')
    proc = shell(f"planner export --model 8b --gpus 16 --cluster {shlex.quote(cluster.name)} --tp 2 --out o",
                 cwd=tmp_path)
    assert not (tmp_path / "pwned").exists()
    assert proc.returncode == 0, proc.stderr
    first = {p.name: p.read_bytes() for p in (tmp_path / "o").iterdir()}
    header = (tmp_path / "o" / "launch_torchrun.sh").read_text()
    command = next(line for line in header.splitlines() if line.startswith("# Command: ")).removeprefix("# Command: ")
    assert "'x$(touch pwned).toml'" in command
    shutil.rmtree(tmp_path / "o")
    proc = shell(command, cwd=tmp_path)  # pasted back into a shell
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "pwned").exists()
    assert {p.name: p.read_bytes() for p in (tmp_path / "o").iterdir()} == first


def test_shell_join_gives_back_every_word():
    from planner.export.common import shell_join

    words = ["planner", "a b", "it's", "$(x)", "new\nline", "tab\there", "\u2028", "back\\slash", ""]
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    proc = subprocess.run(["bash", "-c", "printf '%s\\0' " + shell_join(words)], capture_output=True, timeout=30)
    assert proc.stdout.decode().split("\0")[:-1] == words
    assert "\n" not in shell_join(words)


# ------------------------------------------------------------------ optuna: capped, with progress


def test_optuna_trials_are_capped_at_the_space():
    import time

    t0 = time.perf_counter()
    res = cli("search", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--method", "optuna", "--trials",
              "100000000", "--json", "--no-progress")
    assert res.exit_code == 0 and time.perf_counter() - t0 < 30
    stats = json.loads(res.stdout)["stats"]
    assert stats["trials_requested"] == 100_000_000 and stats["trials"] == stats["space_cores"] < 100_000_000


def test_progress_without_a_terminal_is_plain_lines(capsys, monkeypatch):
    from search.exhaustive import Progress

    monkeypatch.setattr(Progress, "LINE_EVERY_S", 0.0)
    bar = Progress(10, "optuna", enabled="lines")
    for i in range(1, 4):
        bar.update(i)
    bar.close()
    err = capsys.readouterr().err
    assert "\r" not in err and err.splitlines()[0].startswith("optuna: 1/10 after ")
