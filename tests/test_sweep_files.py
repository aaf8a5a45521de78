"""`planner sweep`'s files: a --storage file that is not what its form says is refused and left as
it is; a journal one sweep wrote is joined by the next; a sweep where nothing fits writes its CSV
(the answer), draws no plot and exits 3."""

from __future__ import annotations

import csv
import json

import pytest
from typer.testing import CliRunner

from planner.cli.main import app

SWEEP = ["sweep", "--model", "8b", "--gpus", "64", "--gpu", "h100", "--no-progress"]  # one quick scenario


def sweep(*args):
    return CliRunner().invoke(app, [*SWEEP, *args])


def refused(res, needle: str) -> None:
    """Exit 2 with one line on stderr, which names ``needle`` (the file), and nothing on stdout."""
    assert res.exit_code == 2, res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --storage "), res.stderr
    assert needle in lines[0], res.stderr
    assert res.stdout == ""


@pytest.mark.parametrize("name,content,why", [
    ("notes.log", b"notes\n", 'is not an Optuna journal file (line 1 is not a JSON object with "op_code")'),
    ("data.log", b'{"a": 1}\n', 'is not an Optuna journal file (line 1 is not a JSON object with "op_code")'),
    ("notes.db", b"notes\n", 'is not an Optuna SQLite database (it does not start with the SQLite header'),
])
def test_a_file_that_is_not_what_storage_says_is_refused_and_left_byte_for_byte(tmp_path, name, content, why):
    # The user's notes.log got a {"op_code":0,...} line appended, and the error blamed --study-name.
    path = tmp_path / name
    path.write_bytes(content)
    res = sweep("--storage", str(path), "--study-name", "z")
    refused(res, f"--storage '{path}' {why}")
    assert "--study-name" not in res.stderr
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no lock file, no journal, nothing else


def test_a_journal_one_sweep_wrote_is_joined_by_the_next_and_refused_once_text_is_added(tmp_path):
    log = tmp_path / "s.log"
    first = sweep("--storage", str(log), "--study-name", "t")
    assert first.exit_code == 0, first.output
    written = log.read_bytes()
    assert written.startswith(b'{"op_code":0,') and written.endswith(b"\n")
    again = CliRunner().invoke(app, ["sweep", "--storage", str(log), "--study-name", "t", "--report-only"])
    assert again.exit_code == 0, again.output
    assert "1 of 1 scenarios done" in again.stdout
    assert log.read_bytes() == written  # --report-only wrote nothing, not even a second CREATE_STUDY line
    rerun = sweep("--storage", str(log), "--study-name", "t")  # a worker joining the finished sweep
    assert rerun.exit_code == 0, rerun.output
    assert "every scenario was done before it started" in rerun.stdout
    # The same journal with a line of text after it: Optuna would read it, write, then fail.
    spoiled = written + b"notes\n"
    log.write_bytes(spoiled)
    lines = written.count(b"\n")
    res = sweep("--storage", str(log), "--study-name", "t")
    refused(res, f'is not an Optuna journal file (line {lines + 1} is not a JSON object with "op_code")')
    assert log.read_bytes() == spoiled


def test_a_directory_a_missing_folder_and_a_read_only_database_are_refused(tmp_path):
    optuna = pytest.importorskip("optuna")
    folder = tmp_path / "d.log"
    folder.mkdir()
    refused(sweep("--storage", str(folder)), f"--storage '{folder}' is a directory, not a journal file")
    missing = tmp_path / "nope" / "s.db"
    refused(sweep("--storage", str(missing)), f"directory {missing.parent} does not exist (nothing was created)")
    assert not missing.parent.exists()
    db = tmp_path / "s.db"
    optuna.storages.RDBStorage(f"sqlite:///{db}")  # a genuine (empty) Optuna SQLite storage
    before = db.read_bytes()
    url = f"sqlite:///file:{db}?mode=ro&uri=true"
    refused(sweep("--storage", url), "cannot write to the SQLite file (opened with mode=ro)")
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.log", "s.db"]


def test_the_study_name_is_blamed_only_for_the_study(tmp_path):
    """A journal line Optuna cannot read is a ValueError too (json.JSONDecodeError): it was shown
    as "--study-name 'z': Expecting value: line 1 column 1 (char 0) (use another --study-name)"."""
    from hardware_catalog.errors import PlannerInputError
    from search.storage import join_study

    class Unreadable:
        def get_study_id_from_name(self, name):
            raise json.JSONDecodeError("Expecting value", "notes", 0)

    with pytest.raises(PlannerInputError) as err:
        join_study(Unreadable(), "z", "planner_sweep", {}, url=str(tmp_path / "s.log"))
    assert str(err.value).startswith(f"--storage '{tmp_path / 's.log'}': cannot read it (JSONDecodeError")
    assert "--study-name" not in str(err.value)


@pytest.mark.parametrize("as_json", [False, True])
def test_a_sweep_where_nothing_fits_writes_its_csv_draws_no_plot_and_exits_3(tmp_path, as_json):
    # It exited 2 ("--plot ...: nothing to plot") after writing the CSV.
    table, picture = tmp_path / "s.csv", tmp_path / "s.png"
    args = ["sweep", "--model", "405b", "--gpus", "8", "--gpu", "h100", "--no-progress",
            "--csv", str(table), "--plot", str(picture)] + (["--json"] if as_json else [])
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 3, res.output
    assert "--plot: not drawn: no scenario found a layout that fits" in res.stderr.splitlines()
    assert "error" not in res.stderr
    assert not picture.exists()
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == 1 and rows[0]["scenario_model"] == "llama3-405b" and rows[0]["status"] == "nothing fits"
    assert rows[0]["reason"].startswith("no layout fits in memory")
    if as_json:
        out = json.loads(res.stdout)
        assert out["scenarios"][0]["status"] == "nothing fits"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.csv"]


def test_sweep_csv_names_each_column_once(tmp_path):
    # The sweep's run goodput went into a second 'goodput' column beside the search's own.
    import subprocess
    import sys

    out = tmp_path / "s.csv"
    proc = subprocess.run([sys.executable, "-m", "planner", "sweep", "--model", "8b", "--gpus", "64", "--gpu", "h100",
                           "--train-tokens", "1T", "--price-per-gpu-hour", "2", "--csv", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    head, row = list(csv.reader(out.open()))[:2]
    assert len(head) == len(set(head))
    cells = dict(zip(head, row))
    # wall time = training time / goodput: 1e12 tokens over the scenario's tokens/s.
    goodput = float(cells["goodput"])
    assert 0.9 < goodput < 1.0
    assert float(cells["run_time_s"]) == pytest.approx(1e12 / float(cells["tokens_per_s"]) / goodput, rel=1e-6)


@pytest.mark.parametrize("command", [SWEEP, ["search", "--model", "8b", "--gpus", "8", "--gpu", "h100",
                                             "--method", "optuna", "--trials", "5"]])
@pytest.mark.parametrize("name", ["", "a" * 513])
def test_a_bad_study_name_is_refused_before_the_storage_file_exists(tmp_path, command, name):
    # search created an empty journal (and a 120 kB SQLite database) before refusing the name, and an
    # empty name was quietly taken as the default study.
    log = tmp_path / "s.log"
    res = CliRunner().invoke(app, [*command, "--storage", str(log), "--study-name", name])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: --study-name ") and "1 to 512 characters" in res.stderr
    assert list(tmp_path.iterdir()) == []
