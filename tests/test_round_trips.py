"""Every output reusable: a search's JSON and CSV rows, read back with ``--from FILE --rank N``,
reproduce rank N exactly through ``evaluate`` and ``export``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel.options import RECORDED_OPTIONS
from planner.cli.main import app

runner = CliRunner()
PREDICTION = ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "fits")


def cli(*args):
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code in (0, 3), res.output
    return res


@pytest.fixture(scope="module")
def search(tmp_path_factory):
    """A search whose top layouts differ in degrees, vpp and partial recompute (the search chooses
    the recompute mode: a pinned --recompute full recomputes every layer)."""
    tmp = tmp_path_factory.mktemp("rt")
    res = cli("search", "--model", "70b", "--gpus", "32", "--gpu", "h100", "--pp", "4",
              "--top", "6", "--json", "--csv", tmp / "s.csv", "--no-progress")
    (tmp / "s.json").write_text(res.stdout)
    results = json.loads(res.stdout)["results"]
    assert any(r["layout"]["recompute_layers"] for r in results) and len({r["layout"]["vpp"] for r in results}) > 1
    return tmp, results


@pytest.mark.parametrize("source", ["s.json", "s.csv"])
def test_evaluate_from_a_search_file_reproduces_every_rank(search, source):
    tmp, results = search
    for rec in results:
        again = json.loads(cli("evaluate", "--from", tmp / source, "--rank", rec["rank"], "--json").stdout)
        assert again["layout"] == rec["layout"], rec["rank"]
        for key in PREDICTION:
            assert again[key] == rec[key], (rec["rank"], key)
        assert again["memory_gib"] == rec["memory_gib"] and again["breakdown"] == rec["breakdown"]


def test_the_csv_carries_every_knob_in_the_json_units(search):
    import csv

    tmp, results = search
    rows = list(csv.DictReader((tmp / "s.csv").open()))
    for rec, row in zip(results, rows):
        for opt in RECORDED_OPTIONS:
            value = rec["layout"][opt.name]
            shown = "" if value is None else "+".join(value) if isinstance(value, list) else str(value)
            assert row[opt.name] == shown, (opt.name, row[opt.name], value)
        assert float(row["headroom_gib"]) == rec["headroom_gib"]


def test_export_from_json_and_csv_writes_the_same_files(search, tmp_path):
    tmp, results = search
    for rec in results[:3]:
        a, b = tmp_path / f"j{rec['rank']}", tmp_path / f"c{rec['rank']}"
        cli("export", "--from", tmp / "s.json", "--rank", rec["rank"], "--out", a)
        cli("export", "--from", tmp / "s.csv", "--rank", rec["rank"], "--out", b)
        names = sorted(p.name for p in a.iterdir())
        assert names == sorted(p.name for p in b.iterdir())
        for name in names:
            # Identical but for the command that wrote them.
            strip = lambda text: [line for line in text.splitlines() if "Command: planner export" not in line]  # noqa: E731
            assert strip((a / name).read_text()) == strip((b / name).read_text()), name
        header = (a / "launch_torchrun.sh").read_text()
        assert f"step {rec['step_time_s']:.3f} s" in header


def test_evaluate_json_round_trips_through_from(tmp_path):
    first = cli("evaluate", "--model", "8b", "--gpus", "16", "--gpu", "h100", "--tp", "2", "--pp", "2", "--vpp", "2",
                "--recompute", "full", "--recompute-layers", "4", "--gbs", "64", "--json").stdout
    (tmp_path / "e.json").write_text(first)
    again = cli("evaluate", "--from", tmp_path / "e.json", "--json").stdout
    a, b = json.loads(first), json.loads(again)
    a.pop("command"), b.pop("command")
    assert a == b


def test_older_search_records_with_quarter_shares_are_read_as_layers_per_stage(tmp_path):
    # Before issue 16 a search wrote partial recompute as -q (q quarters of a stage's chunk).
    # 8B, pp 2 -> 16 layers a stage, vpp 2 -> chunks of 8; -2 = half a chunk = 4 layers, x 2
    # chunks = 8 layers per stage.
    rec = json.loads(cli("evaluate", "--model", "8b", "--gpus", "16", "--gpu", "h100", "--tp", "2", "--pp", "2",
                         "--vpp", "2", "--recompute", "full", "--recompute-layers", "8", "--gbs", "64", "--json").stdout)
    old = json.loads(json.dumps(rec))
    old["layout"]["recompute_layers"] = -2
    (tmp_path / "old.json").write_text(json.dumps({"results": [{**old, "rank": 1}], "stats": {}}))
    again = json.loads(cli("evaluate", "--from", tmp_path / "old.json", "--rank", "1", "--json").stdout)
    assert again["layout"]["recompute_layers"] == 8 and again["step_time_s"] == rec["step_time_s"]
