"""What ``--framework R`` writes and carries: a search's records name R (JSON and CSV), so
``export --from`` / ``evaluate --from`` keep to R's launch formats and torchtitan's export release;
``planner export --framework R`` writes only ``R.formats`` (planner.frameworks.releases) and
refuses in one line when none of them can, as ``search --framework R`` does."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

# Llama 3 8B on 64 H100s, one fixed layout: ZeRO-3 with flat (FSDP1-style) buffers, which
# Megatron does not have (planner/frameworks/megatron.py Refusal megatron_fsdp_flat), but
# DeepSpeed's ZeRO-3 is (planner/frameworks/deepspeed.py).
FLAT_ZERO3 = ("--model", "llama3-8b", "--gpus", "64", "--gpu", "h100", "--tp", "1", "--pp", "1", "--cp", "1",
              "--zero", "3", "--mbs", "1", "--recompute", "none")
TP2_ZERO1 = ("--model", "llama3-8b", "--gpus", "64", "--gpu", "h100", "--tp", "2", "--pp", "1", "--cp", "1",
             "--zero", "1", "--mbs", "1", "--recompute", "none")


def run(*args, cwd=None):
    proc = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)
    return proc.returncode, proc.stdout, proc.stderr


def test_export_with_framework_writes_only_the_release_formats(tmp_path):
    """megatron-core-0.8 launches through megatron, torchrun and slurm (releases.py): no DeepSpeed
    JSON and no Megatron-Bridge overrides beside them."""
    code, out, err = run("export", *TP2_ZERO1, "--framework", "megatron-core-0.8", "--out", str(tmp_path / "o"))
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["launch.sbatch", "launch_torchrun.sh",
                                                                  "megatron_args.sh"]


def test_export_with_framework_refuses_a_layout_none_of_its_formats_writes(tmp_path):
    code, out, err = run("export", *FLAT_ZERO3, "--framework", "megatron-core-0.8", "--out", str(tmp_path / "o"))
    assert code == 2
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and "megatron-core-0.8 cannot launch" in lines[0] and "megatron_fsdp_flat" in lines[0]
    assert "Traceback" not in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_export_with_framework_refuses_a_format_that_does_not_launch_it(tmp_path):
    code, _, err = run("export", *TP2_ZERO1, "--framework", "megatron-core-0.8", "--format", "deepspeed",
                       "--out", str(tmp_path / "o"))
    assert code == 2
    assert err.strip().splitlines() == [err.strip()] and "--format deepspeed" in err and "megatron, torchrun, slurm" in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


@pytest.fixture(scope="module")
def torchtitan_search(tmp_path_factory):
    """One torchtitan-0.2 search, written as JSON (stdout), CSV and --export."""
    d = tmp_path_factory.mktemp("tt")
    code, out, err = run("search", "--model", "llama3-8b", "--gpus", "64", "--gpu", "h100", "--framework",
                         "torchtitan-0.2", "--top", "2", "--json", "--csv", str(d / "tt.csv"), "--export",
                         str(d / "ex"))
    assert code == 0, err
    (d / "tt.json").write_text(out)
    return d


def test_torchtitan_02_search_export_writes_no_03_command_line(torchtitan_search):
    # torchtitan 0.2 reads torchtitan.toml only (rule torchtitan_cli_release): no 0.3 overrides file.
    assert sorted(p.name for p in (torchtitan_search / "ex").iterdir()) == ["torchtitan.toml"]


def test_torchtitan_02_search_records_name_the_release(torchtitan_search):
    results = json.loads((torchtitan_search / "tt.json").read_text())["results"]
    assert results and all(r["framework"]["name"] == "torchtitan-0.2" for r in results)
    rows = list(csv.DictReader((torchtitan_search / "tt.csv").open()))
    assert rows and all(row["framework"] == "torchtitan-0.2" for row in rows)


@pytest.mark.parametrize("name", ["tt.json", "tt.csv"])
def test_export_from_a_torchtitan_02_search_targets_0_2_only(torchtitan_search, name, tmp_path):
    code, out, err = run("export", "--from", str(torchtitan_search / name), "--rank", "1", "--out", str(tmp_path / "o"))
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["torchtitan.toml"]
    assert "megatron" not in out and "deepspeed" not in out  # the other frameworks are not tried


def test_evaluate_from_a_torchtitan_02_search_row_names_the_release(torchtitan_search):
    code, out, err = run("evaluate", "--from", str(torchtitan_search / "tt.csv"), "--rank", "1", "--json")
    assert code in (0, 3), err
    assert json.loads(out)["framework"]["name"] == "torchtitan-0.2"
