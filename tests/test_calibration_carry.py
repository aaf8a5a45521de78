"""A calibration profile travels with what it priced: every search row (JSON and CSV), evaluate
record and sweep scenario states the profile and its constants; ``--from`` prices with them (even
after the file moved); ``--calibration`` next to ``--from`` replaces them, with a note; sweep takes
``--calibration``; outputs and launch-file headers name the constants that differ from shipped."""

from __future__ import annotations

import csv
import json
import re

import pytest
from typer.testing import CliRunner

from costmodel.calibration import DEFAULT
from planner.cli.main import app

runner = CliRunner()
JOB = ("--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--seq-len", "4096", "--gbs", "64")
ATTENTION = 0.55
"""The one constant the hand-written profile changes (shipped: ``DEFAULT.attention_efficiency``)."""


def cli(*args, code=0):
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == code, res.output
    return res


def _profile(path, name="attention_efficiency", value=ATTENTION, gpus=None):
    text = f"[constants.{name}]\nvalue = {value}\n"
    if gpus is not None:
        text = "[profile]\ngpus = [" + ", ".join(f'"{g}"' for g in gpus) + "]\n\n" + text
    path.write_text(text)
    return path


def _predicted_tps(folder) -> str:
    """The "# Predicted" line of a Megatron launch file's header."""
    line = next(ln for ln in (folder / "megatron_args.sh").read_text().splitlines() if ln.startswith("# Predicted"))
    return line


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("carry")
    prof = _profile(tmp / "prof.toml")
    res = cli("search", *JOB, "--top", "2", "--calibration", prof, "--json", "--csv", tmp / "res.csv", "--no-progress")
    (tmp / "res.json").write_text(res.stdout)
    return tmp, prof, json.loads(res.stdout)


def test_every_search_row_states_its_profile_and_constants(searched):
    tmp, prof, data = searched
    assert data["results"]
    for rec in data["results"]:
        assert rec["calibration"] == str(prof) and rec["calibration_constants"] == {"attention_efficiency": ATTENTION}
    rows = list(csv.DictReader((tmp / "res.csv").open()))
    assert [r["calibration"] for r in rows] == [str(prof)] * len(rows)
    assert {r["calibration_constants"] for r in rows} == {f"attention_efficiency={ATTENTION!r}"}


@pytest.mark.parametrize("source", ["res.json", "res.csv"])
def test_export_from_a_calibrated_search_states_the_search_rows_prediction(searched, source, tmp_path):
    tmp, prof, data = searched
    top = data["results"][0]
    cli("export", "--from", tmp / source, "--rank", 1, "--out", tmp_path / "exp", "--format", "megatron")
    line = _predicted_tps(tmp_path / "exp")
    assert f"{top['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU" in line
    assert line.endswith(f"; calibrated: {prof} (attention_efficiency {ATTENTION:g}).")
    # ...which is not what the shipped constants give for the same layout (the old export's number).
    shipped = cli("export", "--from", tmp / source, "--rank", 1, "--out", tmp_path / "plain", "--format", "megatron",
                  "--calibration", _profile(tmp_path / "shipped.toml", value=DEFAULT.attention_efficiency))
    assert f"{top['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU" not in _predicted_tps(tmp_path / "plain")
    assert f"replaces calibration={prof}" in shipped.output


def test_from_prices_with_the_records_constants_after_the_profile_moved(searched, tmp_path):
    tmp, prof, data = searched
    record = dict(data["results"][0], calibration=str(tmp_path / "gone.toml"))  # the file is not there
    (tmp_path / "rec.json").write_text(json.dumps(record))
    res = cli("evaluate", "--from", tmp_path / "rec.json", "--json")
    again = json.loads(res.stdout)
    assert again["tokens_per_s_per_gpu"] == pytest.approx(data["results"][0]["tokens_per_s_per_gpu"], rel=1e-12)
    assert "not there" not in res.output


def test_evaluate_from_and_calibration_replaces_the_records_constants_as_evaluate_prices_them(searched, tmp_path):
    tmp, _, data = searched
    other = _profile(tmp_path / "other.toml", value=0.35)
    from_rec = cli("evaluate", "--from", tmp / "res.json", "--rank", 1, "--calibration", other, "--json")
    lay = data["results"][0]["layout"]
    direct = cli("evaluate", *JOB, "--tp", lay["tp"], "--pp", lay["pp"], "--mbs", lay["mbs"], "--zero", lay["zero"],
                 "--recompute", lay["recompute"], "--calibration", other, "--json")
    a, b = json.loads(from_rec.stdout), json.loads(direct.stdout)
    assert a["layout"] == b["layout"]
    assert a["tokens_per_s_per_gpu"] == pytest.approx(b["tokens_per_s_per_gpu"], rel=1e-12)
    assert a["calibration_constants"] == {"attention_efficiency": 0.35}
    # and without the flag the record's own constants price it: the search row's number
    own = json.loads(cli("evaluate", "--from", tmp / "res.json", "--rank", 1, "--json").stdout)
    assert own["tokens_per_s_per_gpu"] == pytest.approx(data["results"][0]["tokens_per_s_per_gpu"], rel=1e-12)


