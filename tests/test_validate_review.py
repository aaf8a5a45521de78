"""A user's own runs through validate and calibrate: what the table shows for rows as people
write them (review of the runs-file path)."""

from __future__ import annotations

from planner.validate.predict import RowResult
from planner.validate.report import format_table, summarize


def _row(rid, source, reported, predicted):
    return RowResult(id=rid, source=source, confidence="high", gpus=8, reported=reported, predicted=predicted,
                     error=(predicted - reported) / reported, layout="TP1 PP1 DP8")


def test_a_long_source_name_and_a_huge_error_stay_apart_from_their_neighbours():
    """'our cluster, Megatron-LM core_r0.9' is 34 characters: it used to run into its row count
    ('core_r0.91 rows'), and an error past 999.9% into the prediction ('8108.4+25882.1%')."""
    source = "our cluster, Megatron-LM core_r0.9"
    results = [_row("ok", source, 1000.0, 1100.0), _row("ms-as-s", source, 31.2, 8108.4)]
    text = format_table(results, summarize(results))
    assert f"  {source}  2 rows:" in text
    row = next(line for line in text.splitlines() if line.startswith("ms-as-s"))
    assert row.split()[-2:] == ["8108.4", "+25888%"]  # (8108.4 - 31.2) / 31.2 = +25888%


GOOD = {"gpu": "h100", "num_gpus": 8, "model": "llama3-8b", "tp": 1, "pp": 1, "gbs": 64, "seq_len": 8192,
        "tokens_per_s_per_gpu": 7000}


def _cli(*args):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def test_commands_without_skip_invalid_do_not_offer_it(tmp_path):
    """--cross-validate and the envelope read runs files through load_runs and take no
    --skip-invalid; the error offers it only where a command takes it (validate's table, calibrate)."""
    import json

    import pytest

    from hardware_catalog.errors import PlannerInputError
    from planner.validate.runs import load_runs, read_runs

    path = tmp_path / "runs.json"
    path.write_text(json.dumps([{**GOOD, "id": "ok"}, {**GOOD, "id": "pct", "mfu": 45}]))
    with pytest.raises(PlannerInputError) as err:
        load_runs(path)
    assert "field measured.mfu" in str(err.value) and "skip-invalid" not in str(err.value)
    with pytest.raises(PlannerInputError, match="--skip-invalid leaves them out"):
        read_runs(path)  # validate's table and calibrate take it


def test_calibrate_skip_invalid_fits_the_other_rows(tmp_path):
    """One refused row (an MFU of 45 for 45%) blocked calibrate's whole file: --skip-invalid
    leaves it out, says so on stderr, and fits the rest, as validate's table does."""
    import json

    path = tmp_path / "runs.json"
    path.write_text(json.dumps([{**GOOD, "id": "ok"}, {**GOOD, "id": "pct", "mfu": 45}]))
    code, _, err = _cli("calibrate", "--runs", str(path))
    assert code == 2 and "--skip-invalid" in err
    code, out, err = _cli("calibrate", "--runs", str(path), "--skip-invalid", "--json")
    assert code == 0, err
    assert "skipped" in err and "pct" in err
    assert [r["id"] for r in json.loads(out)["rows"]] == ["ok"]


def test_calibration_is_refused_where_it_would_be_ignored(tmp_path):
    """--ranking and --write-envelope judge the shipped model: a --calibration profile beside them
    was read and not used (the output byte for byte the same)."""
    profile = tmp_path / "p.toml"
    profile.write_text("[constants]\n")
    for extra in (["--ranking", "planner/data/ablations.json"], ["--write-envelope", str(tmp_path / "e.json")]):
        code, out, err = _cli("validate", "--calibration", str(profile), *extra)
        assert code == 2 and "--calibration goes with the validate table" in err and extra[0] in err
        assert not (tmp_path / "e.json").exists()


def test_calibrate_json_prints_json_when_no_row_maps(tmp_path):
    import json

    path = tmp_path / "runs.json"
    path.write_text(json.dumps([{k: v for k, v in GOOD.items() if k != "gbs"}]))
    code, out, err = _cli("calibrate", "--runs", str(path), "--json")
    assert code == 3 and "no row" in err
    data = json.loads(out)  # it used to print the 'not mapped' lines as text
    assert data["rows"] == [] and "global batch size not published" in data["notes"][0]


def test_a_users_table_lists_only_the_families_its_runs_are_in():
    """Two dense runs on 8 GPUs: no family applies; the table used to end in four 'no rows'
    lines (MoE, > 4,096 GPUs, long context, ZeRO-3 on thin networks). The reference set's
    table keeps them all."""
    results = [_row("a", "s", 1000.0, 1100.0), _row("b", "s", 1000.0, 950.0)]
    summary = summarize(results)
    assert "no rows" not in format_table(results, summary, users=True)
    assert format_table(results, summary).count("no rows") == len(summary["families"]) >= 4


def test_a_runs_file_with_a_byte_order_mark_is_read(tmp_path):
    """Notepad and PowerShell's Out-File write UTF-8 with a BOM; it used to be refused as 'not
    valid JSON (Unexpected UTF-8 BOM (decode using utf-8-sig) ...)'."""
    import json

    from planner.validate.runs import load_runs

    path = tmp_path / "runs.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([GOOD]).encode())
    assert load_runs(path) == [GOOD]


def test_a_json_syntax_error_names_line_and_column(tmp_path):
    """A runs file is often one long line: 'at line 1' alone does not find a trailing comma."""
    import pytest

    from hardware_catalog.errors import PlannerInputError
    from planner.validate.runs import load_runs

    path = tmp_path / "runs.json"
    path.write_text('[{"id": "a", "gpu": "H100",}]')  # the comma before '}' is character 27; '}' is column 28
    with pytest.raises(PlannerInputError, match="at line 1 column 28"):
        load_runs(path)