def test_text_outputs_name_the_constants_that_differ_from_shipped(searched):
    tmp, prof, _ = searched
    want = f"constants from calibration profile {prof}: attention_efficiency {ATTENTION:g} " \
           f"(shipped {DEFAULT.attention_efficiency:g})"
    assert want in cli("evaluate", "--from", tmp / "res.json", "--rank", 1).stdout
    assert want in cli("search", *JOB, "--top", "1", "--calibration", prof, "--no-progress").stdout


def test_sweep_prices_with_the_profile_as_evaluate_does(searched, tmp_path):
    tmp, prof, data = searched
    res = cli("sweep", *JOB, "--calibration", prof, "--json", "--no-progress")
    out = json.loads(res.stdout)
    best = out["scenarios"][0]["best"]
    assert best["calibration_constants"] == {"attention_efficiency": ATTENTION}
    assert out["stats"]["spec"]["calibration"] == {"profile": str(prof), "constants": {"attention_efficiency": ATTENTION}}
    lay = best["layout"]
    direct = json.loads(cli("evaluate", *JOB, "--tp", lay["tp"], "--pp", lay["pp"], "--mbs", lay["mbs"],
                            "--zero", lay["zero"], "--recompute", lay["recompute"], "--calibration", prof,
                            "--json").stdout)
    assert best["tokens_per_s_per_gpu"] == pytest.approx(direct["tokens_per_s_per_gpu"], rel=1e-12)
    assert best["tokens_per_s_per_gpu"] == pytest.approx(data["results"][0]["tokens_per_s_per_gpu"], rel=1e-12)
    text = cli("sweep", *JOB, "--calibration", prof, "--no-progress").stdout
    assert f"constants from calibration profile {prof}: attention_efficiency {ATTENTION:g}" in text
    assert "constants: shipped" in cli("sweep", *JOB, "--no-progress").stdout


def test_a_profile_fitted_on_other_gpus_warns(tmp_path):
    prof = _profile(tmp_path / "a100.toml", gpus=["a100-80gb"])
    res = cli("evaluate", *JOB, "--calibration", prof)
    assert f"calibration profile {prof} was fitted on runs on a100-80gb only, not on h100-sxm" in res.output
    same = _profile(tmp_path / "h100.toml", gpus=["h100-sxm"])
    assert "fitted on runs on" not in cli("evaluate", *JOB, "--calibration", same).output
    sweep = cli("sweep", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100,b200", "--seq-len", "4096", "--gbs", "64",
                "--calibration", same, "--no-progress")
    assert "fitted on runs on h100-sxm only, not on b200" in sweep.output and "not on h100-sxm" not in sweep.output


def test_a_stored_sweep_keeps_its_constants(tmp_path):
    res = cli("sweep", "--storage", tmp_path / "s.log", "--calibration", _profile(tmp_path / "p.toml"), code=2)
    assert "--calibration" in res.output and "goes with the scenario axes" in res.output


def test_a_record_with_bad_constants_is_one_line_exit_2(searched, tmp_path):
    tmp, _, data = searched
    (tmp_path / "bad.json").write_text(json.dumps(dict(data["results"][0], calibration_constants={"nonsense": 1.0})))
    res = cli("evaluate", "--from", tmp_path / "bad.json", code=2)
    assert re.search(r"calibration_constants\.nonsense: not a fitted constant", res.output)


def test_sweep_json_warns_on_stderr_and_in_its_stats_as_search_json_does(tmp_path):
    """``sweep --json``: the warning about a GPU type the profile was not fitted on goes to stderr (stdout
    is the JSON) and into the stats as ``calibration_warning``, as ``search --json`` puts it."""
    same = _profile(tmp_path / "h100.toml", gpus=["h100-sxm"])
    res = cli("sweep", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100,b200", "--seq-len", "4096", "--gbs", "64",
              "--calibration", same, "--no-progress", "--json")
    line = f"warning: calibration profile {same} was fitted on runs on h100-sxm only, not on b200"
    assert res.stderr.strip() == line
    out = json.loads(res.stdout)
    assert out["stats"]["calibration_warning"] == line
    searched = cli("search", "--model", "llama3-8b", "--gpus", "8", "--gpu", "b200", "--seq-len", "4096", "--gbs", "64",
                   "--calibration", same, "--no-progress", "--json")
    assert json.loads(searched.stdout)["stats"]["calibration_warning"] == line and line in searched.stderr
    quiet = cli("sweep", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--seq-len", "4096", "--gbs", "64",
                "--calibration", same, "--no-progress", "--json")
    assert "calibration_warning" not in json.loads(quiet.stdout)["stats"] and "fitted on" not in quiet.stderr


def test_a_record_whose_fitted_gpus_is_not_a_list_is_one_line_exit_2(searched, tmp_path):
    """calibration_fitted_gpus is a list of GPU type names (as ``stamp`` writes it); a bare string
    was read one character per type ("fitted on runs on a, 1, 0, 0")."""
    tmp, _, data = searched
    (tmp_path / "bad.json").write_text(json.dumps(dict(data["results"][0], calibration_fitted_gpus="a100")))
    res = cli("evaluate", "--from", tmp_path / "bad.json", code=2)
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "calibration_fitted_gpus: expected a list of GPU type names" in lines[0]
    assert "a, 1, 0, 0" not in res.output
    (tmp_path / "ok.json").write_text(json.dumps(dict(data["results"][0], calibration_fitted_gpus=["a100-80gb"])))
    assert "was fitted on runs on a100-80gb only, not on h100-sxm" in cli("evaluate", "--from", tmp_path / "ok.json").output
